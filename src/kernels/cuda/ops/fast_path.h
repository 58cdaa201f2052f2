// Dispatch of cuda::linear / moe_experts / moe_combine (ops.h) between the fast decode kernels
// (kernels/cuda/gemm dense_gemv, kernels/cuda/moe route/permute/MXFP4 expert GEMV/combine; bf16
// activations staged from the f32 inputs, f32 accumulation and outputs) and the correct-first
// kernels (simt.h: f32 activations, any weight format).
//
// The fast path is taken when DSV4_FAST_KERNELS is not "0" and the call is legal for it:
//   linear: weight kFp8E8M0 or kBF16, not accumulate, y contiguous (ldy == N), plain or grouped
//     with group_in == K (the wo_a form), K % 512 == 0, a dense_gemv variant legal for (N, K) (N per
//     group a multiple of the CTA's rows), x 16-byte aligned and ldx % 8 == 0.
//   moe: routed experts kMxfp4 stacked [E, N, K/2] (+ scales [E, N, K/32]), d and I multiples of
//     512 with a legal expert variant for both GEMVs, E <= 1024, top_k <= 8.
// The decision depends on formats and shapes only (and pointer alignment), never on the batch,
// so a captured graph and an eager step take the same path. Host-only header.
#pragma once

#include <string>

#include "kernels/cuda/ops/ops.h"

namespace dsv4::cuda {

// False when env DSV4_FAST_KERNELS is "0" (read at every call, so tests can switch it).
bool fast_kernels_enabled();

// Why a linear with this weight and layout does not take the fast GEMV ("" = it does, given an
// aligned x). Does not look at DSV4_FAST_KERNELS.
std::string linear_fast_decline(const WeightDesc& w, int n_per_group, int64_t group_in, int64_t ldx, int64_t ldy,
                                bool accumulate);
// Why moe_experts / moe_combine with these arguments do not take the fast kernels ("" = they do).
// Looks at E, K, d, I, the expert weights and (hash layers) tokens; not at T or DSV4_FAST_KERNELS.
std::string moe_fast_decline(const MoeArgs& a);

}  // namespace dsv4::cuda
