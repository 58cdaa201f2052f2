#include "kernels/ref/qat.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace dsv4::ref {

namespace {
template <typename Encode, typename Decode>
void qdq_blocks(float* x, int64_t n, int block, float max_code, float amax_floor, Encode enc, Decode dec) {
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        const int64_t b1 = std::min<int64_t>(n, b0 + block);
        float amax = amax_floor;
        for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float scale = ue8m0_to_f32(ue8m0_ceil(amax / max_code));
        for (int64_t i = b0; i < b1; ++i) x[i] = dec(enc(x[i] / scale)) * scale;
    }
}
}  // namespace

void fp8_qdq_blocks(float* x, int64_t n, int block) {
    qdq_blocks(x, n, block, 448.0f, 1e-4f, f32_to_fp8e4m3, fp8e4m3_to_f32);
}

void kv_cache_qdq(float* x, int64_t dim, int64_t rope_dim) {
    fp8_qdq_blocks(x, dim - rope_dim, 64);
    for (int64_t i = dim - rope_dim; i < dim; ++i) x[i] = round_bf16(x[i]);
}

void fp4_qdq_blocks(float* x, int64_t n, int block) {
    qdq_blocks(x, n, block, 6.0f, 6.0f * std::ldexp(1.0f, -126), f32_to_fp4e2m1, fp4e2m1_to_f32);
}

void hadamard(float* x, int64_t n) {
    for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
            for (int64_t j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float s = 1.0f / std::sqrt(float(n));
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace dsv4::ref
