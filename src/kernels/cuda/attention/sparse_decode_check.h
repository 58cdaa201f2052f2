// sparse_decode (sparse_decode.h) checked on the GPU against an fp64 host evaluation of its formula,
// on seeded random inputs of a chosen shape: what `dsv4 tune` runs before it times a variant or a
// split-KV target (issue 16), so that a kernel choice is judged against the CPU reference, not
// against another kernel. The same construction and bounds as the op tests
// (tests/kernels/cuda_runner/op_sparse_attention_test.cpp): rows drawn from a pool of random rows (FP8 rows
// quantised per 64 nope dims with a UE8M0 scale, RoPE dims bf16; or bf16 rows), bf16 queries of sd 2,
// random per-head sinks, scale 1/sqrt(512). Host-only header.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/attention/sparse_decode_args.h"

namespace dsv4::cuda {

struct SparseDecodeCheck {
    double rel_l2 = 0;         // ||got - ref||_2 / ||ref||_2 over the checked sequences
    double max_abs = 0;        // largest |got - ref|
    int64_t nan_mismatch = 0;  // elements NaN on one side only
    int splits = 0;            // split-KV splits the launch used
    // Bounds of the op tests (bf16 output of O(1) values): rel L2 1e-2, max abs 3e-2.
    static constexpr double kRelL2Bound = 1e-2, kMaxAbsBound = 3e-2;
    // The error in units of the bounds (<= 1 passes; infinity on a NaN mismatch).
    double error() const;
};

// Runs sparse_decode on `batch` sequences of `rows` rows each, `n_heads` heads of 512, with
// `variant` (-1: the heuristic's) and `target_ctas` (0: the heuristic's), and compares up to
// `checked` sequences (the first, the last and evenly spaced ones) against fp64. Errors: batch,
// rows or n_heads out of range, an illegal variant, a CUDA error.
Result<SparseDecodeCheck> check_sparse_decode(KvFormat format, int n_heads, int batch, int rows, int variant,
                                              int target_ctas, uint32_t seed, int checked = 8);

}  // namespace dsv4::cuda
