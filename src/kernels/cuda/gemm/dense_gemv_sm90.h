// Entry points of dense_gemv_sm90.cu for dense_gemv.cpp (no Status across nvcc).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/gemm/dense_gemv_args.h"
#include "kernels/cuda/common/kernel_params.h"

namespace dsv4::cuda::sm90 {

int dense_gemv_count();
KernelParams dense_gemv_params(int i);
// CUDA-core GEMV, tensor-core GEMV with x for the whole K staged (token chunks re-read the
// weights), K-chunked tensor-core GEMM (all tokens up to block_t per weight pass), and its
// second form with x staged as bf16 (dense_gemm_kc2.cuh) and third with weights and x through a
// cp.async ring (dense_gemm_kc3.cuh).
enum class GemvKind { kSimt, kMma, kKChunk, kKChunk2, kKChunk3 };
GemvKind dense_gemv_kind(int i);
cudaError_t dense_gemv_run(const DenseGemvArgs& a, int variant, cudaStream_t stream);

}  // namespace dsv4::cuda::sm90
