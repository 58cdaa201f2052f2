// Grouped MXFP4 expert GEMM on Hopper's warpgroup tensor-core instructions (issue 22): the contract
// of moe_grouped_sm90.cu (MoeExpertArgs kGateUp / kDown, the same work list), with the activations
// in the k-permuted layout of moe_kperm.h (args.x_kperm; the gate-up writes h in that layout too).
//
// CTA: two warpgroups (256 threads), 256 weight rows and NT token rows of one expert. Warpgroup wg
//   owns two m64 row tiles: kGateUp, the w1 and w3 rows of the same 64 h columns (the SwiGLU pair
//   meets in registers); kDown, 128 consecutive output rows.
// Operands: A = the weights, dequantised from shared memory into registers exactly as the GEMV and
//   the mma.sync grouped GEMM do (pair words, then the UE8M0 scale by a bf16x2 multiply), fed to
//   wgmma's register-A form; B = the NT x 64 activation tile in shared memory, K-major with the
//   128-byte swizzle, read by wgmma through a matrix descriptor.
// Pipeline: a STAGES-deep cp.async ring over 64-k blocks (x tile, codes [256][32 B]); the scales of
//   the whole K for the CTA's rows are staged once. Per block: queue the 8 wgmmas of block kb behind
//   block kb - 1's, retire block kb - 1 (wait_group 1), then, while block kb runs, refill block
//   kb - 1's slot and dequantise block kb + 1 into the register set block kb - 1 used.
// Bound: the tensor cores at 4K-token steps (the mma.sync kernel reached ~180 TFLOP/s); each weight
//   element is dequantised once per NT tokens.
#include <algorithm>

#include "kernels/cuda/moe/moe_kperm.h"
#include "kernels/cuda/moe/moe_sm90.h"
#include "kernels/cuda/moe/moe_tile_list.cuh"
#include "kernels/cuda/moe/moe_wgmma_common.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::sm90 {
namespace {

// WG warpgroups per CTA, 128 weight rows (two m64 tiles) each.
template <int NT, int WG>
struct WShape {
    static constexpr int kRows = 128 * WG;  // weight rows per CTA
    static constexpr int kThreads = 128 * WG;
    static constexpr int kX = NT * 128;  // offset of the codes in a slot
    static constexpr int kStage = stage_bytes(NT, WG);
};
// Dynamic shared memory: alignment slack, the slots, the scales of all K.
constexpr int smem_bytes(int nt, int stages, int wg, int K) {
    return 1024 + stages * stage_bytes(nt, wg) + 128 * wg * scale_stride(K);
}

template <bool GATEUP, bool PK, int NT, int STAGES, int WG>
__global__ void __launch_bounds__(128 * WG, WG == 1 ? 2 : 1) moe_wgmma_kernel(MoeExpertArgs a) {
    dev::pdl_begin();
    static_assert(STAGES >= 3, "the slot refilled at block kb is block kb - 1's");
    using S = WShape<NT, WG>;
    constexpr int kRows = S::kRows, kThreads = S::kThreads;
    constexpr int NACC = NT / 2;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = dev::align_smem_1024(smem_raw);
    const int tile = blockIdx.y;
    if (tile >= *a.n_tiles) return;
    const auto [e, t0, live] = tile_entry(a, tile, NT);
    const int off = a.expert_offset[e];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int wg = warp >> 2, wq = warp & 3;
    const int K = a.K, nkb = K / 64, sstride = scale_stride(K);
    const int c0 = blockIdx.x * (GATEUP ? kRows / 2 : kRows);
    const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
    unsigned char* const scales = smem + STAGES * S::kStage;

    auto wrow = [&](int r, const uint8_t*& W, const uint8_t*& Sc) { return weight_row<GATEUP>(a, e, c0, r, W, Sc); };
    // Each thread copies the same x rows and code rows at every block: their sources are fixed
    // here (thread's x unit u of rows m0 + (threads / 8) j; code unit tid & 1 of rows
    // (tid >> 1) + (threads / 2) j).
    constexpr int XJ = NT * 8 / kThreads, XR = kThreads / 8;
    const int xu = tid & 7, xm0 = tid >> 3;
    int32_t xsrc[XJ];
#pragma unroll
    for (int j = 0; j < XJ; ++j) {
        const int p = off + t0 + min(xm0 + XR * j, live - 1);  // dead rows repeat the last live one
        xsrc[j] = GATEUP ? a.perm_token[p] : p;
    }
    const uint8_t* code_src[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const uint8_t *W, *Sc;
        const int64_t row = wrow((tid >> 1) + kThreads / 2 * j, W, Sc);
        code_src[j] = W + row * (K / 2) + (tid & 1) * 16;
    }
    auto issue = [&](int kb) {
        unsigned char* st = smem + (kb % STAGES) * S::kStage;
#pragma unroll
        for (int j = 0; j < XJ; ++j) {
            const int m = xm0 + XR * j;
            dev::cp_async16(st + m * 128 + ((xu ^ (m & 7)) << 4), x + int64_t(xsrc[j]) * K + kb * 64 + xu * 8, 16);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j)
            dev::cp_async16(st + S::kX + ((tid >> 1) + kThreads / 2 * j) * 32 + (tid & 1) * 16, code_src[j] + kb * 32,
                            16);
    };

    auto dequant = [&](int kb, uint32_t(&A)[2][4][4]) {
        dequant_block<PK>(smem + (kb % STAGES) * S::kStage + S::kX, scales, sstride, kb, wg, wq, g, t, A);
    };

    float acc[2][NACC];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[m][i] = 0.0f;

    // Scales of the CTA's rows over all K (with block 0's group), then blocks 1 .. STAGES - 2.
    {
        const int units = K / 512;  // 16-byte units of scale bytes per row
        for (int i = tid; i < kRows * units; i += kThreads) {
            const int r = i / units, u = i % units;
            const uint8_t *W, *Sc;
            const int64_t row = wrow(r, W, Sc);
            dev::cp_async16(scales + r * sstride + u * 16, Sc + row * (K / 32) + u * 16, 16);
        }
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nkb) issue(s);
        dev::cp_async_commit();
    }
    uint32_t A0[2][4][4], A1[2][4][4];
    dev::cp_async_wait<STAGES - 2>();
    dev::fence_proxy_async_smem();
    __syncthreads();
    dequant(0, A0);

    const uint32_t x_base = dev::smem_addr(smem);
    // Multiply block kb from Acur; prepare block kb + 1 into Anext meanwhile. Block kb's group is
    // queued behind block kb - 1's, so the tensor cores stay busy through the barrier and the
    // dequant; wait_group 1 retires block kb - 1 (its A registers, then, after the barrier, its slot).
    auto step = [&](int kb, uint32_t(&Acur)[2][4][4], uint32_t(&Anext)[2][4][4]) {
        mma_block<NT>(acc, Acur, x_base + (kb % STAGES) * S::kStage);
        dev::wgmma_wait<1>();
        if (kb + 1 < nkb) {
            // Groups committed so far: STAGES - 1 + kb; block kb + 1's is number kb + 1.
            dev::cp_async_wait<STAGES - 3>();
            dev::fence_proxy_async_smem();
            __syncthreads();  // every warpgroup has retired block kb - 1: its slot is free
            if (kb + STAGES - 1 < nkb) issue(kb + STAGES - 1);
            dev::cp_async_commit();
            dequant(kb + 1, Anext);
        }
    };
    for (int kb = 0; kb < nkb; kb += 2) {
        step(kb, A0, A1);
        if (kb + 1 < nkb) step(kb + 1, A1, A0);
    }
    mma_retire_all<NT>(acc);
    dev::cp_async_wait<0>();

    const int p0 = off + t0;
    if constexpr (GATEUP) {
        static_assert(NT * hs_stride(WG) * 2 <= STAGES * S::kStage, "h tile fits the pipeline's shared memory");
        __nv_bfloat16* hs = reinterpret_cast<__nv_bfloat16*>(smem);
        __syncthreads();  // every warpgroup is done with the pipeline's slots
        gateup_to_smem<NT, WG>(acc, a, p0, live, wg, wq, g, t, hs);
        __syncthreads();
        gateup_smem_to_global<WG>(hs, a, p0, live, c0, tid, kThreads);
    } else {
        down_to_global<NT>(acc, a, p0, live, c0, wg, wq, g, t);
    }
}

template <bool GATEUP, bool PK, int NT, int STAGES, int WG>
cudaError_t launch_mode(const MoeExpertArgs& a, cudaStream_t s) {
    using S = WShape<NT, WG>;
    return launch_grouped(moe_wgmma_kernel<GATEUP, PK, NT, STAGES, WG>, a, NT, a.N / (GATEUP ? S::kRows / 2 : S::kRows),
                          S::kThreads, smem_bytes(NT, STAGES, WG, a.K), s);
}

// 128-row tiles, each expert's tail of <= 64 rows on a 64-row tile (launch_grouped_mixed).
template <bool GATEUP, bool PK, int STAGES, int WG>
cudaError_t launch_mixed_mode(const MoeExpertArgs& a, cudaStream_t s) {
    using S = WShape<128, WG>;
    return launch_grouped_mixed(moe_wgmma_kernel<GATEUP, PK, 128, STAGES, WG>, smem_bytes(128, STAGES, WG, a.K),
                                moe_wgmma_kernel<GATEUP, PK, 64, STAGES, WG>, smem_bytes(64, STAGES, WG, a.K), a,
                                a.N / (GATEUP ? S::kRows / 2 : S::kRows), S::kThreads, s);
}

template <bool PK, int STAGES, int WG>
cudaError_t launch_mixed(const MoeExpertArgs& a, cudaStream_t s) {
    return a.mode == MoeExpertMode::kGateUp ? launch_mixed_mode<true, PK, STAGES, WG>(a, s)
                                            : launch_mixed_mode<false, PK, STAGES, WG>(a, s);
}

template <bool PK, int NT, int STAGES, int WG>
cudaError_t launch(const MoeExpertArgs& a, cudaStream_t s) {
    return a.mode == MoeExpertMode::kGateUp ? launch_mode<true, PK, NT, STAGES, WG>(a, s)
                                            : launch_mode<false, PK, NT, STAGES, WG>(a, s);
}

// Shape fields: warps 4 WG, tiles 2 (m16 rows per warp: one in each m64 tile), min_blocks 2 for WG = 1.
template <bool PK, int NT, int STAGES, int WG = 2>
constexpr Entry entry() {
    return {{4 * WG, 2, NT, STAGES, WG == 1 ? 2 : 1, PK ? MoeWeightLayout::kPairRotated : MoeWeightLayout::kCheckpoint,
             smem_bytes(NT, STAGES, WG, 4096), true},
            &launch<PK, NT, STAGES, WG>};
}

template <bool PK, int STAGES, int WG = 2>
constexpr Entry entry_mixed() {
    Entry e = entry<PK, 128, STAGES, WG>();
    e.shape.mixed = true;
    e.fn = &launch_mixed<PK, STAGES, WG>;
    return e;
}

// The plain wgmma shapes (rows of the grouped op's table after moe_grouped_sm90.cu's and the
// warp-specialised rows); the first legal row of the wanted token tile wins: here, the mixed row (E35: 4K prefill
// 221.6 -> 207.7 ms; its one-warpgroup form measured 215.9 ms and is not registered). Measured
// (ledger E34): on the 20-layer proxy's prefill two warpgroups per CTA win (2K prompt, 64-token
// tiles: 153.3 vs 160.7 ms; 4K, 128-token tiles: 267.8 vs 297.7 ms), although decode-bench's
// uniformly routed Flash shapes favour one warpgroup with 2 CTAs per SM (3,487 vs 3,619 us at 4K):
// the one-warpgroup rows stay for tune.
const Entry kTable[] = {
    entry_mixed<true, 4>(),   entry<true, 64, 4>(),    entry<true, 128, 4>(), entry<true, 64, 4, 1>(),
    entry<true, 128, 4, 1>(), entry_mixed<false, 4>(), entry<false, 64, 4>(), entry<false, 128, 4>(),
};

__global__ void x_kperm_kernel(const float* x, int64_t n_pairs, __nv_bfloat16* out) {
    dev::pdl_begin();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_pairs;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t L = 2 * i;  // positions L, L + 1 of one 64-k block (same row)
        const int64_t base = L & ~int64_t(63);
        const int l = int(L & 63);
        const float lo = x[base + moe_kperm::phys_of(l)], hi = x[base + moe_kperm::phys_of(l + 1)];
        reinterpret_cast<__nv_bfloat162*>(out)[i] = __floats2bfloat162_rn(lo, hi);
    }
}

}  // namespace

// The warp-specialised rows first, so that the first legal row of a wanted 128-row tile is
// moe_wgmma_pk_t128_s6_ws_mix (ledger E37: 4K prefill 202.5 -> 187.3 ms), then the plain ones
// (64-row tiles stay on the plain kernel).
constexpr int kPlain = int(sizeof(kTable) / sizeof(kTable[0]));
// Rows [0, nws): warp-specialised; [nws, nws + npe): persistent; then the plain ones.
int moe_wgmma_count() { return moe_wgmma_ws_count() + moe_wgmma_persist_count() + kPlain; }
MoeGroupedShape moe_wgmma_shape(int i) {
    const int nws = moe_wgmma_ws_count(), npe = moe_wgmma_persist_count();
    if (i < nws) return moe_wgmma_ws_shape(i);
    if (i < nws + npe) return moe_wgmma_persist_shape(i - nws);
    return kTable[i - nws - npe].shape;
}
int moe_wgmma_smem_bytes(int i, int K) {
    const int nws = moe_wgmma_ws_count(), npe = moe_wgmma_persist_count();
    if (i < nws) return moe_wgmma_ws_smem_bytes(i, K);
    if (i < nws + npe) return moe_wgmma_persist_smem_bytes(i - nws, K);
    const MoeGroupedShape s = kTable[i - nws - npe].shape;
    return smem_bytes(s.mt, s.stages, s.warps / 4, K);
}
cudaError_t moe_wgmma_run(const MoeExpertArgs& a, int i, cudaStream_t stream) {
    const int nws = moe_wgmma_ws_count(), npe = moe_wgmma_persist_count();
    if (i >= 0 && i < nws) return moe_wgmma_ws_run(a, i, stream);
    if (i >= nws && i < nws + npe) return moe_wgmma_persist_run(a, i - nws, stream);
    i -= nws + npe;
    if (i < 0 || i >= kPlain || kTable[i].shape.layout != a.layout || !a.x_kperm) return cudaErrorInvalidValue;
    return kTable[i].fn(a, stream);
}
cudaError_t moe_x_kperm_run(const float* x, int64_t n, void* out, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (n % 64 != 0) return cudaErrorInvalidValue;
    const int64_t pairs = n / 2;
    const int blocks = int(std::min<int64_t>((pairs + 255) / 256, 132 * 16));
    x_kperm_kernel<<<blocks, 256, 0, stream>>>(x, pairs, static_cast<__nv_bfloat16*>(out));
    return cudaGetLastError();
}

}  // namespace dsv4::cuda::sm90
