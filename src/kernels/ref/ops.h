// CPU reference ops for DeepSeek-V4: plain loops, f32 accumulation, written for clarity. These
// define the semantics every CUDA kernel is tested against. Each op documents its shapes and the
// spec section it implements. All tensors are row-major f32 unless stated.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::ref {

// y[T, N] = x[T, K] * W[N, K]^T (+ y if accumulate). W is [out, in] as in the checkpoint.
void linear(const float* x, const float* w, float* y, int64_t T, int64_t N, int64_t K, bool accumulate = false);

// Weighted RMSNorm over rows of width n: y = x * rsqrt(mean(x^2) + eps) * weight (spec §2.0).
// `x_stride` lets callers normalise a strided slice (B10); y is contiguous [rows, n].
void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t n, float eps, int64_t x_stride = -1);
// Unweighted RMSNorm in place on rows of width n (the per-head q norm, spec §2.4).
void rms_norm_unweighted(float* x, int64_t rows, int64_t n, float eps);

// Rotary table for R rotary dims: inv_freq[R/2] (spec §2.4). yarn==false: base^(-2i/R).
struct RopeTable {
    std::vector<float> inv_freq;
    int rope_dim = 0;
};
RopeTable make_rope_table(double base, int rope_dim, bool yarn, double factor, double original_max_position,
                          double beta_fast, double beta_slow);
// Rotates interleaved pairs (2i, 2i+1) of the trailing R dims of v[dim] at position pos.
// inverse==true rotates by -angle (the inverse RoPE on the attention output).
void apply_rope(float* v, int dim, const RopeTable& t, int64_t pos, bool inverse = false);

float sigmoid(float x);
float silu(float x);
float softplus(float x);  // PyTorch default: beta 1, linear above threshold 20

// Top-k of scores[n] (k <= n): indices sorted by score descending, ties by lowest index.
// NaN scores rank below every number (B12); the result always holds k distinct valid indices.
std::vector<int32_t> topk_indices(std::span<const float> scores, int k);

// The lightning indexer's choice of compressed rows (spec §2.8): when at most k rows are closed,
// every row in index order, with no score needed (index_selects_all); otherwise
// topk_indices(scores, k). The set is the top-k either way; only the attention's summation order
// differs from a score-ordered list. The CUDA indexer (indexer_select) follows the same rule.
bool index_selects_all(int64_t n_rows, int k);
std::vector<int32_t> index_select(std::span<const float> scores, int k);  // one score per closed row

}  // namespace dsv4::ref
