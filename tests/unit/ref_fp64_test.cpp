// The fp64 yardsticks of the CUDA op tests (kernels/ref/fp64.h) agree with the f32 CPU reference that
// defines the semantics (kernels/ref/ops.h, attention.h): the same formula, only the rounding differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/ref/attention.h"
#include "kernels/ref/fp64.h"
#include "kernels/ref/ops.h"

namespace dsv4 {
namespace {

std::vector<float> randn(std::mt19937& g, size_t n, float sd) {
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    return v;
}

// ||a - b|| / ||b||.
double rel_l2(const std::vector<double>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

TEST(RefFp64, SinkAttentionMatchesTheF32Reference) {
    std::mt19937 g(3);
    const int H = 4, D = 64;
    for (int n_rows : {0, 1, 37}) {
        const std::vector<float> q = randn(g, size_t(H) * D, 1.0f), sink = randn(g, H, 1.0f);
        std::vector<std::vector<float>> rows;
        std::vector<const float*> ptr;
        for (int s = 0; s < n_rows; ++s) rows.push_back(randn(g, D, 1.0f));
        for (auto& r : rows) ptr.push_back(r.data());
        const float scale = 1.0f / std::sqrt(float(D));
        std::vector<float> want(size_t(H) * D);
        ref::sink_attention(q.data(), ptr.data(), n_rows, sink.data(), H, D, scale, want.data());
        std::vector<double> got(size_t(H) * D);
        for (int h = 0; h < H; ++h)
            ref::sink_attention_f64(q.data() + h * D, D, ptr.data(), n_rows, sink[size_t(h)], scale,
                                    got.data() + h * D);
        if (n_rows == 0) {
            for (double v : got) EXPECT_EQ(v, 0.0);
        } else {
            EXPECT_LT(rel_l2(got, want), 1e-5) << n_rows << " rows";
        }
    }
    // A -inf sink and no rows: nothing to attend to, zeros (not NaN).
    const std::vector<float> q(D, 1.0f);
    std::vector<double> out(D, 7.0);
    ref::sink_attention_f64(q.data(), D, nullptr, 0, -INFINITY, 1.0, out.data());
    for (double v : out) EXPECT_EQ(v, 0.0);
}

TEST(RefFp64, LinearPlainAndGrouped) {
    std::mt19937 g(5);
    const int T = 3, N = 24, K = 40, groups = 3, pad = 8;
    const int rows = groups * N, xs = groups * K + pad;
    const std::vector<float> w = randn(g, size_t(rows) * K, 0.5f), x = randn(g, size_t(T) * xs, 1.0f);
    std::vector<double> got(size_t(T) * rows);
    // Rows in two ranges, as callers spread them over threads.
    ref::linear_f64(w.data(), rows, K, N, x.data(), xs, T, 0, 30, got.data());
    ref::linear_f64(w.data(), rows, K, N, x.data(), xs, T, 30, rows, got.data());
    std::vector<float> want(size_t(T) * rows);
    for (int gi = 0; gi < groups; ++gi)  // group gi: its N rows of w against x's K-slice gi
        for (int t = 0; t < T; ++t) {
            std::vector<float> y(N);
            ref::linear(x.data() + size_t(t) * xs + gi * K, w.data() + size_t(gi) * N * K, y.data(), 1, N, K);
            std::copy(y.begin(), y.end(), want.begin() + size_t(t) * rows + gi * N);
        }
    EXPECT_LT(rel_l2(got, want), 1e-5);
    // The error scale: sum |w x| per output, >= |y|, and exact for a one-term dot.
    std::vector<double> y2(got.size()), mag(got.size());
    ref::linear_f64(w.data(), rows, K, N, x.data(), xs, T, 0, rows, y2.data(), mag.data());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(y2[i], got[i]);
        EXPECT_GE(mag[i], std::fabs(got[i]));
    }
    const float w1 = -3.0f, x1 = 0.5f;
    double y1 = 0, m1 = 0;
    ref::linear_f64(&w1, 1, 1, 1, &x1, 1, 1, 0, 1, &y1, &m1);
    EXPECT_EQ(y1, -1.5);
    EXPECT_EQ(m1, 1.5);
}

TEST(RefFp64, RouteSelectsAsTheReferenceTopK) {
    std::mt19937 g(9);
    const int E = 64, K = 6;
    for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> logits = randn(g, E, 2.0f), bias = randn(g, E, 0.1f);
        if (trial == 1) {
            for (int e = 0; e < E; e += 3) logits[size_t(e)] = NAN;
        }
        std::vector<int> ids;
        std::vector<float> w;
        ref::moe_route_f64(logits.data(), bias.data(), E, K, 1.5, ids, w);
        std::vector<float> key(E);
        double sum = 0;
        for (int e = 0; e < E; ++e) key[size_t(e)] = std::sqrt(ref::softplus(logits[size_t(e)])) + bias[size_t(e)];
        const std::vector<int32_t> want = ref::topk_indices(key, K);
        ASSERT_EQ(ids.size(), size_t(K));
        for (int k = 0; k < K; ++k) {
            EXPECT_EQ(ids[size_t(k)], want[size_t(k)]) << "trial " << trial << " k " << k;
            EXPECT_TRUE(std::isfinite(w[size_t(k)]));
            sum += w[size_t(k)];
        }
        if (trial != 1) {
            EXPECT_NEAR(sum, 1.5, 1e-5);  // normalised, then scaled
        }
    }
}

TEST(RefFp64, RouteHashTakesTheGivenExperts) {
    std::mt19937 g(11);
    const int E = 16, K = 4;
    const std::vector<float> logits = randn(g, E, 1.0f);
    const int32_t hash[K] = {9, 2, 15, 0};
    std::vector<int> ids;
    std::vector<float> w;
    ref::moe_route_f64(logits.data(), nullptr, E, K, 2.0, ids, w, hash);
    double sum = 0;
    for (int k = 0; k < K; ++k) {
        EXPECT_EQ(ids[size_t(k)], hash[k]);
        sum += w[size_t(k)];
    }
    EXPECT_NEAR(sum, 2.0, 1e-6);
    const double s9 = std::sqrt(std::log1p(std::exp(double(logits[9])))),
                 s2 = std::sqrt(std::log1p(std::exp(double(logits[2]))));
    EXPECT_NEAR(w[0] / w[1], s9 / s2, 1e-5);
}

TEST(RefFp64, SwigluExpertClampsAndWeights) {
    std::mt19937 g(13);
    const int d = 32, I = 16;
    const float limit = 1.0f, weight = 0.3f;
    const std::vector<float> x = randn(g, d, 1.0f), w1 = randn(g, size_t(I) * d, 0.5f),
                             w3 = randn(g, size_t(I) * d, 0.5f), w2 = randn(g, size_t(d) * I, 0.5f);
    // The f32 formula (the model's swiglu_expert), without the bf16 rounding of h.
    std::vector<float> a(I), b(I), want(d, 0.0f);
    ref::linear(x.data(), w1.data(), a.data(), 1, I, d);
    ref::linear(x.data(), w3.data(), b.data(), 1, I, d);
    int clamped = 0;
    for (int i = 0; i < I; ++i) {
        clamped += a[size_t(i)] > limit || std::fabs(b[size_t(i)]) > limit;
        a[size_t(i)] = ref::silu(std::min(a[size_t(i)], limit)) * std::clamp(b[size_t(i)], -limit, limit) * weight;
    }
    ref::linear(a.data(), w2.data(), want.data(), 1, d, I);
    ASSERT_GT(clamped, 0);  // the inputs exercise the clamp
    std::vector<double> got(d, 0.0);
    ref::swiglu_expert_f64(x.data(), w1.data(), w3.data(), w2.data(), d, I, limit, weight, got.data());
    EXPECT_LT(rel_l2(got, want), 1e-2);  // h rounded to bf16 (2^-9 relative per element)
    EXPECT_GT(rel_l2(got, want), 0.0);   // ... and rounded indeed
    // Accumulates into out.
    std::vector<double> twice = got;
    ref::swiglu_expert_f64(x.data(), w1.data(), w3.data(), w2.data(), d, I, limit, weight, twice.data());
    for (int i = 0; i < d; ++i) EXPECT_DOUBLE_EQ(twice[size_t(i)], 2 * got[size_t(i)]);
}

}  // namespace
}  // namespace dsv4
