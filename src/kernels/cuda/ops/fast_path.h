// Dispatch of cuda::linear / moe_experts / moe_combine (ops.h) between the fast decode kernels
// (kernels/cuda/gemm dense_gemv, kernels/cuda/moe route/permute/MXFP4 expert GEMV/combine; bf16
// activations staged from the f32 inputs, f32 accumulation and outputs) and the correct-first
// kernels (simt.h: f32 activations, any weight format).
//
// The fast path is taken when the weight (WeightDesc::fast) or MoeArgs::fast allows it (the runner sets
// both from RuntimeOptions::fast_kernels) and the call is legal for it:
//   linear: weight kFp8E8M0 or kBF16, not accumulate, y contiguous (ldy == N), plain or grouped
//     with group_in == K (the wo_a form), K % 512 == 0, a dense_gemv variant legal for (N, K) (N per
//     group a multiple of the CTA's rows), x 16-byte aligned and ldx % 8 == 0.
//   moe: routed experts kMxfp4 or kMxfp4PairRotated (w1 and w3 alike) stacked [E, N, K/2] (+ scales
//     [E, N, K/32]), d and I multiples of 512 with a legal expert variant for both GEMVs (of the
//     weights' layout), E <= 1024, top_k <= 8.
//   From MoeArgs::grouped_min_tokens tokens per step (prefill chunks) the same experts run as the
//   grouped GEMM (kernels/cuda/moe/moe_grouped_sm90.cu; same bits) where moe_grouped_decline allows.
// The decision depends on formats and shapes only (and pointer alignment), never on the batch,
// so a captured graph and an eager step take the same path. Host-only header.
#pragma once

#include <string>

#include "kernels/cuda/ops/ops.h"

namespace dsv4::cuda {

// Why a linear with this weight and layout does not take the fast GEMV ("" = it does, given an
// aligned x). Does not look at WeightDesc::fast.
std::string linear_fast_decline(const WeightDesc& w, int n_per_group, int64_t group_in, int64_t ldx, int64_t ldy,
                                bool accumulate);
// True when linear(w, ..., T, accumulate = false) with a 16-byte aligned x_bf16 runs the prefill GEMM
// (WeightDesc::gemm), which then reads only x_bf16, never the f32 x: a caller that has the input in
// bf16 alone may pass any aligned x.
bool linear_reads_only_bf16(const WeightDesc& w, int n_per_group, int64_t group_in, int64_t ldx, int64_t ldy, int T);
// The plain linear y = x W^T of T tokens written as bf16 by the prefill GEMM: x_bf16 [T, ldx] (16-byte
// aligned), y_bf16 [T, w.N] (ldy = w.N). Only where linear_reads_only_bf16(w, w.N, 0, ldx, w.N, T)
// holds (else cudaErrorInvalidValue): the f32 output and a separate rounding pass are what it saves.
cudaError_t linear_bf16_out(const WeightDesc& w, const void* x_bf16, int64_t ldx, void* y_bf16, int T, cudaStream_t st);
// Why moe_experts / moe_combine with these arguments do not take the fast kernels ("" = they do).
// Looks at E, K, d, I, the expert weights and (hash layers) tokens; not at T or MoeArgs::fast.
std::string moe_fast_decline(const MoeArgs& a);
// Why moe_experts with these arguments does not run the grouped expert GEMM (MoeArgs::grouped_min_tokens;
// "" = it does, given an aligned x): the fast-path reasons, too few tokens, an h workspace too small
// for the work list and bf16 x, no legal grouped variant (a forced grouped_variant that is not legal
// falls back to the first legal one).
std::string moe_grouped_decline(const MoeArgs& a);

// Tuning-file checks (the runner, at init; no launch). linear_variant_refusal: "" when linear() with
// this weight and layout never runs a dense_gemv variant (the correct-first path: the rule does not
// apply) or could run registry index `variant` at T tokens; else why it cannot. Steps that cuBLAS
// takes (prefill_gemm.h) are checked too: the GEMV runs them when the step's threshold says so.
// moe_variant_refusal: the same for the routed experts of `a` (a.T tokens, weights and E/K/d/I set)
// and an expert-GEMV (`grouped` false) or grouped-GEMM (`grouped` true) registry index, for both
// the gate-up and the down half.
std::string linear_variant_refusal(const WeightDesc& w, int n_per_group, int64_t group_in, int64_t ldx, int T,
                                   int variant);
std::string moe_variant_refusal(const MoeArgs& a, int variant, bool grouped);

// Load-time choice of the routed experts' code layout (docs/perf/ledger.md E17): when `enabled`
// (the runner passes RuntimeOptions fast_kernels && moe_layout == "pair-rotated") and all three are
// kMxfp4 stacked [n_experts, N, K/2] with K % 128 == 0, rewrites w1, w3 and w2 in place (device
// memory, on `st`) to kMxfp4PairRotated and updates their fmt; else leaves them alone. Every reader of
// WeightDesc decodes both layouts (the fast expert GEMV picks its variants by layout; w_at, the
// correct-first kernels' dequantiser, gathers the permuted bits), so either result is correct.
// Call once per layer, right after the experts are on the device.
cudaError_t moe_expert_weights_to_fast_layout(WeightDesc* w1, WeightDesc* w3, WeightDesc* w2, int n_experts,
                                              bool enabled, cudaStream_t st);

}  // namespace dsv4::cuda
