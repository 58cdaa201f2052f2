// Entry points of sparse_decode_sm90.cu for sparse_decode.cpp (no Status across nvcc).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention/sparse_decode_args.h"
#include "kernels/cuda/common/kernel_params.h"

namespace dsv4::cuda::sm90 {

int sparse_decode_count();
KernelParams sparse_decode_params(int i);
cudaError_t sparse_decode_run(const SparseDecodeArgs& a, int variant, int n_splits, cudaStream_t stream);

}  // namespace dsv4::cuda::sm90

namespace dsv4::cuda::sm90 {
size_t sparse_decode_smem(int i, bool fp8);  // dynamic smem bytes; > 232448 means illegal
}
