// Decode MoE ops (see moe_args.h). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/status.h"
#include "kernels/cuda/gemm/kernel_params.h"
#include "kernels/cuda/moe/moe_args.h"

namespace dsv4::cuda {

Status moe_route_launch(const MoeRouteArgs& a, cudaStream_t stream);
Status moe_permute_launch(const MoePermuteArgs& a, cudaStream_t stream);
// moe_route_launch then moe_permute_launch on its output (p.topk_ids / topk_w == r's), fused
// into one kernel for small batches (n_tokens * top_k <= 128, n_experts <= 256). Same checks as the two.
Status moe_route_permute_launch(const MoeRouteArgs& r, const MoePermuteArgs& p, cudaStream_t stream);
Status moe_combine_launch(const MoeCombineArgs& a, cudaStream_t stream);

int moe_expert_variant_count();
KernelParams moe_expert_variant_params(int i);  // block_t = tokens/pass, warps, stages = loads in flight
std::string moe_expert_variant_name(int i);
int moe_expert_select_variant(const MoeExpertArgs& a);
Status moe_expert_launch(const MoeExpertArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
