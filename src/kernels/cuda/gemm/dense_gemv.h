// Weight-streaming GEMV/skinny GEMM for decode (see dense_gemv_args.h). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/status.h"
#include "kernels/cuda/gemm/dense_gemv_args.h"
#include "kernels/cuda/common/kernel_params.h"

namespace dsv4::cuda {

int dense_gemv_variant_count();
KernelParams dense_gemv_variant_params(int i);  // block_t = tokens per pass, block_h = rows/warp
std::string dense_gemv_variant_name(int i);
int dense_gemv_select_variant(const DenseGemvArgs& a);
bool dense_gemv_legal(int i, const DenseGemvArgs& a);

Status dense_gemv_launch(const DenseGemvArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
