// Persistent form of the warp-specialised wgmma grouped MXFP4 expert GEMM, for decode steps (issue
// 15 item 2: a few to a few dozen rows per expert). The operands, rows, dequantisation and epilogue
// building blocks are those of moe_wgmma_ws_sm90.cu (moe_wgmma_common.cuh); what differs is the CTA's
// life and the split of its rows over the consumers.
//
// Why: at decode shapes every expert's weights are read once and the GEMM is a weight stream. The
//   one-tile-per-CTA form launches ~4,000 CTAs per GEMM at batch 256 (8.4 or 4.2 us of streaming
//   each), each starting with an empty pipeline and ending in its epilogue with nothing in flight.
//   Removing that ramp gained ~5% of the GEMM, not the half predicted (ledger E56); what limited it
//   was the consumers' per-block latency chain, which the four consumer warpgroups below address.
// Here one CTA per SM walks the work items i = blockIdx.x, + gridDim.x, ... (item = (balanced tile
//   of at most NT rows, 256-row column block); neighbouring CTAs share a tile, so its x rows come from
//   L2), and the producer warpgroup runs on into the next item while the consumers finish this one.
// Per item the producer stages, into one of two buffers (n & 1 for the CTA's n-th item): the scales
//   of the CTA's 256 weight rows over all K (cp.async), the item's shape (width, live rows, first
//   permuted row, first column) and its tokens' routing weights (st.shared). It fetches the next
//   item's metadata in steps spread over the current item's k blocks (tile entry, then expert
//   offset and count, then the token ids and routing weights), so no dependent global load sits on
//   the path between two items. Barriers: full[s] / empty[s] for the slot ring (as the ws form;
//   the ring's counter runs on across items), sfull[b] (128 cp.async arrivals + 128 plain arrivals
//   after the st.shared writes) and sempty[b] (one arrival per consumer warp after the item's
//   epilogue, the last reader of its routing weights).
// Shared memory: the slots, 2 scale buffers, the gate-up epilogue's h tile (its own: the slots are
//   being refilled for the next item while the epilogue runs), the up tiles' accumulators handed to
//   the gate tiles, 2 x NT routing weights, 2 item records, the barriers.
#include "kernels/cuda/common/mbarrier.cuh"
#include "kernels/cuda/moe/moe_sm90.h"
#include "kernels/cuda/moe/moe_tile_list.cuh"
#include "kernels/cuda/moe/moe_wgmma_common.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::sm90 {
namespace {

// Four consumer warpgroups, one m64 tile of the CTA's 256 weight rows each (the ws form: two of two
// tiles). Why (ncu, ledger E56): at 8 token columns the consumers' wgmmas are tiny and each k block
// is a latency chain (shared loads, dequantisation, the wgmma wait) that 2 warps per scheduler could
// not hide; the producer waited on empty slots 13% of its time. Four warpgroups halve each warp's
// chain and double the warps per scheduler.
constexpr int kConsumers = 4, kThreads = 128 * (1 + kConsumers), kRows = 256;
// setmaxnreg.inc takes registers only from those the CTA's own setmaxnreg.dec released: launched at
// 96 per thread (65,536 / 640 rounded down to 8), the producer's 128 x 40 released registers give the
// consumers 8 more each (112 deadlocked: the inc waited for registers no one would release).
constexpr int kProducerRegs = 56, kConsumerRegs = 104;

// The shape of one work item as the producer publishes it to the consumers.
struct ItemInfo {
    int w, live, p0, c0;
};

// Byte offsets of the dynamic shared memory (after 1,024-byte alignment).
struct PersistSmem {
    int slots, scales, hs, xch, tile_w, info, bars, total;
};
constexpr PersistSmem persist_smem(int nt, int stages, int K) {
    PersistSmem m{};
    m.slots = 0;
    m.scales = stages * stage_bytes(nt, 2);
    m.hs = m.scales + 2 * kRows * scale_stride(K);  // scale_stride: a multiple of 16 for K % 512 == 0
    m.xch = m.hs + nt * hs_stride(2) * 2;           // bf16 h tile, rows of 16-byte units
    m.tile_w = m.xch + 2 * (nt / 2) * 128 * 4;      // up accumulators: [2 pairs][nt / 2][128] f32
    m.info = m.tile_w + 2 * nt * 4;
    m.bars = m.info + 2 * int(sizeof(ItemInfo));  // 8-byte aligned: everything above is
    m.total = m.bars + (2 * stages + 4) * 8;      // full[], empty[], sfull[2], sempty[2]
    return m;
}
constexpr int persist_smem_bytes(int nt, int stages, int K) { return 1024 + persist_smem(nt, stages, K).total; }

// Block kb's 4 k16 wgmmas of one m64 tile, W tokens wide, on the x tile at x_addr; one commit group.
template <int W>
__device__ __forceinline__ void mma_tile(float (&acc)[W / 2], const uint32_t (&A)[4][4], uint32_t x_addr) {
    const uint64_t desc = dev::wgmma_desc_k128(x_addr);
#pragma unroll
    for (int i = 0; i < W / 2; ++i) dev::wgmma_pin(acc[i]);
    dev::wgmma_fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) dev::WgmmaRs<W>::run(acc, A[s], desc + 2 * s);  // +32 B per k16
    dev::wgmma_commit();
}

// The consumer warpgroups' part for one item computed W token columns wide: the k loop over the
// slots (ring counter it0 at the item's first block), then the epilogue. sc: the item's scale buffer.
template <bool GATEUP, bool PK, int NT, int STAGES, int W>
__device__ __forceinline__ void consume_item(const MoeExpertArgs& a, unsigned char* smem, const PersistSmem& L,
                                             const ItemInfo* mi, const unsigned char* sc, const float* tile_w,
                                             uint64_t* full, uint64_t* empty, uint32_t it0, int tid) {
    static_assert(W % 8 == 0 && W >= 8 && W <= NT, "the width is a multiple of 8 up to the tile");
    constexpr int kStage = stage_bytes(NT, 2), kX = NT * 128;
    const int K = a.K, nkb = K / 64, sstride = scale_stride(K);
    // Warpgroup q = wg - 1 computes m64 tile q: for gate-up w1 (q even) or w3 (q odd) of h columns
    // 64 (q >> 1) .., for down output rows 64 q ..
    const int q = (tid >> 7) - 1, lane = tid & 31, wq = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    float acc[1][W / 2];
#pragma unroll
    for (int i = 0; i < W / 2; ++i) acc[0][i] = 0.0f;
    const uint32_t x_base = dev::smem_addr(smem + L.slots);
    auto acquire = [&](int kb, uint32_t(&A)[1][4][4]) {
        const uint32_t r = it0 + uint32_t(kb);
        const int s = int(r % STAGES);
        dev::mbar_wait(&full[s], (r / STAGES) & 1);
        dev::fence_proxy_async_smem();
        dequant_tiles<PK, 1>(smem + L.slots + s * kStage + kX, sc, sstride, kb, q, wq, g, t, A);
    };
    // One A buffer: block kb's wgmmas retire before block kb + 1 is dequantised into it. The other
    // three consumer warps of the scheduler cover that wait (with a second buffer ptxas needs more
    // than 128 registers and serialises the wgmmas below that).
    uint32_t A[1][4][4];
    for (int kb = 0; kb < nkb; ++kb) {
        acquire(kb, A);
        mma_tile<W>(acc[0], A[0], x_base + ((it0 + uint32_t(kb)) % STAGES) * kStage);
        dev::wgmma_wait<0>();
        __syncwarp();
        if (lane == 0) dev::mbar_arrive(&empty[(it0 + uint32_t(kb)) % STAGES]);
    }
#pragma unroll
    for (int i = 0; i < W / 2; ++i) dev::wgmma_pin(acc[0][i]);

    // The item's shape read back from shared memory here, not held through the k loop (registers).
    const ItemInfo m = *mi;
    if constexpr (GATEUP) {
        // The up tile (q odd) hands its accumulators to the gate tile (q even) of the same 64 columns,
        // which forms h; every consumer then stores h. Barrier 1 (the 512 consumer threads) also
        // orders the previous item's reads of hs before this item's writes.
        float* xch = reinterpret_cast<float*>(smem + L.xch) + (q >> 1) * (NT / 2) * 128 + (tid & 127);
        if (q & 1) {
#pragma unroll
            for (int i = 0; i < W / 2; ++i) xch[i * 128] = acc[0][i];
        }
        dev::named_barrier_sync(1, 128 * kConsumers);
        __nv_bfloat16* hs = reinterpret_cast<__nv_bfloat16*>(smem + L.hs);
        if (!(q & 1)) {
            float gu[2][W / 2];
#pragma unroll
            for (int i = 0; i < W / 2; ++i) {
                gu[0][i] = acc[0][i];
                gu[1][i] = xch[i * 128];
            }
            gateup_to_smem<W, 2>(gu, a, m.p0, m.live, q >> 1, wq, g, t, hs, m.live, tile_w);
        }
        dev::named_barrier_sync(1, 128 * kConsumers);
        gateup_smem_to_global<2>(hs, a, m.p0, m.live, m.c0, tid - 128, 128 * kConsumers);
    } else {
        down_tiles_to_global<W, 1>(acc, a, m.p0, m.live, m.c0, q, wq, g, t);
    }
}

template <bool GATEUP, bool PK, int NT, int STAGES>
__global__ void __launch_bounds__(kThreads, 1) moe_wgmma_persist_kernel(MoeExpertArgs a) {
    dev::pdl_begin();
    static_assert(STAGES >= 2 && NT % 16 == 0 && NT <= 64,
                  "a ring of >= 2 slots, x copied 16 rows at a time, the widths switched below");
    constexpr int kStage = stage_bytes(NT, 2), kX = NT * 128;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = dev::align_smem_1024(smem_raw);
    const PersistSmem L = persist_smem(NT, STAGES, a.K);
    const int tid = threadIdx.x, wg = tid >> 7;
    const int K = a.K, nkb = K / 64, sstride = scale_stride(K);
    const int cols = GATEUP ? kRows / 2 : kRows, col_blocks = a.N / cols;
    const int n_items = *a.n_tiles * col_blocks;
    unsigned char* const scales = smem + L.scales;
    float* const tile_w = reinterpret_cast<float*>(smem + L.tile_w);
    ItemInfo* const info = reinterpret_cast<ItemInfo*>(smem + L.info);
    uint64_t* const full = reinterpret_cast<uint64_t*>(smem + L.bars);
    uint64_t* const empty = full + STAGES;
    uint64_t* const sfull = empty + STAGES;
    uint64_t* const sempty = sfull + 2;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            dev::mbar_init(&full[s], 128);
            dev::mbar_init(&empty[s], 4 * kConsumers);  // one arrival per consumer warp
        }
        for (int b = 0; b < 2; ++b) {
            dev::mbar_init(&sfull[b], 256);
            dev::mbar_init(&sempty[b], 4 * kConsumers);
        }
    }
    __syncthreads();

    if (wg == 0) {  // producer
        dev::setmaxnreg_dec<kProducerRegs>();
        const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
        // x unit xu of rows xm0 + 16 j, code unit tid & 1 of weight rows (tid >> 1) + 64 j (as the ws form).
        constexpr int XJ = NT / 16, CJ = kRows * 2 / 128;
        const int xm0 = tid >> 3, xu = tid & 7;
        const int xdst = xm0 * 128 + ((xu ^ (xm0 & 7)) << 4);
        const int cdst = kX + (tid >> 1) * 32 + (tid & 1) * 16;
        // The next item's metadata, fetched in steps: its tile entry, expert offset and count, token ids.
        int32_t nx_entry = 0, nx_off = 0, nx_cnt = 0, nx_tok[XJ];
        float nx_w = 0.0f;
        ItemInfo nx{};
        int nx_e = 0;
        // Item i: balanced tile i / col_blocks, column block i % col_blocks.
        auto fetch_entry = [&](int i) { nx_entry = a.tile_list[i / col_blocks]; };
        auto fetch_expert = [&]() {
            nx_e = balanced_expert(nx_entry);
            nx_off = a.expert_offset[nx_e];
            nx_cnt = a.expert_count[nx_e];
        };
        // Shape of item i from its entry and expert; issues its token-id and routing-weight loads.
        auto fetch_tokens = [&](int i) {
            const BalancedEntry be = balanced_decode(nx_entry, nx_cnt);
            nx.w = be.w;
            nx.live = be.live;
            nx.p0 = nx_off + be.t0;
            nx.c0 = (i % col_blocks) * cols;
#pragma unroll
            for (int j = 0; j < XJ; ++j) {
                const int p = nx.p0 + min(xm0 + 16 * j, nx.live - 1);  // dead rows repeat the last live one
                nx_tok[j] = GATEUP ? a.perm_token[p] : p;
            }
            if (GATEUP && tid < nx.w) nx_w = a.perm_w[nx.p0 + min(tid, nx.live - 1)];
        };
        // Scales of item n (first column c0, expert e) into buffer n & 1, once its previous user (item n - 2) is done.
        auto stage_scales = [&](int n, int e, int c0) {
            const int b = n & 1;
            if (n >= 2) dev::mbar_wait(&sempty[b], ((n - 2) >> 1) & 1);
            const int units = K / 512;  // 16-byte units of scale bytes per row
            for (int q = tid; q < kRows * units; q += 128) {
                const int r = q / units, u = q % units;
                const uint8_t *W, *Sc;
                const int64_t row = weight_row<GATEUP>(a, e, c0, r, W, Sc);
                dev::cp_async16(scales + b * kRows * sstride + r * sstride + u * 16, Sc + row * (K / 32) + u * 16, 16);
            }
            dev::mbar_arrive_cp_async(&sfull[b]);
        };
        // Item n's shape and routing weights for the consumers (after the token loads have returned).
        auto publish = [&](int n) {
            const int b = n & 1;
            if (GATEUP && tid < nx.w) tile_w[b * NT + tid] = nx_w;
            if (tid == 0) info[b] = nx;
            dev::mbar_arrive(&sfull[b]);
        };

        int i = blockIdx.x;
        if (i < n_items) {  // the first item's metadata: a dependent chain, paid once per CTA
            fetch_entry(i);
            fetch_expert();
            fetch_tokens(i);
            stage_scales(0, nx_e, nx.c0);
            publish(0);
        }
        uint32_t it = 0;
        for (int n = 0; i < n_items; i += gridDim.x, ++n) {
            const ItemInfo m = nx;
            const int e = nx_e;
            uint32_t xoff[XJ];  // elements: < 2^32 (rows x K)
#pragma unroll
            for (int j = 0; j < XJ; ++j) xoff[j] = uint32_t(nx_tok[j]) * uint32_t(K) + xu * 8;
            // Code unit j: weight row (tid >> 1) + 64 j of the CTA, i.e. for gate-up m64 tile j (w1 when
            // even, w3 when odd) of column c0 + 64 (j >> 1) + (tid >> 1), for down row c0 + 64 j + (tid >> 1).
            // Two bases and one offset instead of CJ pointers (the producer's 56 registers).
            const uint8_t* cbase0 = a.w1 + (int64_t(e) * a.N + m.c0 + (tid >> 1)) * (K / 2) + (tid & 1) * 16;
            const uint8_t* cbase1 = GATEUP ? a.w3 + (cbase0 - a.w1) : cbase0 + 64 * (K / 2);
            constexpr int kPairStep = GATEUP ? 64 : 128;  // rows between units j and j + 2
            const int inext = i + gridDim.x;
            const bool more = inext < n_items;
            for (int kb = 0; kb < nkb; ++kb) {
                if (more) {  // the next item's metadata, spread over this item's blocks
                    if (kb == 0) fetch_entry(inext);
                    if (kb == nkb / 4) fetch_expert();
                    if (kb == nkb / 2) {
                        fetch_tokens(inext);
                        stage_scales(n + 1, nx_e, nx.c0);
                    }
                    if (kb == (3 * nkb) / 4) publish(n + 1);
                }
                const uint32_t s = it % STAGES;
                if (it >= STAGES) dev::mbar_wait(&empty[s], (it / STAGES - 1) & 1);
                unsigned char* st = smem + L.slots + s * kStage;
                const __nv_bfloat16* xk = x + kb * 64;
#pragma unroll
                for (int j = 0; j < XJ; ++j)
                    if (xm0 + 16 * j < m.w) dev::cp_async16(st + xdst + 2048 * j, xk + xoff[j], 16);
#pragma unroll
                for (int j = 0; j < CJ; ++j)
                    dev::cp_async16(st + cdst + 2048 * j,
                                    ((j & 1) ? cbase1 : cbase0) + (j >> 1) * kPairStep * (K / 2) + kb * 32, 16);
                dev::mbar_arrive_cp_async(&full[s]);
                ++it;
            }
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");  // nothing in flight when the CTA exits
        return;
    }

    // consumers
    dev::setmaxnreg_inc<kConsumerRegs>();
    uint32_t it = 0;
    int n = 0;
    for (int i = blockIdx.x; i < n_items; i += gridDim.x, ++n, it += uint32_t(nkb)) {
        const int b = n & 1;
        dev::mbar_wait(&sfull[b], (n >> 1) & 1);
        const unsigned char* sc = scales + b * kRows * sstride;
        const float* tw = tile_w + b * NT;
        switch (info[b].w >> 3) {
            // Macro-generated cases, which clang-format 14 does not format stably.
            // clang-format off
#define DSV4_WIDTH_CASE(W)                                                                                        \
    case W / 8:                                                                                                   \
        if constexpr (W <= NT)                                                                                    \
            consume_item<GATEUP, PK, NT, STAGES, W>(a, smem, L, &info[b], sc, tw, full, empty, it, tid);        \
        else                                                                                                      \
            __trap();                                                                                             \
        break;
            DSV4_WIDTH_CASE(8) DSV4_WIDTH_CASE(16) DSV4_WIDTH_CASE(24) DSV4_WIDTH_CASE(32) DSV4_WIDTH_CASE(40)
            DSV4_WIDTH_CASE(48) DSV4_WIDTH_CASE(56) DSV4_WIDTH_CASE(64)
#undef DSV4_WIDTH_CASE
            default: __trap();  // widths past NT never come (the work list caps them); skipping the ring would hang
            // clang-format on
        }
        // The item's buffer (scales, shape, routing weights) is free once the epilogue has read it.
        __syncwarp();
        if ((tid & 31) == 0) dev::mbar_arrive(&sempty[b]);
    }
}

template <bool GATEUP, bool PK, int NT, int STAGES>
cudaError_t launch_mode(const MoeExpertArgs& a, cudaStream_t s) {
    auto* k = moe_wgmma_persist_kernel<GATEUP, PK, NT, STAGES>;
    const int smem = persist_smem_bytes(NT, STAGES, a.K);
    cudaError_t err = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    tile_list_balanced_kernel<<<1, 1024, 0, s>>>(a.expert_count, a.n_experts, a.tile_list, a.n_tiles, NT);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const int col_blocks = a.N / (GATEUP ? kRows / 2 : kRows);
    const int64_t max_items = int64_t(moe_grouped_max_tiles(a.n_rows, a.n_experts, NT)) * col_blocks;
    if (max_items <= 0) return cudaSuccess;
    int dev = 0, sms = 0;
    if ((err = cudaGetDevice(&dev)) != cudaSuccess) return err;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return err;
    k<<<int(std::min<int64_t>(sms, max_items)), kThreads, smem, s>>>(a);
    return cudaGetLastError();
}
template <bool PK, int NT, int STAGES>
cudaError_t launch(const MoeExpertArgs& a, cudaStream_t s) {
    return a.mode == MoeExpertMode::kGateUp ? launch_mode<true, PK, NT, STAGES>(a, s)
                                            : launch_mode<false, PK, NT, STAGES>(a, s);
}

template <bool PK, int NT, int STAGES>
constexpr Entry entry() {
    MoeGroupedShape sh = ws_grouped_shape(PK, NT, STAGES, persist_smem_bytes(NT, STAGES, 4096));
    sh.persistent = true;
    return {sh, &launch<PK, NT, STAGES>};
}

// Tiles of at most 32 rows: a decode step's experts hold 1-12 rows each at batch 64-512 (uniform
// routing, top-6 of 256), 8 slots of 8 KB of codes in flight per SM (ledger E56: 10 slots 0.9%
// slower at batch 256; kept as a row for dsv4 tune).
const Entry kTable[] = {entry<true, 32, 8>(), entry<true, 32, 10>(), entry<false, 32, 8>()};

}  // namespace

int moe_wgmma_persist_count() { return int(sizeof(kTable) / sizeof(kTable[0])); }
MoeGroupedShape moe_wgmma_persist_shape(int i) { return kTable[i].shape; }
int moe_wgmma_persist_smem_bytes(int i, int K) {
    const MoeGroupedShape s = kTable[i].shape;
    return persist_smem_bytes(s.mt, s.stages, K);
}
cudaError_t moe_wgmma_persist_run(const MoeExpertArgs& a, int i, cudaStream_t stream) {
    if (i < 0 || i >= moe_wgmma_persist_count() || kTable[i].shape.layout != a.layout || !a.x_kperm)
        return cudaErrorInvalidValue;
    return kTable[i].fn(a, stream);
}

}  // namespace dsv4::cuda::sm90
