// Launchers of the K-chunked tensor-core skinny GEMM (dense_gemm_kc.cuh) for the dense_gemv
// registry (dense_gemv_sm90.cu). No Status across nvcc.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/gemm/dense_gemv_args.h"

namespace dsv4::cuda::sm90 {

// Split-K factor (cluster size along z) for `tiles` row tiles of a matrix with K/128 = nkb
// blocks on `sms` SMs: doubles from 1 while fewer than 2 CTAs per SM would run, up to 8 and
// while every rank keeps >= 2 blocks. Depends on the shape only (results are batch-invariant).
int dense_gemm_kc_split(int tiles, int nkb, int sms);

// The launch shared by the three K-chunked forms: grid (row tiles of rows_per_cta, token chunks of
// tokens_per_pass (at most 1024), split S = dense_gemm_kc_split), clusters (1, 1, S) when S > 1,
// `threads` per CTA, `smem` bytes of dynamic shared memory (opted in first). kernel: a
// __global__ void(DenseGemvArgs).
cudaError_t dense_gemm_kc_cluster_launch(const void* kernel, int smem, int rows_per_cta, int tokens_per_pass,
                                         int threads, const DenseGemvArgs& a, cudaStream_t s);

// Dynamic shared memory of a configuration (x f32 or bf16), for the legality check.
int dense_gemm_kc_smem(int warps, int rows_per_warp, int tokens, bool x_f32);

// Launch with NW warps, MTL m16 tiles per warp, MT = 8*NTT tokens per CTA. Shapes must be legal
// (N % (16*NW*MTL) == 0, K % 128 == 0, x 16-byte aligned, x_stride % 8 == 0).
template <int NW, int MTL, int NTT>
cudaError_t dense_gemm_kc_launch(const DenseGemvArgs& a, cudaStream_t s);

// The second form (dense_gemm_kc2.cuh: x staged as bf16, converted once per CTA when f32;
// staging addresses computed once). Same legality; its own shared-memory size.
int dense_gemm_kc2_smem(int warps, int rows_per_warp, int tokens, bool x_f32);
template <int NW, int MTL, int NTT>
cudaError_t dense_gemm_kc2_launch(const DenseGemvArgs& a, cudaStream_t s);

// The third form (dense_gemm_kc3.cuh: weights and x through an ST-deep cp.async ring).
// Legal when additionally K <= 32768 and 16 * warps * rows_per_warp <= 128.
int dense_gemm_kc3_smem(int warps, int rows_per_warp, int tokens, int stages, bool fp8, bool x_f32);
template <int NW, int MTL, int NTT, int ST>
cudaError_t dense_gemm_kc3_launch(const DenseGemvArgs& a, cudaStream_t s);

}  // namespace dsv4::cuda::sm90
