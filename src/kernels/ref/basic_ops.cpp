// Elementwise, norm, linear and top-k reference ops (see ops.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include <cblas.h>

#include "kernels/ref/ops.h"

namespace dsv4::ref {

void linear(const float* x, const float* w, float* y, int64_t T, int64_t N, int64_t K, bool accumulate) {
    if (T == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(N), int(K), 1.0f, x, int(K), w, int(K),
                accumulate ? 1.0f : 0.0f, y, int(N));
}

void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t n, float eps, int64_t x_stride) {
    if (x_stride < 0) x_stride = n;
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * x_stride;
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
        const float inv = 1.0f / std::sqrt(float(ss / double(n)) + eps);
        float* yr = y + r * n;
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * weight[i];
    }
}

void rms_norm_unweighted(float* x, int64_t rows, int64_t n, float eps) {
    for (int64_t r = 0; r < rows; ++r) {
        float* xr = x + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
        const float inv = 1.0f / std::sqrt(float(ss / double(n)) + eps);
        for (int64_t i = 0; i < n; ++i) xr[i] *= inv;
    }
}

RopeTable make_rope_table(double base, int rope_dim, bool yarn, double factor, double original_max_position,
                          double beta_fast, double beta_slow) {
    RopeTable t;
    t.rope_dim = rope_dim;
    const int half = rope_dim / 2;
    t.inv_freq.resize(half);
    // f_i = base^(-2i/R), computed in f32 like the reference implementations.
    std::vector<float> f(half);
    for (int i = 0; i < half; ++i) f[i] = float(1.0 / std::pow(base, double(2 * i) / double(rope_dim)));
    if (!yarn) {
        t.inv_freq = f;
        return t;
    }
    // YaRN frequency interpolation without magnitude scaling (spec §2.4, gotcha 21).
    auto correction_dim = [&](double n_rot) {
        return double(rope_dim) * std::log(original_max_position / (n_rot * 2.0 * M_PI)) / (2.0 * std::log(base));
    };
    double low = std::floor(correction_dim(beta_fast));
    double high = std::ceil(correction_dim(beta_slow));
    low = std::max(low, 0.0);
    high = std::min(high, double(rope_dim - 1));
    if (low == high) high += 0.001;  // avoid a zero-width ramp
    for (int i = 0; i < half; ++i) {
        const float ramp = float(std::clamp((double(i) - low) / (high - low), 0.0, 1.0));
        t.inv_freq[i] = f[i] / float(factor) * ramp + f[i] * (1.0f - ramp);
    }
    return t;
}

void apply_rope(float* v, int dim, const RopeTable& t, int64_t pos, bool inverse) {
    const int half = t.rope_dim / 2;
    float* r = v + (dim - t.rope_dim);
    for (int i = 0; i < half; ++i) {
        const float ang = float(pos) * t.inv_freq[i];  // f32 product, as the references do
        const float c = std::cos(ang);
        const float s = inverse ? -std::sin(ang) : std::sin(ang);
        const float a = r[2 * i], b = r[2 * i + 1];
        r[2 * i] = a * c - b * s;
        r[2 * i + 1] = a * s + b * c;
    }
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x * sigmoid(x); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

std::vector<int32_t> topk_indices(std::span<const float> scores, int k) {
    std::vector<int32_t> idx(scores.size());
    std::iota(idx.begin(), idx.end(), 0);
    auto key = [&](int32_t i) {
        const float s = scores[i];
        return std::isnan(s) ? -INFINITY : s;
    };
    auto better = [&](int32_t a, int32_t b) {
        const float ka = key(a), kb = key(b);
        if (ka != kb) return ka > kb;
        return a < b;
    };
    k = std::min<int>(k, int(idx.size()));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
    idx.resize(k);
    return idx;
}

bool index_selects_all(int64_t n_rows, int k) { return n_rows <= int64_t(k); }

std::vector<int32_t> index_select(std::span<const float> scores, int k) {
    if (!index_selects_all(int64_t(scores.size()), k)) return topk_indices(scores, k);
    std::vector<int32_t> idx(scores.size());
    std::iota(idx.begin(), idx.end(), 0);
    return idx;
}

}  // namespace dsv4::ref
