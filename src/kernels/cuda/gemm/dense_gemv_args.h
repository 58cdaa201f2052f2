// Arguments of the weight-streaming GEMV y = x W^T for the decode step's dense matrices
// (spec §4.2 formats): FP8 e4m3 block-128 weights with UE8M0 scales (wq_a, wq_b, wkv, wo_a,
// wo_b, shared experts, indexer wq_b) and BF16 weights (router, compressors, LM head).
// Grouped form (wo_a, spec §2.4): y[t, g*N + n] = sum_k x[t, g*K + k] * W[g*N + n, k].
// Status-free so nvcc translation units can include it.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

enum class WeightFormat { kBf16, kFp8Block };

struct DenseGemvArgs {
    const void* x = nullptr;           // [n_tokens, x_stride] bf16, or f32 when x_f32
    bool x_f32 = false;                // f32 x (rounded to bf16 while staged; x_stride % 4 == 0, 16-B aligned)
    const void* w = nullptr;           // [groups * N, K] bf16 or fp8 e4m3
    const uint8_t* w_scale = nullptr;  // fp8: [ceil(groups*N/128), K/128] UE8M0; bf16: unused
    void* y = nullptr;                 // [n_tokens, groups * N] bf16, or f32 when out_f32
    bool out_f32 = false;
    WeightFormat format = WeightFormat::kFp8Block;
    int n_tokens = 0;
    int N = 0;  // output rows per group
    int K = 0;  // reduction length per group (multiple of 512)
    int groups = 1;
    int64_t x_stride = 0;  // elements between tokens; 0 = groups * K
    int variant = -1;      // registry index; -1 = the heuristic
};

}  // namespace dsv4::cuda
