// mHC reference (spec §2.2). f32 throughout; the reference kernel's Sinkhorn ends on a column
// normalisation.
#include "kernels/ref/mhc.h"

#include <cmath>
#include <vector>

#include "kernels/ref/ops.h"

namespace dsv4::ref {

namespace {
// m[rows] = rho * (fn[rows, n*d] . x), rho = 1/sqrt(mean(x^2) + eps).
void mixing_logits(const float* x, const float* fn, int rows, int64_t width, float rms_eps, float* m) {
    double ss = 0.0;
    for (int64_t i = 0; i < width; ++i) ss += double(x[i]) * x[i];
    const float rho = 1.0f / std::sqrt(float(ss / double(width)) + rms_eps);
    for (int r = 0; r < rows; ++r) {
        double acc = 0.0;
        const float* f = fn + int64_t(r) * width;
        for (int64_t i = 0; i < width; ++i) acc += double(f[i]) * x[i];
        m[r] = float(acc) * rho;
    }
}
}  // namespace

void mhc_coeffs(const float* x, const MhcParams& p, MhcCoeffs& out) {
    const int n = p.n;
    const int rows = (2 + n) * n;
    float m[8 * 10];
    mixing_logits(x, p.fn, rows, int64_t(n) * p.d, p.rms_eps, m);
    for (int j = 0; j < n; ++j) {
        out.pre[j] = sigmoid(m[j] * p.scale[0] + p.base[j]) + p.hc_eps;
        out.post[j] = 2.0f * sigmoid(m[n + j] * p.scale[1] + p.base[n + j]);
    }
    float* C = out.comb;
    for (int j = 0; j < n; ++j) {
        float mx = -INFINITY;
        for (int k = 0; k < n; ++k) {
            C[j * n + k] = m[2 * n + j * n + k] * p.scale[2] + p.base[2 * n + j * n + k];
            mx = std::max(mx, C[j * n + k]);
        }
        float sum = 0.0f;
        for (int k = 0; k < n; ++k) sum += (C[j * n + k] = std::exp(C[j * n + k] - mx));
        for (int k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / sum + p.hc_eps;
    }
    auto col_norm = [&] {
        for (int k = 0; k < n; ++k) {
            float s = 0.0f;
            for (int j = 0; j < n; ++j) s += C[j * n + k];
            for (int j = 0; j < n; ++j) C[j * n + k] /= (s + p.hc_eps);
        }
    };
    auto row_norm = [&] {
        for (int j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int k = 0; k < n; ++k) s += C[j * n + k];
            for (int k = 0; k < n; ++k) C[j * n + k] /= (s + p.hc_eps);
        }
    };
    col_norm();
    for (int it = 1; it < p.sinkhorn_iters; ++it) {
        row_norm();
        col_norm();
    }
}

void mhc_collapse(const float* x, const MhcCoeffs& c, int n, int d, float* u) {
    for (int i = 0; i < d; ++i) {
        float acc = 0.0f;
        for (int j = 0; j < n; ++j) acc += c.pre[j] * x[int64_t(j) * d + i];
        u[i] = acc;
    }
}

void mhc_expand(float* x, const float* y, const MhcCoeffs& c, int n, int d) {
    std::vector<float> out(size_t(n) * d);
    for (int k = 0; k < n; ++k)
        for (int i = 0; i < d; ++i) {
            float acc = c.post[k] * y[i];
            for (int j = 0; j < n; ++j) acc += c.comb[j * n + k] * x[int64_t(j) * d + i];
            out[size_t(k) * d + i] = acc;
        }
    std::copy(out.begin(), out.end(), x);
}

void mhc_head(const float* x, const float* fn, const float* base, const float* scale, int n, int d, float hc_eps,
              float rms_eps, float* h) {
    float m[8];
    mixing_logits(x, fn, n, int64_t(n) * d, rms_eps, m);
    float pre[8];
    for (int j = 0; j < n; ++j) pre[j] = sigmoid(m[j] * scale[0] + base[j]) + hc_eps;
    for (int i = 0; i < d; ++i) {
        float acc = 0.0f;
        for (int j = 0; j < n; ++j) acc += pre[j] * x[int64_t(j) * d + i];
        h[i] = acc;
    }
}

}  // namespace dsv4::ref
