#include "kernels/ref/fp64.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtype.h"

namespace dsv4::ref {

void sink_attention_f64(const float* q, int D, const float* const* rows, int64_t n_rows, double sink, double scale,
                        double* out) {
    std::fill(out, out + D, 0.0);
    std::vector<double> z(size_t(std::max<int64_t>(n_rows, 0)));
    double M = sink;
    for (int64_t s = 0; s < n_rows; ++s) {
        double d = 0;
        for (int i = 0; i < D; ++i) d += double(q[i]) * rows[s][i];
        z[size_t(s)] = d * scale;
        M = std::max(M, z[size_t(s)]);
    }
    if (M == -INFINITY) return;
    double den = std::exp(sink - M);
    for (int64_t s = 0; s < n_rows; ++s) {
        const double p = std::exp(z[size_t(s)] - M);
        den += p;
        for (int i = 0; i < D; ++i) out[i] += p * rows[s][i];
    }
    for (int i = 0; i < D; ++i) out[i] /= den;
}

void linear_f64(const float* w, int64_t rows, int64_t K, int64_t n_per_group, const float* x, int64_t x_stride,
                int64_t T, int64_t r_begin, int64_t r_end, double* y, double* abs_sum) {
    for (int64_t r = r_begin; r < r_end; ++r) {
        const float* wr = w + r * K;
        const int64_t off = (r / n_per_group) * K;
        for (int64_t t = 0; t < T; ++t) {
            const float* xt = x + t * x_stride + off;
            double acc = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double p = double(wr[k]) * xt[k];
                acc += p;
                mag += std::fabs(p);
            }
            y[t * rows + r] = acc;
            if (abs_sum) abs_sum[t * rows + r] = mag;
        }
    }
}

void moe_route_f64(const float* logits, const float* bias, int E, int K, double scale, std::vector<int>& ids,
                   std::vector<float>& weights, const int32_t* hash_ids) {
    std::vector<double> s(static_cast<size_t>(E));
    std::vector<float> key(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) {
        const double l = logits[e];
        const double sp = l > 20 ? l : std::log1p(std::exp(l));  // softplus, PyTorch's threshold
        s[size_t(e)] = std::sqrt(sp);
        const float k = float(s[size_t(e)]) + (bias ? bias[e] : 0.0f);
        key[size_t(e)] = std::isnan(k) ? -INFINITY : k;
    }
    if (hash_ids) {
        ids.assign(hash_ids, hash_ids + K);
    } else {
        std::vector<int> idx(static_cast<size_t>(E));
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int a, int b) {
            return key[size_t(a)] != key[size_t(b)] ? key[size_t(a)] > key[size_t(b)] : a < b;
        });
        ids.assign(idx.begin(), idx.begin() + K);
    }
    double sum = 0;
    for (int e : ids) sum += std::isfinite(s[size_t(e)]) ? s[size_t(e)] : 0.0;
    weights.clear();
    for (int e : ids) {
        const float v = float(scale * s[size_t(e)] / (sum + 1e-20));
        weights.push_back(std::isfinite(v) ? v : 0.0f);
    }
}

void swiglu_expert_f64(const float* x, const float* w1, const float* w3, const float* w2, int d, int I, double limit,
                       double weight, double* out) {
    std::vector<double> h(static_cast<size_t>(I));
    for (int n = 0; n < I; ++n) {
        double a1 = 0, a3 = 0;
        for (int j = 0; j < d; ++j) {
            a1 += double(w1[size_t(n) * d + j]) * x[j];
            a3 += double(w3[size_t(n) * d + j]) * x[j];
        }
        a1 = std::min(a1, limit);
        a3 = std::clamp(a3, -limit, limit);
        h[size_t(n)] = round_bf16(float(a1 / (1 + std::exp(-a1)) * a3 * weight));
    }
    for (int n = 0; n < d; ++n) {
        double acc = 0;
        for (int j = 0; j < I; ++j) acc += double(w2[size_t(n) * I + j]) * h[size_t(j)];
        out[n] += acc;
    }
}

}  // namespace dsv4::ref
