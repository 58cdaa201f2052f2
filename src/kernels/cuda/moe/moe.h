// Decode MoE ops (see moe_args.h). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/cuda/common/kernel_params.h"
#include "kernels/cuda/moe/moe_args.h"

namespace dsv4::cuda {

Status moe_route_launch(const MoeRouteArgs& a, cudaStream_t stream);
Status moe_permute_launch(const MoePermuteArgs& a, cudaStream_t stream);
// moe_route_launch then moe_permute_launch on its output (p.topk_ids / topk_w == r's), fused
// into one kernel for small batches (n_tokens * top_k <= 128, n_experts <= 256). Same checks as the two.
Status moe_route_permute_launch(const MoeRouteArgs& r, const MoePermuteArgs& p, cudaStream_t stream);
Status moe_combine_launch(const MoeCombineArgs& a, cudaStream_t stream);

// Rewrites `bytes` of packed e2m1 expert codes (w1/w2/w3 [n_experts, N, K/2], device memory,
// 4-byte aligned, bytes % 4 == 0) in place from the checkpoint layout to the pair-rotated one
// (MoeWeightLayout, core/mxfp4_pair_rotated.h). Apply exactly once per tensor; scale tensors are
// not touched. Errors: kInvalidArgument on misalignment, kInternal on a launch error.
Status moe_weight_repack_launch(uint8_t* w, size_t bytes, cudaStream_t stream);

int moe_expert_variant_count();
MoeWeightLayout moe_expert_variant_layout(int i);  // the only code layout variant i reads
KernelParams moe_expert_variant_params(int i);     // block_t = tokens/pass, warps, stages = loads in flight
std::string moe_expert_variant_name(int i);
// a.variant when >= 0 (callers force a variant only where moe_expert_variant_legal), else the heuristic.
int moe_expert_select_variant(const MoeExpertArgs& a);
bool moe_expert_variant_legal(int i, const MoeExpertArgs& a);  // shape, layout and shared memory
// Errors: kInvalidArgument for bad arguments, no legal variant, or a variant (a.variant) whose
// code layout is not a.layout.
Status moe_expert_launch(const MoeExpertArgs& a, cudaStream_t stream);

// Grouped MXFP4 expert GEMM for prefill-sized steps (moe_grouped_sm90.cu): MoeExpertArgs'
// contract with x bf16 in both modes (x_f32 false), n_rows = n_tokens * top_k, and the work-list
// workspace tile_list [moe_grouped_max_tiles(n_rows, n_experts)] / n_tiles [2]. The mma.sync rows:
// outputs bitwise equal to moe_expert_launch's tensor-core variants on the same layout; legal for
// K % 128 == 0, N a multiple of the CTA's columns (64 or 128), n_experts <= 1024. The wgmma rows
// (moe_wgmma_sm90.cu): x (kGateUp tokens, kDown h) in the k-permuted layout of moe_kperm.h
// (a.x_kperm; the gate-up writes h in it), same products summed in another order; legal for
// K % 512 == 0 up to the shared-memory limit (K <= 8192), N a multiple of 128 (gate-up) or 256.
int moe_grouped_variant_count();
bool moe_grouped_variant_is_wgmma(int i);
std::string moe_grouped_variant_name(int i);
MoeWeightLayout moe_grouped_variant_layout(int i);
bool moe_grouped_variant_legal(int i, const MoeExpertArgs& a);
// a.variant when legal, else the first legal entry (the registry's order is the preference).
int moe_grouped_select_variant(const MoeExpertArgs& a);
// Work-list entries to allocate for n_rows rows (any registered variant).
int moe_grouped_max_tiles(int n_rows, int n_experts);
// Errors: kInvalidArgument for null pointers, an f32 x or no legal variant; kInternal on launch errors.
Status moe_grouped_launch(const MoeExpertArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
