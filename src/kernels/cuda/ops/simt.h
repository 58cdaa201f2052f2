// The correct-first CUDA-core kernels behind cuda::linear / moe_experts / moe_combine (linear.cu,
// moe/moe_simt.cu): any WFmt, f32 activations, weights dequantised element by element. fast_path.cpp calls
// them whenever the fast decode kernels are off (DSV4_FAST_KERNELS=0) or not legal for a call.
// Same arguments and semantics as the ops.h entry points. Host-only header.
#pragma once

#include "kernels/cuda/ops/ops.h"

namespace dsv4::cuda {

cudaError_t linear_simt(const WeightDesc& w, int expert, const float* x, int64_t ldx, int n_per_group, int64_t group_in,
                        float* y, int64_t ldy, int T, bool accumulate, cudaStream_t st);
cudaError_t moe_experts_simt(const MoeArgs& a, cudaStream_t st);
cudaError_t moe_combine_simt(const MoeArgs& a, const float* shared, float* out, cudaStream_t st);

// Expert parallelism (MoeArgs::ep_count > 0), after routing: ids [n] (global expert ids) become
// local ids id - first for experts in [first, first + count) and `drop` for every other expert;
// when zero_rows is set, the [d]-long f32 row i of zero_rows is zeroed for every dropped id i (the
// fast path's expert outputs are in assignment order, and the combine reads all of them).
cudaError_t moe_ep_localize(int32_t* ids, int n, int first, int count, int drop, float* zero_rows, int d,
                            cudaStream_t st);

}  // namespace dsv4::cuda
