// FP8-block and MXFP4 quantisers and dequantisers (see quant.h for the formats and the scale rule).
#include "model/quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace dsv4 {
namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

uint8_t ue8m0_scale_for(float amax, float max_code) {
    if (std::isnan(amax) || amax == 0.0f) return 127;
    if (!std::isfinite(amax)) return 254;
    uint8_t e = ue8m0_ceil(amax / max_code);
    // amax / max_code is rounded; make sure the chosen power of two really keeps amax in range.
    // (amax / 2^k is exact, so this test is exact.)
    while (e < 254 && amax / ue8m0_to_f32(e) > max_code) ++e;
    return e;
}

Fp8BlockQuant quantize_fp8_block(const float* w, int64_t N, int64_t K, int block) {
    DSV4_CHECK(block > 0, "block {}", block);
    const int64_t gn = ceil_div(N, block), gk = ceil_div(K, block);
    Fp8BlockQuant r;
    r.q.resize(size_t(N * K));
    r.scale_ue8m0.resize(size_t(gn * gk));
    for (int64_t bn = 0; bn < gn; ++bn) {
        for (int64_t bk = 0; bk < gk; ++bk) {
            const int64_t n0 = bn * block, n1 = std::min(N, n0 + block);
            const int64_t k0 = bk * block, k1 = std::min(K, k0 + block);
            float amax = 0.0f;
            for (int64_t n = n0; n < n1; ++n)
                for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
            const uint8_t e = ue8m0_scale_for(amax, 448.0f);
            r.scale_ue8m0[size_t(bn * gk + bk)] = e;
            const float s = ue8m0_to_f32(e);
            for (int64_t n = n0; n < n1; ++n)
                for (int64_t k = k0; k < k1; ++k) r.q[size_t(n * K + k)] = f32_to_fp8e4m3(w[n * K + k] / s);
        }
    }
    return r;
}

// The dequantisers run over whole checkpoints, so they decode through a 256-entry table and one
// scale per block column instead of calling the scalar codecs per element (same values, bit for bit).
namespace {
struct Fp8Table {
    float v[256];
    Fp8Table() {
        for (int b = 0; b < 256; ++b) v[b] = fp8e4m3_to_f32(uint8_t(b));
    }
};

template <typename ScaleAt>
void dequantize_fp8_rows(const uint8_t* q, int64_t N, int64_t K, int block, float* out, ScaleAt scale_at) {
    DSV4_CHECK(block > 0, "block {}", block);
    const Fp8Table t;
    const int64_t gk = ceil_div(K, block);
    std::vector<float> row_scale(static_cast<size_t>(gk));
    for (int64_t n = 0; n < N; ++n) {
        if (n % block == 0)
            for (int64_t g = 0; g < gk; ++g) row_scale[size_t(g)] = scale_at((n / block) * gk + g);
        const uint8_t* qr = q + n * K;
        float* o = out + n * K;
        for (int64_t k = 0; k < K; ++k) o[k] = t.v[qr[k]] * row_scale[size_t(k / block)];
    }
}
}  // namespace

void dequantize_fp8_block(const uint8_t* q, const uint8_t* scale, int64_t N, int64_t K, float* out, int block) {
    dequantize_fp8_rows(q, N, K, block, out, [&](int64_t i) { return ue8m0_to_f32(scale[i]); });
}

void dequantize_fp8_block_f32scale(const uint8_t* q, const float* scale, int64_t N, int64_t K, float* out, int block) {
    dequantize_fp8_rows(q, N, K, block, out, [&](int64_t i) { return scale[i]; });
}

Mxfp4Quant quantize_mxfp4(const float* w, int64_t N, int64_t K) {
    const int64_t gk = ceil_div(K, kMxfp4Group), kb = ceil_div(K, 2);
    Mxfp4Quant r;
    r.packed.assign(size_t(N * kb), 0);
    r.scales.resize(size_t(N * gk));
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t g = 0; g < gk; ++g) {
            const int64_t k0 = g * kMxfp4Group, k1 = std::min(K, k0 + kMxfp4Group);
            float amax = 0.0f;
            for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
            const uint8_t e = ue8m0_scale_for(amax, 6.0f);
            r.scales[size_t(n * gk + g)] = e;
            const float s = ue8m0_to_f32(e);
            for (int64_t k = k0; k < k1; ++k) {
                const uint8_t code = f32_to_fp4e2m1(w[n * K + k] / s) & 0xf;
                r.packed[size_t(n * kb + k / 2)] |= uint8_t((k % 2 == 0) ? code : code << 4);
            }
        }
    }
    return r;
}

void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t N, int64_t K, float* out) {
    const int64_t gk = ceil_div(K, kMxfp4Group), kb = ceil_div(K, 2);
    std::vector<float> row_scale(static_cast<size_t>(gk));
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t g = 0; g < gk; ++g) row_scale[size_t(g)] = ue8m0_to_f32(scales[n * gk + g]);
        for (int64_t k = 0; k < K; ++k) {
            const uint8_t byte = packed[n * kb + k / 2];
            const uint8_t code = (k % 2 == 0) ? (byte & 0xf) : (byte >> 4);
            out[n * K + k] = fp4e2m1_to_f32(code) * row_scale[size_t(k / kMxfp4Group)];
        }
    }
}

}  // namespace dsv4
