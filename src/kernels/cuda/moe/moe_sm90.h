// Entry points of the sm90 MoE translation units for moe.cpp (no Status across nvcc).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/common/kernel_params.h"
#include "kernels/cuda/moe/moe_args.h"

namespace dsv4::cuda::sm90 {

cudaError_t moe_route_run(const MoeRouteArgs& a, cudaStream_t stream);
cudaError_t moe_permute_run(const MoePermuteArgs& a, cudaStream_t stream);
// Route then permute r's output: one fused kernel when moe_route_permute_fused (r writes the
// topk_ids / topk_w that p reads, same n_tokens / top_k / n_experts, n_tokens * top_k <= 128, n_experts <= 256),
// else moe_route_run + moe_permute_run.
bool moe_route_permute_fused(const MoeRouteArgs& r, const MoePermuteArgs& p);
cudaError_t moe_route_permute_run(const MoeRouteArgs& r, const MoePermuteArgs& p, cudaStream_t stream);
cudaError_t moe_combine_run(const MoeCombineArgs& a, cudaStream_t stream);

int moe_expert_count();
KernelParams moe_expert_params(int i);
bool moe_expert_is_mma(int i);     // tensor-core (mma.sync) entry
int moe_expert_dequant(int i);     // tensor-core dequant (moe_expert_mma.cuh DQ): 0 via f32, 1..4 conversion-free
int moe_expert_min_blocks(int i);  // tensor-core: __launch_bounds__ minimum CTAs per SM
MoeWeightLayout moe_expert_layout(int i);  // the code layout entry i reads
// cudaErrorInvalidValue when variant is out of range or its layout is not a.layout.
cudaError_t moe_expert_run(const MoeExpertArgs& a, int variant, cudaStream_t stream);
// Grouped expert GEMM (moe_grouped_sm90.cu): NW warps of WT m16 weight tiles each, MT rows of one
// expert per CTA, STAGES-deep cp.async ring, MINB CTAs per SM asked of the register allocator.
struct MoeGroupedShape {
    int warps, tiles, mt, stages, min_blocks;
    MoeWeightLayout layout;
    int smem_bytes;      // at K = 4096 (moe_grouped_smem_bytes for another K)
    bool wgmma = false;  // moe_wgmma_sm90.cu: 2 warpgroups, 256 weight rows, x in the k-permuted layout
    // wgmma rows with mt 128: an expert's rows past its last full 128 go on a 64-row tile when there
    // are at most 64 of them (a second launch of the 64-row kernel); work list [2] counts.
    bool mixed = false;
    // moe_wgmma_ws_sm90.cu: a producer warpgroup loads, two consumer warpgroups (warps = 8) compute.
    bool ws = false;
    // ws rows with the balanced work list: each expert's rows in ceil(rows / 128) tiles of one width, a
    // multiple of 8 (moe_tile_list.cuh); one launch.
    bool balanced = false;
    // moe_wgmma_persist_sm90.cu: the ws rows on one CTA per SM walking balanced tiles of at most mt rows
    // (decode-sized steps).
    bool persistent = false;
};
// A warp-specialised wgmma row (moe_wgmma_ws_sm90.cu, moe_wgmma_persist_sm90.cu): 8 computing warps x 2
// m16 tiles (256 weight rows), one CTA per SM; smem_bytes at K = 4096.
constexpr MoeGroupedShape ws_grouped_shape(bool pair_rotated, int mt, int stages, int smem_bytes) {
    MoeGroupedShape sh{8,          2,   mt,
                       stages,     1,   pair_rotated ? MoeWeightLayout::kPairRotated : MoeWeightLayout::kCheckpoint,
                       smem_bytes, true};
    sh.ws = true;
    return sh;
}
int moe_grouped_count();
MoeGroupedShape moe_grouped_shape(int i);
// Upper bound of the work-list entries for n_rows rows over n_experts with tiles of mt rows.
int moe_grouped_max_tiles(int n_rows, int n_experts, int mt);
// Upper bound of the 128-row tiles of a mixed work list (MoeGroupedShape::mixed): an expert's 128-row
// tiles each hold more than 64 of its rows, so there are at most n_rows / 65 of them. Why it matters:
// the 128-row launch is sized by it, and with the bound above a 128-token step (3 rows per expert)
// launched thousands of CTAs that only exit (ledger E37: 37.1 vs 31 ms).
int moe_grouped_mixed_cap128(int n_rows, int n_experts);
// Writes a.tile_list / a.n_tiles, then runs the GEMM. cudaErrorInvalidValue for a bad variant or layout.
cudaError_t moe_grouped_run(const MoeExpertArgs& a, int variant, cudaStream_t stream);
int moe_grouped_smem_bytes(int variant, int K);
// The wgmma rows of the grouped table (moe_wgmma_sm90.cu), indexed from 0 here.
int moe_wgmma_count();
MoeGroupedShape moe_wgmma_shape(int i);
int moe_wgmma_smem_bytes(int i, int K);
cudaError_t moe_wgmma_run(const MoeExpertArgs& a, int i, cudaStream_t stream);
// The warp-specialised wgmma rows (moe_wgmma_ws_sm90.cu), appended to the wgmma rows above.
int moe_wgmma_ws_count();
MoeGroupedShape moe_wgmma_ws_shape(int i);
int moe_wgmma_ws_smem_bytes(int i, int K);
cudaError_t moe_wgmma_ws_run(const MoeExpertArgs& a, int i, cudaStream_t stream);
// The persistent warp-specialised rows (moe_wgmma_persist_sm90.cu), after the ws rows.
int moe_wgmma_persist_count();
MoeGroupedShape moe_wgmma_persist_shape(int i);
int moe_wgmma_persist_smem_bytes(int i, int K);
cudaError_t moe_wgmma_persist_run(const MoeExpertArgs& a, int i, cudaStream_t stream);
// out[r, moe_kperm::position(c)] = bf16(x[r, c]) over n f32 elements (n % 64 == 0, rows of 64k).
cudaError_t moe_x_kperm_run(const float* x, int64_t n, void* out, cudaStream_t stream);
// In place over n_words 32-bit words of e2m1 codes (4-byte aligned): checkpoint -> pair-rotated.
cudaError_t moe_weight_repack_run(uint32_t* w, size_t n_words, cudaStream_t stream);

}  // namespace dsv4::cuda::sm90
