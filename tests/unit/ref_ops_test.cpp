// Unit tests of CPU reference ops on regression edge cases: sink attention (B07, B04),
// strided RMSNorm (B10), NaN-safe top-k routing (B12), RoPE inverse, compressor emission.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "kernels/ref/attention.h"
#include "kernels/ref/compressor.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/qat.h"

namespace dsv4::ref {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d;
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

TEST(SinkAttention, MinusInfSinkEqualsPlainSoftmax) {
    const int H = 3, D = 8, R = 5;
    auto q = randn(H * D, 1), k = randn(R * D, 2);
    std::vector<const float*> rows;
    for (int r = 0; r < R; ++r) rows.push_back(&k[r * D]);
    std::vector<float> sink(H, -std::numeric_limits<float>::infinity()), out(H * D);
    sink_attention(q.data(), rows.data(), R, sink.data(), H, D, 0.5f, out.data());
    for (int h = 0; h < H; ++h) {
        std::vector<double> z(R);
        double mx = -1e300, den = 0;
        for (int r = 0; r < R; ++r) {
            z[r] = 0;
            for (int i = 0; i < D; ++i) z[r] += double(q[h * D + i]) * k[r * D + i];
            z[r] *= 0.5;
            mx = std::max(mx, z[r]);
        }
        for (int r = 0; r < R; ++r) den += std::exp(z[r] - mx);
        for (int i = 0; i < D; ++i) {
            double o = 0;
            for (int r = 0; r < R; ++r) o += std::exp(z[r] - mx) / den * k[r * D + i];
            EXPECT_NEAR(out[h * D + i], o, 1e-5);
        }
    }
}

TEST(SinkAttention, LargeSinkAbsorbsMassPerHead) {
    // B07: a sink misread as bf16 halves can be huge; the per-head result must follow the f32 value.
    const int H = 2, D = 4;
    auto q = randn(H * D, 3), k = randn(2 * D, 4);
    const float* rows[2] = {&k[0], &k[D]};
    std::vector<float> sink = {60.0f, -60.0f}, out(H * D);
    sink_attention(q.data(), rows, 2, sink.data(), H, D, 0.1f, out.data());
    for (int i = 0; i < D; ++i) EXPECT_NEAR(out[i], 0.0f, 1e-20);  // head 0: sink takes everything
    double norm1 = 0;
    for (int i = 0; i < D; ++i) norm1 += std::fabs(out[D + i]);
    EXPECT_GT(norm1, 1e-3);  // head 1: real attention
}

TEST(SinkAttention, NoRowsGivesZerosNeverNaN) {
    // B04: a query with no allowed key must not produce NaN.
    std::vector<float> q = randn(8, 5), out(8, 1.0f), sink = {0.3f, -std::numeric_limits<float>::infinity()};
    sink_attention(q.data(), nullptr, 0, sink.data(), 2, 4, 1.0f, out.data());
    for (float v : out) {
        EXPECT_FALSE(std::isnan(v));
        EXPECT_EQ(v, 0.0f);
    }
}

TEST(RmsNorm, StridedInputWritesContiguousOutputOnly) {
    // B10: normalising a non-contiguous slice [rows, 512] of a [rows, 576] buffer.
    for (int64_t rows : {1, 31, 403}) {
        const int64_t W = 576, n = 512;
        auto x = randn(size_t(rows * W), 7);
        auto w = randn(size_t(n), 8);
        const float canary = 12345.0f;
        std::vector<float> y(size_t(rows * n + 64), canary);
        rms_norm(x.data(), w.data(), y.data() + 32, rows, n, 1e-6f, W);
        std::vector<float> contig(size_t(rows * n)), want(size_t(rows * n));
        for (int64_t r = 0; r < rows; ++r) std::copy(&x[size_t(r * W)], &x[size_t(r * W + n)], &contig[size_t(r * n)]);
        rms_norm(contig.data(), w.data(), want.data(), rows, n, 1e-6f);
        for (int64_t i = 0; i < rows * n; ++i) EXPECT_EQ(y[size_t(32 + i)], want[size_t(i)]);
        for (int i = 0; i < 32; ++i) {
            EXPECT_EQ(y[size_t(i)], canary);
            EXPECT_EQ(y[size_t(32 + rows * n + i)], canary);
        }
    }
}

TEST(TopK, NanInfTiesAlwaysGiveDistinctValidIndices) {
    // B12: all NaN, one NaN, all +inf, all -inf, all equal, ties at the k-th slot.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<std::vector<float>> rows = {std::vector<float>(16, nan),  {1, nan, 3, 2, 0, -1},
                                                  std::vector<float>(8, inf),   std::vector<float>(8, -inf),
                                                  std::vector<float>(10, 0.5f), {5, 4, 3, 3, 3, 1}};
    for (const auto& row : rows) {
        for (int k : {2, 6}) {
            auto idx = topk_indices(row, k);
            ASSERT_EQ(int(idx.size()), std::min<int>(k, int(row.size())));
            std::set<int32_t> s(idx.begin(), idx.end());
            EXPECT_EQ(s.size(), idx.size());
            for (int32_t i : idx) {
                EXPECT_GE(i, 0);
                EXPECT_LT(i, int32_t(row.size()));
            }
        }
    }
    // Ties broken by lowest index; NaN ranks last.
    EXPECT_EQ(topk_indices(std::vector<float>{5, 4, 3, 3, 3, 1}, 3), (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(topk_indices(std::vector<float>{5, 4, 3, 3, 3, 1}, 4), (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(topk_indices(std::vector<float>{nan, 1, nan, 2}, 2), (std::vector<int32_t>{3, 1}));
    EXPECT_EQ(topk_indices(std::vector<float>(8, 0.5f), 3), (std::vector<int32_t>{0, 1, 2}));
}

// The indexer's row choice: with at most k rows every row, in index order (scores unused); with
// more, the top-k by score, best first.
TEST(IndexSelect, AllRowsInIndexOrderUpToKThenTopKByScore) {
    const std::vector<float> five = {0.1f, 3.0f, -2.0f, 7.0f, 3.0f};
    EXPECT_TRUE(index_selects_all(5, 5));
    EXPECT_FALSE(index_selects_all(6, 5));
    EXPECT_TRUE(index_selects_all(0, 1));
    EXPECT_EQ(index_select(five, 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(index_select(five, 8), (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(index_select(five, 4), (std::vector<int32_t>{3, 1, 4, 0}));
    EXPECT_EQ(index_select(five, 4), topk_indices(five, 4));
    EXPECT_TRUE(index_select(std::vector<float>{}, 4).empty());
}

TEST(Rope, InverseUndoesForwardAndPairsAreInterleaved) {
    auto t = make_rope_table(160000.0, 16, true, 16.0, 64.0, 32.0, 1.0);
    auto v = randn(64, 9);
    auto orig = v;
    apply_rope(v.data(), 64, t, 1234);
    for (int i = 0; i < 48; ++i) EXPECT_EQ(v[i], orig[i]);  // nope dims untouched
    apply_rope(v.data(), 64, t, 1234, /*inverse=*/true);
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(v[i], orig[i], 1e-4);
    // Pair (0,1) of the rope slice at position 1 rotates by inv_freq[0] = 1.
    std::vector<float> e(64, 0.0f);
    e[48] = 1.0f;
    apply_rope(e.data(), 64, t, 1);
    EXPECT_NEAR(e[48], std::cos(1.0f), 1e-6);
    EXPECT_NEAR(e[49], std::sin(1.0f), 1e-6);
}

TEST(Rope, FlashYarnTableMatchesSpec) {
    // Spec §2.4: first 1.0, 0.68766, 0.47287, ...; last 5.6805e-7 (theta 160000, factor 16).
    auto t = make_rope_table(160000.0, 64, true, 16.0, 65536.0, 32.0, 1.0);
    ASSERT_EQ(t.inv_freq.size(), 32u);
    EXPECT_NEAR(t.inv_freq[0], 1.0f, 1e-6);
    EXPECT_NEAR(t.inv_freq[1], 0.68766f, 1e-5);
    EXPECT_NEAR(t.inv_freq[2], 0.47287f, 1e-5);
    EXPECT_NEAR(t.inv_freq[31] / 5.6805e-7f, 1.0f, 1e-4);
}

TEST(Compressor, EmitsExactlyAtWindowBoundaries) {
    for (bool overlap : {false, true}) {
        CompressorShape s{4, 3, overlap};
        std::vector<float> kv(size_t(s.state_rows() * s.state_width())), gate(kv.size());
        compressor_reset(s, kv.data(), gate.data());
        std::vector<float> v(size_t(s.state_width())), entry(3);
        for (int64_t p = 0; p < 12; ++p) {
            for (size_t i = 0; i < v.size(); ++i) v[i] = float(p + 1);
            const std::vector<float> g(v.size(), 0.0f);
            const bool emitted = compressor_push(s, kv.data(), gate.data(), v.data(), g.data(), p, entry.data());
            EXPECT_EQ(emitted, (p + 1) % 4 == 0) << p;
            if (!emitted) continue;
            // Equal gates: plain mean over the slots that exist.
            const int64_t w = p / 4;
            double want = 0;
            if (!overlap || w == 0)
                want = (4 * w + 1 + 4 * w + 4) / 2.0;  // mean of window tokens
            else
                want = (4 * (w - 1) + 1 + 4 * w + 4) / 2.0;  // 8 slots: previous + current
            for (float e : entry) EXPECT_NEAR(e, want, 1e-5) << "overlap " << overlap << " w " << w;
        }
    }
}

}  // namespace
}  // namespace dsv4::ref

namespace dsv4::ref {
namespace {

TEST(Qat, Fp8BlockQdqUsesPowerOfTwoScalePerBlock) {
    // Block 0 amax 448*2 -> scale 2, values on the e4m3 grid times 2 survive exactly.
    std::vector<float> z = {896.0f, -2.0f, 1.0f, 0.5f};
    fp8_qdq_blocks(z.data(), 4, 4);
    EXPECT_EQ(z[2], 1.0f);
    EXPECT_EQ(z[3], 0.5f);
    // Relative error within e4m3's 2^-4 for random blocks.
    std::vector<float> r = randn(640, 11);
    std::vector<float> q = r;
    fp8_qdq_blocks(q.data(), 640, 64);
    for (size_t i = 0; i < r.size(); ++i)
        if (std::fabs(r[i]) > 0.05f) EXPECT_LE(std::fabs(q[i] - r[i]), std::fabs(r[i]) * 0.0625f + 1e-6f);
}

TEST(Qat, Fp4BlockQdqOnGrid) {
    std::vector<float> x = {6.0f, 3.0f, -1.5f, 0.5f, 0.26f, 5.1f};
    fp4_qdq_blocks(x.data(), 6, 32);  // amax 6 -> scale 1
    EXPECT_EQ(x[0], 6.0f);
    EXPECT_EQ(x[1], 3.0f);
    EXPECT_EQ(x[2], -1.5f);
    EXPECT_EQ(x[3], 0.5f);
    EXPECT_EQ(x[4], 0.5f);
    EXPECT_EQ(x[5], 6.0f);
}

TEST(Qat, HadamardIsOrthonormalAndSelfInverse) {
    std::vector<float> x = randn(128, 12), y = x;
    hadamard(y.data(), 128);
    double nx = 0, ny = 0;
    for (int i = 0; i < 128; ++i) nx += x[i] * x[i], ny += y[i] * y[i];
    EXPECT_NEAR(nx, ny, 1e-3 * nx);
    hadamard(y.data(), 128);
    for (int i = 0; i < 128; ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
}

}  // namespace
}  // namespace dsv4::ref
