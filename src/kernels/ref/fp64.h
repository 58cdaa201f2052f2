// fp64 evaluations of the decode ops' formulas, the yardstick every CUDA kernel variant is measured
// against (the op tests and `dsv4 tune`'s correctness gate): inputs are the f32 values the kernel
// sees (already rounded to the storage format), every sum is in double, and the output is left in
// double so the comparison measures only the kernel's error. Host-only; no CUDA types.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4::ref {

// One head of sparse attention with a sink (spec §2.4):
//   z_s = scale <q, k_s>,  M = max(sink, max_s z_s),
//   o = sum_s e^(z_s - M) k_s / (sum_s e^(z_s - M) + e^(sink - M)).
// q [D]; rows[s] -> the s-th K=V row [D] (n_rows >= 0, rows may repeat); out [D]. A -inf sink with no
// rows gives zeros (M = -inf: nothing to attend to).
void sink_attention_f64(const float* q, int D, const float* const* rows, int64_t n_rows, double sink, double scale,
                        double* out);

// The grouped linear map of the output projection (and the plain one with n_per_group = rows):
// y[t * rows + r] = sum_k w[r, k] x[t, (r / n_per_group) K + k] for rows r in [r_begin, r_end) and
// every t < T. w f32 [rows, K]; x f32 [T, x_stride]. Row ranges let callers spread large shapes over
// threads; y must hold T x rows values. abs_sum (optional, same layout): sum_k |w[r, k] x[...]|, the
// scale of a float kernel's rounding error on that output.
void linear_f64(const float* w, int64_t rows, int64_t K, int64_t n_per_group, const float* x, int64_t x_stride,
                int64_t T, int64_t r_begin, int64_t r_end, double* y, double* abs_sum = nullptr);

// Routing of one token (spec §2.9): s_e = sqrt(softplus(logit_e)); the experts are hash_ids[0..K)
// when given (hash routing), else the top-k by s_e + bias_e in f32 (bias may be null; it only
// selects), NaN keys last, ties to the lower id; weights scale s_e / sum of the chosen s (non-finite s
// counted as 0, non-finite weights as 0). logits [E]; ids, weights: K each.
void moe_route_f64(const float* logits, const float* bias, int E, int K, double scale, std::vector<int>& ids,
                   std::vector<float>& weights, const int32_t* hash_ids = nullptr);

// One routed expert on one token, accumulated into out [d]:
//   a1 = W1 x, a3 = W3 x, a1 = min(a1, limit), a3 = clamp(a3, -limit, limit),
//   h = bf16(silu(a1) a3 weight) (the reference rounds h to bf16 after the routing weight),
//   out += W2 h.
// x [d]; w1, w3 [I, d]; w2 [d, I] (dequantised f32).
void swiglu_expert_f64(const float* x, const float* w1, const float* w3, const float* w2, int d, int I, double limit,
                       double weight, double* out);

}  // namespace dsv4::ref
