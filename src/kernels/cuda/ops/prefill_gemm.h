// Dense linears of many tokens (prefill chunks) through cuBLAS (issue 22): the GEMV-style fast
// kernels (kernels/cuda/gemm) re-read every weight once per 32-64 tokens and run at ~90 TFLOP/s on
// a 4K-token chunk; a tensor-core GEMM tiles both operands. FP8 block-scaled weights (UE8M0 scales)
// are dequantised to bf16 into a scratch once per call (exact: e4m3 x 2^k is a bf16 value), BF16
// weights are used in place, x is rounded to bf16 (RNE, the fast kernels' rounding) and the product
// accumulates in f32 (cuBLASLt, one algorithm per shape and token bucket: prefill_gemm_lt.h). Same values as the fast
// kernels up to the summation order. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops/prefill_gemm_lt.h"

namespace dsv4::cuda {

struct WeightDesc;

// Owned by the runner; WeightDesc::gemm points at it. One user at a time (the scratch buffers are
// shared), so every call must run on one stream or on streams ordered with each other.
struct PrefillGemm {
    LtGemm* handle = nullptr;   // owned by whoever made it (lt_gemm_create / lt_gemm_destroy); null: off
    void* w_scratch = nullptr;  // bf16 [w_scratch_elems]: the largest dequantised weight
    int64_t w_scratch_elems = 0;
    void* x_scratch = nullptr;  // bf16 [x_rows, x_cols]: a slice of x rounded to bf16
    int64_t x_rows = 0, x_cols = 0;
    int min_tokens = 0;  // linear() takes this path from this many tokens; 0: never
};

// Whether prefill_gemm_linear handles this call ("" = yes, else why not): at least min_tokens
// tokens, FP8 (UE8M0) or BF16 weights of a shape the fast kernels take (linear_fast_decline, so
// the activations are bf16 either way), the plain or the grouped (group_in == K) layout, scratch
// large enough.
const char* prefill_gemm_decline(const PrefillGemm& g, const WeightDesc& w, int n_per_group, int64_t group_in,
                                 int64_t ldx, int64_t ldy, bool accumulate, int T);

// y[t, n] = sum_k W[n, k] x[t, goff(n) + k] (linear()'s contract, ops.h) for T tokens: x f32 [T, ldx]
// or x_bf16 (same stride; preferred when given), y f32 [T, ldy], or, when y_bf16 is given, bf16
// [T, ldy] there instead (the f32 sums rounded once by cuBLAS's epilogue; y unused). Call only when
// prefill_gemm_decline returned "". Errors: CUDA / cuBLAS failures as cudaErrorUnknown.
cudaError_t prefill_gemm_linear(const PrefillGemm& g, const WeightDesc& w, const float* x, const void* x_bf16,
                                int64_t ldx, int n_per_group, int64_t group_in, float* y, int64_t ldy, int T,
                                cudaStream_t st, void* y_bf16 = nullptr);

}  // namespace dsv4::cuda
