// Weight-streaming GEMV / skinny GEMM for decode on sm90 (CUDA cores, f32 FMA).
//
// Thread roles: NW warps per CTA; warp w owns RPW consecutive weight rows; each lane reads
//   16 B of every row per step (bf16: 8 k, fp8: 16 k) with U steps of loads in flight, FMAs
//   them against MT tokens of x from shared memory, and the warp reduces with shuffles.
// Shared memory: x [MT][K] bf16 for the current token chunk (rows beyond n_tokens zeroed).
// Bound: HBM-bound at n_tokens <= ~4 (2*MT FLOP per weight element); f32-FMA-bound above,
//   where the tensor-core variant (dense_gemv_mma.cuh) takes over for tall matrices.
//   Last measured (ledger E5): wo_b fp8 batch 1 14.3 us = 60% of copy bandwidth; LM head bf16
//   batch 1 4.4 TB/s (113% of the read+write copy figure: a read-only stream).
#include "kernels/cuda/gemm/dense_gemv_sm90.h"
#include "kernels/cuda/gemm/dense_gemm_kc_sm90.h"
#include "kernels/cuda/gemm/dense_gemv_mma.cuh"
#include "kernels/cuda/common/weight_stream.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::sm90 {
namespace {

template <bool FP8, int NW, int RPW, int MT, int U>
__global__ void __launch_bounds__(NW * 32) dense_gemv_kernel(DenseGemvArgs a) {
    dev::pdl_begin();
    constexpr int VPL = FP8 ? 16 : 8;
    constexpr int kStep = 32 * VPL;
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int K = a.K, T = a.n_tokens, NT = a.groups * a.N;
    const int cta_row = blockIdx.x * NW * RPW;
    const int grp = cta_row / a.N;
    const int r0 = cta_row + warp * RPW;
    const int64_t xstride = a.x_stride ? a.x_stride : int64_t(a.groups) * K;
    const int64_t xbase = int64_t(grp) * K;  // element offset of this CTA's group in a token row
    const unsigned char* w = static_cast<const unsigned char*>(a.w);
    const int64_t row_bytes = int64_t(K) * (FP8 ? 1 : 2);
    const int kblocks = K / 128;

    // Token chunks are spread over blockIdx.y (prefill); decode has one chunk.
    for (int t0 = blockIdx.y * MT; t0 < T; t0 += gridDim.y * MT) {
        __syncthreads();
        for (int i = tid; i < MT * (K / 8); i += NW * 32) {
            const int m = i / (K / 8), c = i % (K / 8);
            uint4 v = make_uint4(0, 0, 0, 0);
            if (t0 + m < T) v = dev::load_x8_bf16(a.x, a.x_f32, xbase + (t0 + m) * xstride + c * 8);
            *reinterpret_cast<uint4*>(xs + m * K + c * 8) = v;
        }
        __syncthreads();

        float acc[RPW][MT];
#pragma unroll
        for (int r = 0; r < RPW; ++r)
#pragma unroll
            for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;

        for (int kb = 0; kb < K; kb += kStep * U) {
            uint4 raw[U][RPW];
            float sc[U][RPW];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = kb + u * kStep + lane * VPL;
#pragma unroll
                for (int r = 0; r < RPW; ++r) {
                    raw[u][r] = make_uint4(0, 0, 0, 0);
                    sc[u][r] = 1.0f;
                    if (k < K) {
                        raw[u][r] = __ldg(reinterpret_cast<const uint4*>(w + int64_t(r0 + r) * row_bytes +
                                                                         int64_t(k) * (FP8 ? 1 : 2)));
                        if constexpr (FP8)
                            sc[u][r] = dev::ue8m0(__ldg(a.w_scale + ((r0 + r) / 128) * kblocks + k / 128));
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = kb + u * kStep + lane * VPL;
                if (k >= K) break;
#pragma unroll
                for (int r = 0; r < RPW; ++r) {
                    float wv[VPL];
                    if constexpr (FP8)
                        ws::decode_fp8(raw[u][r], sc[u][r], wv);
                    else
                        ws::decode_bf16(raw[u][r], wv);
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        float xv[VPL];
                        ws::load_x<VPL>(xs + m * K + k, xv);
#pragma unroll
                        for (int i = 0; i < VPL; ++i) acc[r][m] = fmaf(wv[i], xv[i], acc[r][m]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RPW; ++r)
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const float v = dev::warp_sum(acc[r][m]);
                if (lane == 0 && t0 + m < T) {
                    const int64_t o = int64_t(t0 + m) * NT + r0 + r;
                    if (a.out_f32)
                        static_cast<float*>(a.y)[o] = v;
                    else
                        static_cast<__nv_bfloat16*>(a.y)[o] = __float2bfloat16_rn(v);
                }
            }
    }
}

using LaunchFn = cudaError_t (*)(const DenseGemvArgs&, cudaStream_t);

// grid.y: one CTA row per chunk of mt tokens (capped; CTAs loop over the rest).
inline unsigned token_chunks(int n_tokens, int mt) {
    const int c = (n_tokens + mt - 1) / mt;
    return unsigned(c < 1 ? 1 : (c > 1024 ? 1024 : c));
}

template <int NW, int RPW, int MT, int U, bool FP8>
cudaError_t launch_fmt(const DenseGemvArgs& a, cudaStream_t s) {
    auto* k = dense_gemv_kernel<FP8, NW, RPW, MT, U>;
    const size_t smem = size_t(MT) * a.K * 2;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    const int blocks = a.groups * a.N / (NW * RPW);
    k<<<dim3(blocks, token_chunks(a.n_tokens, MT)), NW * 32, smem, s>>>(a);
    return cudaGetLastError();
}

template <int NW, int RPW, int MT, int U>
cudaError_t launch(const DenseGemvArgs& a, cudaStream_t s) {
    return a.format == WeightFormat::kFp8Block ? launch_fmt<NW, RPW, MT, U, true>(a, s)
                                               : launch_fmt<NW, RPW, MT, U, false>(a, s);
}

template <int NW, int NTT, int U, bool FP8>
cudaError_t launch_mma_fmt(const DenseGemvArgs& a, cudaStream_t s) {
    auto* k = gemv_mma::dense_gemv_mma_kernel<FP8, NW, NTT, U>;
    const size_t smem = size_t(8 * NTT) * (a.K + 8) * 2;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    k<<<dim3(a.groups * a.N / (NW * 16), token_chunks(a.n_tokens, 8 * NTT)), NW * 32, smem, s>>>(a);
    return cudaGetLastError();
}
template <int NW, int NTT, int U>
cudaError_t launch_mma(const DenseGemvArgs& a, cudaStream_t s) {
    return a.format == WeightFormat::kFp8Block ? launch_mma_fmt<NW, NTT, U, true>(a, s)
                                               : launch_mma_fmt<NW, NTT, U, false>(a, s);
}

struct Entry {
    KernelParams params;
    LaunchFn fn;
    GemvKind kind;
};
template <int NW, int RPW, int MT, int U>
constexpr Entry entry() {
    return {{MT, RPW, NW, U, 0}, &launch<NW, RPW, MT, U>, GemvKind::kSimt};
}
// Tensor-core entries: block_t = tokens per pass (8 per n-tile), block_h = 16 rows per warp.
template <int NW, int NTT, int U>
constexpr Entry entry_mma() {
    return {{8 * NTT, 16, NW, U, 0}, &launch_mma<NW, NTT, U>, GemvKind::kMma};
}
// K-chunked tensor-core entries (dense_gemm_kc.cuh): block_t = tokens per CTA (all of the step
// up to it), block_h = rows per warp (16 * MTL), stages = 2 (x double buffer), split = 0
// (split-K cluster size chosen at launch from the shape).
template <int NW, int MTL, int NTT>
constexpr Entry entry_kc() {
    return {{8 * NTT, 16 * MTL, NW, 2, 0}, &dense_gemm_kc_launch<NW, MTL, NTT>, GemvKind::kKChunk};
}

// Second K-chunked form (dense_gemm_kc2.cuh): same parameters, x staged as bf16.
template <int NW, int MTL, int NTT>
constexpr Entry entry_kc2() {
    return {{8 * NTT, 16 * MTL, NW, 2, 0}, &dense_gemm_kc2_launch<NW, MTL, NTT>, GemvKind::kKChunk2};
}

// Third K-chunked form (dense_gemm_kc3.cuh): stages = depth of the weight + x cp.async ring.
template <int NW, int MTL, int NTT, int ST>
constexpr Entry entry_kc3() {
    return {{8 * NTT, 16 * MTL, NW, ST, 0}, &dense_gemm_kc3_launch<NW, MTL, NTT, ST>, GemvKind::kKChunk3};
}

// The one list: instantiates and registers. block_t = tokens per pass, block_h = rows per
// warp, stages = 16-byte loads (CUDA-core) or 128-k blocks (mma) in flight per row and lane.
const Entry kTable[] = {
    entry<8, 2, 1, 4>(),
    entry<8, 2, 4, 4>(),
    entry<8, 2, 8, 2>(),
    entry<4, 4, 8, 2>(),
    entry<8, 4, 1, 2>(),
    entry_mma<4, 1, 2>(),
    entry_mma<4, 2, 2>(),
    entry_kc<4, 2, 4>(),
    entry_kc<4, 1, 4>(),
    entry_kc<4, 2, 8>(),
    entry_kc<4, 1, 8>(),
    // 8 warps x 16 rows: the x chunk staged once for 128 rows (half the L2 -> shared traffic of
    // the 4-warp tiles) at the 4-warp register count. Not yet measured; not in the heuristic.
    entry_kc<8, 1, 4>(),
    entry_kc<8, 1, 8>(),
    // x staged as bf16 (converted once per CTA when f32), staging addresses computed once
    // (docs/perf/ledger.md E18).
    entry_kc2<4, 1, 4>(),
    entry_kc2<4, 1, 8>(),
    entry_kc2<8, 1, 4>(),
    entry_kc2<8, 1, 8>(),
    entry_kc2<4, 2, 8>(),
    // weights and x through a 3-4 deep cp.async ring (docs/perf/ledger.md E18).
    entry_kc3<4, 1, 4, 3>(),
    entry_kc3<4, 1, 4, 4>(),
    entry_kc3<8, 1, 4, 3>(),
    entry_kc3<8, 1, 8, 3>(),
};
// Measured and dropped: mma with 2 warps (32 rows per CTA) lost to 4 warps at every point
// (docs/perf/ledger.md E5); K-chunk with 128 tokens per CTA (8 warps x 16 rows, 201 registers,
// 128 KB of shared memory with f32 x: one CTA per SM) lost to 64-token passes at every point,
// e.g. wo_b T = 128 155.5 vs 102.7 us (docs/perf/ledger.md E10).

}  // namespace

int dense_gemv_count() { return int(sizeof(kTable) / sizeof(kTable[0])); }
KernelParams dense_gemv_params(int i) { return kTable[i].params; }
GemvKind dense_gemv_kind(int i) { return kTable[i].kind; }
cudaError_t dense_gemv_run(const DenseGemvArgs& a, int variant, cudaStream_t stream) {
    return kTable[variant].fn(a, stream);
}

}  // namespace dsv4::cuda::sm90
