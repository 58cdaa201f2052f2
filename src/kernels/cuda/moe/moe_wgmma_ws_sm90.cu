// Warp-specialised form of the wgmma grouped MXFP4 expert GEMM (issue 22): the contract, operands,
// rows and epilogues of moe_wgmma_sm90.cu (moe_wgmma_common.cuh), with the loads taken off the
// computing warps and the CTA-wide barrier of every k block replaced by shared-memory barriers.
//
// Why: in the plain form (ncu, 4K-token prefill, ledger E37) the tensor pipe is busy 43% of the
//   time with 2 warps per scheduler and 0.35 eligible: every k block each warp issues its share of
//   the cp.async copies, waits for them, then meets the other warpgroup at __syncthreads before it
//   may dequantise the next block, so one slow warp stalls all eight. This form: 59% (gate-up 3.48
//   -> 2.51 ms at ncu's clocks).
// CTA: three warpgroups (384 threads). Warpgroup 0, the producer, gives registers back
//   (setmaxnreg 56) and fills a STAGES-deep ring of slots with cp.async, each thread signalling
//   slot s's mbarrier full[s] when its copies have landed (cp.async.mbarrier.arrive.noinc, 128
//   arrivals per phase). Warpgroups 1 and 2, the consumers (setmaxnreg 224), each own two m64
//   tiles of weight rows: wait full[s], dequantise the codes into registers, queue the block's 8
//   wgmmas behind the previous block's, retire that previous block (wait_group 1) and release its
//   slot (one arrival per consumer warp on empty[s], 8 per phase). The producer waits empty[s]
//   before refilling s. The scales of the CTA's rows over all K are staged once (mbarrier sbar).
// Visibility: cp.async writes through the generic proxy, wgmma reads through the async proxy, so
//   each consumer thread runs fence.proxy.async after it acquired full[s] and before the wgmmas.
#include "kernels/cuda/common/mbarrier.cuh"
#include "kernels/cuda/moe/moe_sm90.h"
#include "kernels/cuda/moe/moe_tile_list.cuh"
#include "kernels/cuda/moe/moe_wgmma_common.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::sm90 {
namespace {

constexpr int kThreads = 384, kRows = 256;
constexpr int kProducerRegs = 56,
              kConsumerRegs = 224;  // 128 x 56 + 256 x 224 <= 65,536 (40 / 232 spills in the producer)
// Dynamic shared memory: alignment slack, the slots, the scales of all K, the tile's x rows and
// their routing weights, the barriers (full[STAGES], empty[STAGES], sbar).
constexpr int ws_smem_bytes(int nt, int stages, int K) {
    return 1024 + stages * stage_bytes(nt, 2) + kRows * scale_stride(K) + nt * 8 + (2 * stages + 1) * 8;
}

// The consumer warpgroups' part of moe_wgmma_ws_kernel for a tile computed W token columns wide
// (W <= NT, a multiple of 8; W == NT for the fixed-width rows): the k loop over the slots the
// producer fills, then the epilogue. smem: the aligned dynamic shared memory of the kernel.
template <bool GATEUP, bool PK, int NT, int STAGES, int W>
__device__ __forceinline__ void consume(const MoeExpertArgs& a, unsigned char* smem, int p0, int live, int c0,
                                        int tid) {
    static_assert(W % 8 == 0 && W >= 8 && W <= NT, "the width is a multiple of 8 up to the tile");
    constexpr int kStage = stage_bytes(NT, 2), kX = NT * 128;
    const int K = a.K, nkb = K / 64, sstride = scale_stride(K);
    unsigned char* const scales = smem + STAGES * kStage;
    int32_t* const xrows = reinterpret_cast<int32_t*>(scales + kRows * sstride);
    const float* const tile_w = reinterpret_cast<const float*>(xrows + NT);
    uint64_t* const full = reinterpret_cast<uint64_t*>(xrows + 2 * NT);
    uint64_t* const empty = full + STAGES;
    uint64_t* const sbar = empty + STAGES;
    const int wg = tid >> 7, c = wg - 1, lane = tid & 31, wq = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    float acc[2][W / 2];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < W / 2; ++i) acc[m][i] = 0.0f;
    const uint32_t x_base = dev::smem_addr(smem);
    auto acquire = [&](int kb, uint32_t(&A)[2][4][4]) {
        const int s = kb % STAGES;
        dev::mbar_wait(&full[s], (kb / STAGES) & 1);
        dev::fence_proxy_async_smem();
        dequant_block<PK>(smem + s * kStage + kX, scales, sstride, kb, c, wq, g, t, A);
    };
    // Block kb from Acur while block kb + 1 is dequantised into Anext (whose block, kb - 1, has
    // retired by then: wait_group 1 after kb's group is queued).
    auto step = [&](int kb, uint32_t(&Acur)[2][4][4], uint32_t(&Anext)[2][4][4]) {
        mma_block<W>(acc, Acur, x_base + (kb % STAGES) * kStage);
        dev::wgmma_wait<1>();
        if (kb >= 1) {
            __syncwarp();
            if (lane == 0) dev::mbar_arrive(&empty[(kb - 1) % STAGES]);
        }
        if (kb + 1 < nkb) acquire(kb + 1, Anext);
    };
    uint32_t A0[2][4][4], A1[2][4][4];
    dev::mbar_wait(sbar, 0);
    acquire(0, A0);
    for (int kb = 0; kb < nkb; kb += 2) {
        step(kb, A0, A1);
        if (kb + 1 < nkb) step(kb + 1, A1, A0);
    }
    mma_retire_all<W>(acc);

    if constexpr (GATEUP) {
        static_assert(NT * hs_stride(2) * 2 <= STAGES * kStage, "h tile fits the pipeline's shared memory");
        __nv_bfloat16* hs = reinterpret_cast<__nv_bfloat16*>(smem);
        // Every consumer is done with the slots, and the producer's copies all landed before the
        // last full[] phase completed, so the slots are free.
        dev::named_barrier_sync(1, 256);
        gateup_to_smem<W, 2>(acc, a, p0, live, c, wq, g, t, hs, live, tile_w);
        dev::named_barrier_sync(1, 256);
        gateup_smem_to_global<2>(hs, a, p0, live, c0, tid - 128, 256);
    } else {
        down_to_global<W>(acc, a, p0, live, c0, c, wq, g, t);
    }
}

// BAL: the balanced work list (moe_tile_list.cuh): each tile has its own width w (a multiple of 8 up
// to NT = 128) and the wgmmas and x copies cover w token rows, not NT.
template <bool GATEUP, bool PK, int NT, int STAGES, bool BAL = false>
__global__ void __launch_bounds__(kThreads, 1) moe_wgmma_ws_kernel(MoeExpertArgs a) {
    dev::pdl_begin();
    static_assert(STAGES >= 2, "the producer fills one slot while the consumers read another");
    constexpr int kStage = stage_bytes(NT, 2), kX = NT * 128;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = dev::align_smem_1024(smem_raw);
    const int tile = blockIdx.y;
    if (tile >= *a.n_tiles) return;
    int e, t0, live, w = NT;
    if constexpr (BAL) {
        const BalancedEntry be = balanced_entry(a, tile);
        e = be.e, t0 = be.t0, live = be.live, w = be.w;
    } else {
        const TileEntry te = tile_entry(a, tile, NT);
        e = te.e, t0 = te.t0, live = te.live;
    }
    const int p0 = a.expert_offset[e] + t0;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int K = a.K, nkb = K / 64, sstride = scale_stride(K);
    const int c0 = blockIdx.x * (GATEUP ? kRows / 2 : kRows);
    unsigned char* const scales = smem + STAGES * kStage;
    int32_t* const xrows = reinterpret_cast<int32_t*>(scales + kRows * sstride);
    float* const tile_w = reinterpret_cast<float*>(xrows + NT);
    uint64_t* const full = reinterpret_cast<uint64_t*>(xrows + 2 * NT);
    uint64_t* const empty = full + STAGES;
    uint64_t* const sbar = empty + STAGES;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            dev::mbar_init(&full[s], 128);
            dev::mbar_init(&empty[s], 8);
        }
        dev::mbar_init(sbar, 128);
    }
    if (tid < NT) {
        const int p = p0 + min(tid, live - 1);  // dead rows repeat the last live one
        xrows[tid] = GATEUP ? a.perm_token[p] : p;
        if constexpr (GATEUP) tile_w[tid] = a.perm_w[p];
    }
    __syncthreads();

    if (wg == 0) {  // producer
        dev::setmaxnreg_dec<kProducerRegs>();
        const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
        {
            const int units = K / 512;  // 16-byte units of scale bytes per row
            for (int i = tid; i < kRows * units; i += 128) {
                const int r = i / units, u = i % units;
                const uint8_t *W, *Sc;
                const int64_t row = weight_row<GATEUP>(a, e, c0, r, W, Sc);
                dev::cp_async16(scales + r * sstride + u * 16, Sc + row * (K / 32) + u * 16, 16);
            }
            dev::mbar_arrive_cp_async(sbar);
        }
        // Each thread copies the same units at every block, so their offsets live in registers: x
        // unit u = tid & 7 of rows (tid >> 3) + 16 j (one swizzle for all of them: 16 j keeps m & 7),
        // code unit tid & 1 of rows (tid >> 1) + 64 j. (ncu, E37: recomputing them per copy from a
        // generic load of xrows made the producer the bottleneck, the consumers waiting on full[].)
        constexpr int XJ = NT / 16, CJ = kRows * 2 / 128;
        const int xm0 = tid >> 3, xu = tid & 7;
        uint32_t xoff[XJ];  // elements: < 2^32 (rows x K)
#pragma unroll
        for (int j = 0; j < XJ; ++j) xoff[j] = uint32_t(xrows[xm0 + 16 * j]) * uint32_t(K) + xu * 8;
        const int xdst = xm0 * 128 + ((xu ^ (xm0 & 7)) << 4);
        const int cdst = kX + (tid >> 1) * 32 + (tid & 1) * 16;
        const uint8_t* csrc[CJ];
#pragma unroll
        for (int j = 0; j < CJ; ++j) {
            const int i = tid + 128 * j;
            const uint8_t *W, *Sc;
            const int64_t row = weight_row<GATEUP>(a, e, c0, i >> 1, W, Sc);  // sets W: sequenced before its use
            csrc[j] = W + row * (K / 2) + (i & 1) * 16;
        }
        for (int kb = 0; kb < nkb; ++kb) {
            const int s = kb % STAGES;
            if (kb >= STAGES) dev::mbar_wait(&empty[s], (kb / STAGES - 1) & 1);
            unsigned char* st = smem + s * kStage;
            const __nv_bfloat16* xk = x + kb * 64;
#pragma unroll
            for (int j = 0; j < XJ; ++j)
                if (!BAL || xm0 + 16 * j < w) dev::cp_async16(st + xdst + 2048 * j, xk + xoff[j], 16);
#pragma unroll
            for (int j = 0; j < CJ; ++j) dev::cp_async16(st + cdst + 2048 * j, csrc[j] + kb * 32, 16);
            dev::mbar_arrive_cp_async(&full[s]);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");  // nothing in flight when the CTA's smem is reused
        return;
    }

    // consumers
    dev::setmaxnreg_inc<kConsumerRegs>();
    if constexpr (BAL) {
        // One consumer instantiation per width, chosen once per tile: the width is then a constant of
        // the main loop (no per-block dispatch) and the accumulators take w / 2 registers, not NT / 2
        // (ncu, session 17: the per-block width switch and the thread-index arithmetic that register
        // pressure made the compiler recompute were ~50 of the 242 instructions per block).
        switch (w >> 3) {
            // Macro-generated cases, which clang-format 14 does not format stably.
            // clang-format off
#define DSV4_WIDTH_CASE(W) \
    case W / 8: consume<GATEUP, PK, NT, STAGES, W>(a, smem, p0, live, c0, tid); break;
            DSV4_WIDTH_CASE(8) DSV4_WIDTH_CASE(16) DSV4_WIDTH_CASE(24) DSV4_WIDTH_CASE(32) DSV4_WIDTH_CASE(40)
            DSV4_WIDTH_CASE(48) DSV4_WIDTH_CASE(56) DSV4_WIDTH_CASE(64) DSV4_WIDTH_CASE(72) DSV4_WIDTH_CASE(80)
            DSV4_WIDTH_CASE(88) DSV4_WIDTH_CASE(96) DSV4_WIDTH_CASE(104) DSV4_WIDTH_CASE(112) DSV4_WIDTH_CASE(120)
            DSV4_WIDTH_CASE(128)
#undef DSV4_WIDTH_CASE
            default: break;
            // clang-format on
        }
    } else {
        consume<GATEUP, PK, NT, STAGES, NT>(a, smem, p0, live, c0, tid);
    }
}

template <bool GATEUP, bool PK, int NT, int STAGES>
cudaError_t launch_mode(const MoeExpertArgs& a, cudaStream_t s) {
    return launch_grouped(moe_wgmma_ws_kernel<GATEUP, PK, NT, STAGES>, a, NT, a.N / (GATEUP ? kRows / 2 : kRows),
                          kThreads, ws_smem_bytes(NT, STAGES, a.K), s);
}

// 128-row tiles with each expert's tail of <= 64 rows on a 64-row tile (launch_grouped_mixed).
template <bool GATEUP, bool PK, int STAGES>
cudaError_t launch_mixed_mode(const MoeExpertArgs& a, cudaStream_t s) {
    return launch_grouped_mixed(moe_wgmma_ws_kernel<GATEUP, PK, 128, STAGES>, ws_smem_bytes(128, STAGES, a.K),
                                moe_wgmma_ws_kernel<GATEUP, PK, 64, STAGES>, ws_smem_bytes(64, STAGES, a.K), a,
                                a.N / (GATEUP ? kRows / 2 : kRows), kThreads, s);
}

// Balanced widths (launch_grouped_balanced): one launch, tiles of up to 128 rows.
template <bool GATEUP, bool PK, int STAGES>
cudaError_t launch_balanced_mode(const MoeExpertArgs& a, cudaStream_t s) {
    return launch_grouped_balanced(moe_wgmma_ws_kernel<GATEUP, PK, 128, STAGES, true>, a,
                                   a.N / (GATEUP ? kRows / 2 : kRows), kThreads, ws_smem_bytes(128, STAGES, a.K), s);
}
template <bool PK, int STAGES>
cudaError_t launch_balanced(const MoeExpertArgs& a, cudaStream_t s) {
    return a.mode == MoeExpertMode::kGateUp ? launch_balanced_mode<true, PK, STAGES>(a, s)
                                            : launch_balanced_mode<false, PK, STAGES>(a, s);
}

template <bool PK, int STAGES>
cudaError_t launch_mixed(const MoeExpertArgs& a, cudaStream_t s) {
    return a.mode == MoeExpertMode::kGateUp ? launch_mixed_mode<true, PK, STAGES>(a, s)
                                            : launch_mixed_mode<false, PK, STAGES>(a, s);
}
template <bool PK, int NT, int STAGES>
cudaError_t launch(const MoeExpertArgs& a, cudaStream_t s) {
    return a.mode == MoeExpertMode::kGateUp ? launch_mode<true, PK, NT, STAGES>(a, s)
                                            : launch_mode<false, PK, NT, STAGES>(a, s);
}

// Shape fields: 8 computing warps x 2 m16 tiles (256 weight rows), one CTA per SM.
template <bool PK, int NT, int STAGES>
constexpr Entry entry() {
    return {ws_grouped_shape(PK, NT, STAGES, ws_smem_bytes(NT, STAGES, 4096)), &launch<PK, NT, STAGES>};
}
template <bool PK, int STAGES>
constexpr Entry entry_mixed() {
    Entry e = entry<PK, 128, STAGES>();
    e.shape.mixed = true;
    e.fn = &launch_mixed<PK, STAGES>;
    return e;
}

template <bool PK, int STAGES>
constexpr Entry entry_balanced() {
    Entry e = entry<PK, 128, STAGES>();
    e.shape.balanced = true;
    e.fn = &launch_balanced<PK, STAGES>;
    return e;
}

// Measured (ledger E37, 20-layer proxy prefill, one user, with the producer's offsets in registers):
// 4K 187.3 vs 202.5 ms for the plain mixed row, 16K 866.6 vs 920.2 ms; 6 slots beat 4 (before that
// fix: 4K 192.0 vs 194.8 ms). E42: with every expert's rows on the tail kernel (256-1K tokens, 6-24
// rows per expert) these rows beat the plain 64-row rows by 6-16%, at 3 rows per expert (128 tokens)
// they lose 11%: moe_grouped_select_variant takes them from 5 rows per expert on.
const Entry kTable[] = {entry_mixed<true, 6>(), entry_balanced<true, 6>(), entry_mixed<true, 4>(),
                        entry_mixed<false, 6>()};

}  // namespace

int moe_wgmma_ws_count() { return int(sizeof(kTable) / sizeof(kTable[0])); }
MoeGroupedShape moe_wgmma_ws_shape(int i) { return kTable[i].shape; }
int moe_wgmma_ws_smem_bytes(int i, int K) {
    const MoeGroupedShape s = kTable[i].shape;
    return ws_smem_bytes(s.mt, s.stages, K);
}
cudaError_t moe_wgmma_ws_run(const MoeExpertArgs& a, int i, cudaStream_t stream) {
    if (i < 0 || i >= moe_wgmma_ws_count() || kTable[i].shape.layout != a.layout || !a.x_kperm)
        return cudaErrorInvalidValue;
    return kTable[i].fn(a, stream);
}

}  // namespace dsv4::cuda::sm90
