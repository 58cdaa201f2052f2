// Entry points of dense_gemv_sm90.cu for dense_gemv.cpp (no Status across nvcc).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/gemm/dense_gemv_args.h"
#include "kernels/cuda/gemm/kernel_params.h"

namespace dsv4::cuda::sm90 {

int dense_gemv_count();
KernelParams dense_gemv_params(int i);
bool dense_gemv_is_mma(int i);  // tensor-core (mma.sync) entry
cudaError_t dense_gemv_run(const DenseGemvArgs& a, int variant, cudaStream_t stream);

}  // namespace dsv4::cuda::sm90
