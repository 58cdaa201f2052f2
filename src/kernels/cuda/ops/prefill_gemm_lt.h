// The cuBLASLt half of the prefill GEMMs (prefill_gemm.h): one bf16 x bf16 -> f32 / bf16 matmul with
// f32 accumulation, its algorithm chosen once per (shape, token bucket) and kept.
//
// Why not cublasGemmEx: it asks cuBLASLt's heuristic for every new problem shape and keeps the answer
// in a process-wide cache of up to 8,192 entries. Prefill and mixed steps give nearly every token count
// its own shape, so host memory grew for hours under load (ledger E41, E43: +8-9 MiB in an 8-minute
// soak) and each new count paid a heuristic query. Here the token count is rounded up to a bucket
// (64 rows up to 1,024, 256 above) for the query only; the matmul runs on the exact count with the
// bucket's algorithm, so the number of queries and of kept plans is bounded by the shapes times the
// buckets. Host-only header.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// Owns the cuBLASLt handle, the workspace pointer and the plan cache; not thread-safe (the runner's
// one stream of steps uses it).
class LtGemm;

// Creates one (workspace: device memory of `workspace_bytes`, owned by the caller, outliving it).
// Null on failure (cuBLASLt could not be initialised).
LtGemm* lt_gemm_create(void* workspace, size_t workspace_bytes);
void lt_gemm_destroy(LtGemm* g);
// Plans kept so far (distinct shape x bucket queries); for tests and the start-up log.
int lt_gemm_plan_count(const LtGemm* g);

// Column-major, as cuBLAS: for each of `groups` batches b, C_b (n x t, ld ldc, dtype bf16 when
// c_bf16 else f32) = A_b^T (A_b: k x n bf16, ld lda, A + b * a_stride elements) x B_b (k x t bf16,
// ld ldb, B + b * b_stride). Errors: cudaErrorUnknown when cuBLASLt fails or has no algorithm.
cudaError_t lt_gemm_run(LtGemm* g, int n, int t, int k, const void* A, int64_t lda, int64_t a_stride, const void* B,
                        int64_t ldb, int64_t b_stride, void* C, int64_t ldc, int64_t c_stride, bool c_bf16, int groups,
                        cudaStream_t st);

// The token bucket whose algorithm a t-token matmul uses (64-row steps to 1,024, 256-row steps above).
int lt_gemm_bucket(int t);

}  // namespace dsv4::cuda
