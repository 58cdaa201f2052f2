// Quantisation simulation of the DeepSeek reference forward (spec §2.12, gotchas 10-11): what the
// model was trained with. The CPU reference applies these only when asked (RefNumerics); the
// golden tests against transformers run with them off.
#pragma once

#include <cstdint>

namespace dsv4::ref {

// FP8 e4m3 quantise-dequantise in place of x[n] in blocks of `block` with a UE8M0 (power of two)
// scale 2^ceil(log2(amax/448)), amax floored at 1e-4; round to nearest even, saturating.
void fp8_qdq_blocks(float* x, int64_t n, int block);

// The cached value of one K=V row under the reference's FP8 KV (spec §2.4, §7.2 gotcha 10): FP8
// QDQ of the nope dims x[0, dim - rope_dim) in blocks of 64, and the RoPE dims rounded to BF16
// (the reference holds them in BF16). Exactly what the FP8 584-byte row stores (model/kv_rows.h).
void kv_cache_qdq(float* x, int64_t dim, int64_t rope_dim);

// FP4 e2m1 quantise-dequantise in place in blocks of `block` with scale 2^ceil(log2(amax/6)),
// amax floored at 6 * 2^-126.
void fp4_qdq_blocks(float* x, int64_t n, int block);

// In-place orthonormal Walsh-Hadamard transform of x[n] (n a power of two; Sylvester order,
// scaled by n^-1/2).
void hadamard(float* x, int64_t n);

}  // namespace dsv4::ref
