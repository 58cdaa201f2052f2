// Linear layers on checkpoint-format weights (any WFmt), f32 activations and accumulation.
// Thread roles: a CTA of 8 warps; warp w computes output column n = blockIdx.x*8 + w for TT
// tokens (blockIdx.y tile); lanes stride K and reduce with shuffles.
// Shared memory: none. Bound: weight bandwidth at decode (each weight element is read once per
// token tile and dequantised in registers); compute-light. Not a tensor-core GEMM: prefill of
// large models wants the issue-7 grouped GEMM. cuda::linear (fast_path.cpp) sends FP8/BF16
// decode shapes to the weight-streaming GEMV (kernels/cuda/gemm) and everything else here.
#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/ops/simt.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

const char* wfmt_name(WFmt f) {
    switch (f) {
        case WFmt::kF32:
            return "f32";
        case WFmt::kBF16:
            return "bf16";
        case WFmt::kFp8E8M0:
            return "fp8-block(ue8m0)";
        case WFmt::kFp8F32:
            return "fp8-block(f32)";
        case WFmt::kMxfp4:
            return "mxfp4";
        case WFmt::kMxfp4PairRotated:
            return "mxfp4(pair-rotated)";
    }
    return "?";
}

namespace {
constexpr int kWarps = 8;
constexpr int kTT = 8;

// x: [T, ldx] f32; y: [T, ldy] f32; W: [N, K] (WeightDesc)
__global__ void linear_kernel(WeightDesc w, int expert, const float* __restrict__ x, int64_t ldx, int n_per_group,
                              int64_t group_in, float* __restrict__ y, int64_t ldy, int T, bool accumulate) {
    dev::pdl_begin();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t n = int64_t(blockIdx.x) * kWarps + warp;
    const int t0 = blockIdx.y * kTT;
    if (n >= w.N) return;
    const int nt = min(kTT, T - t0);
    const int64_t goff = (n / n_per_group) * group_in;
    float acc[kTT];
#pragma unroll
    for (int j = 0; j < kTT; ++j) acc[j] = 0.0f;
    for (int64_t k = lane; k < w.K; k += 32) {
        const float wv = w_at(w, expert, n, k);
#pragma unroll
        for (int j = 0; j < kTT; ++j)
            if (j < nt) acc[j] += wv * x[int64_t(t0 + j) * ldx + goff + k];
    }
#pragma unroll
    for (int j = 0; j < kTT; ++j) {
        const float s = warp_sum(acc[j]);
        if (lane == 0 && j < nt) {
            float* o = y + int64_t(t0 + j) * ldy + n;
            *o = accumulate ? *o + s : s;
        }
    }
}

// out: [T, copies, d]
__global__ void embed_kernel(WeightDesc w, const int32_t* __restrict__ tokens, int copies, float* __restrict__ out) {
    dev::pdl_begin();
    const int t = blockIdx.x;
    const int64_t tok = tokens[t];
    for (int i = threadIdx.x; i < w.K; i += blockDim.x) {
        const float v = w_at(w, -1, tok, i);
        for (int c = 0; c < copies; ++c) out[(int64_t(t) * copies + c) * w.K + i] = v;
    }
}
}  // namespace

cudaError_t linear_simt(const WeightDesc& w, int expert, const float* x, int64_t ldx, int n_per_group, int64_t group_in,
                        float* y, int64_t ldy, int T, bool accumulate, cudaStream_t st) {
    if (T <= 0 || w.N <= 0) return cudaSuccess;
    dim3 grid((w.N + kWarps - 1) / kWarps, (T + kTT - 1) / kTT);
    linear_kernel<<<grid, kWarps * 32, 0, st>>>(w, expert, x, ldx, n_per_group > 0 ? n_per_group : w.N, group_in, y,
                                                ldy, T, accumulate);
    return cudaGetLastError();
}

cudaError_t embed(const WeightDesc& w, const int32_t* tokens, int T, int copies, float* out, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    embed_kernel<<<T, 128, 0, st>>>(w, tokens, copies, out);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
