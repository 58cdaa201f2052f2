// CUDA ops against the CPU reference: linear on every weight format (f32, bf16, FP8 block with
// edge blocks, MXFP4 with edge groups, grouped), exact top-k (ties, NaN: B08/B12), greedy argmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "core/dtype.h"
#include "kernels/cuda/ops/ops.h"
#include "kernels/ref/ops.h"
#include "model/quant.h"
#include "runtime/cuda_runner.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"
#include "tests/kernels/cuda_runner/weight_formats.h"

namespace dsv4 {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float s = 1.0f) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, s);
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    return v;
}

TEST(CudaOps, LinearAllWeightFormats) {
    SKIP_WITHOUT_GPU();
    for (auto [N, K, T] : {std::tuple{300, 200, 11}, std::tuple{129, 256, 1}, std::tuple{8, 64, 9}}) {
        const auto w = randn(size_t(N) * K, 1, 0.05f);
        const auto x = randn(size_t(T) * K, 2);
        for (cuda::WFmt fmt : {cuda::WFmt::kF32, cuda::WFmt::kBF16, cuda::WFmt::kFp8E8M0, cuda::WFmt::kMxfp4}) {
            const EncodedWeight ew = encode_weight(fmt, w, N, K);
            const std::vector<float>& wd = ew.dequant;
            const std::vector<uint8_t>&data = ew.data, &scale = ew.scale;
            cuda::WeightDesc desc;
            desc.fmt = fmt;
            desc.N = N;
            desc.K = K;
            desc.data = dev(data);
            desc.scale = scale.empty() ? nullptr : dev(scale);
            float* dx = dev(x);
            float* dy = nullptr;
            ASSERT_EQ(cudaMalloc(&dy, sizeof(float) * T * N), cudaSuccess);
            ASSERT_EQ(cuda::linear(desc, -1, dx, K, 0, 0, dy, N, T, false, nullptr), cudaSuccess);
            std::vector<float> want(size_t(T) * N);
            ref::linear(x.data(), wd.data(), want.data(), T, N, K);
            const double e = max_abs_diff(host(dy, want.size()), want);
            std::printf("[op linear %s N=%d K=%d T=%d] max |err| %.3g\n", cuda::wfmt_name(fmt), N, K, T, e);
            EXPECT_LT(e, 2e-5) << cuda::wfmt_name(fmt);
            cudaFree(const_cast<void*>(desc.data));
            if (desc.scale) cudaFree(const_cast<void*>(desc.scale));
            cudaFree(dx);
            cudaFree(dy);
        }
    }
}

TEST(CudaOps, GroupedLinearMatchesPerGroup) {
    SKIP_WITHOUT_GPU();
    const int G = 4, orank = 8, gin = 48, T = 5;
    const auto w = randn(size_t(G) * orank * gin, 3, 0.1f), x = randn(size_t(T) * G * gin, 4);
    cuda::WeightDesc desc;
    desc.N = G * orank;
    desc.K = gin;
    desc.data = dev(w);
    float* dx = dev(x);
    float* dy = nullptr;
    ASSERT_EQ(cudaMalloc(&dy, sizeof(float) * T * G * orank), cudaSuccess);
    ASSERT_EQ(cuda::linear(desc, -1, dx, G * gin, orank, gin, dy, G * orank, T, false, nullptr), cudaSuccess);
    std::vector<float> want(size_t(T) * G * orank);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < G; ++j)
            ref::linear(&x[size_t(t) * G * gin + j * gin], &w[size_t(j) * orank * gin],
                        &want[size_t(t) * G * orank + j * orank], 1, orank, gin);
    const double e = max_abs_diff(host(dy, want.size()), want);
    std::printf("[op grouped linear] max |err| %.3g\n", e);
    EXPECT_LT(e, 1e-5);
}

TEST(CudaOps, TopkExactTiesAndNan) {
    SKIP_WITHOUT_GPU();
    std::mt19937 g(7);
    // n up to 2,048 runs on 256-thread blocks, 3,000 on 1,024; k off powers of two pads the sort.
    for (int n : {1, 5, 33, 257, 600, 2048, 3000}) {
        for (int k : {1, 3, 4, 16, 100, 512, 1000, 1500}) {
            if (k > n) continue;
            std::vector<float> s(static_cast<size_t>(n));
            for (float& v : s) v = float(int(g() % 7)) * 0.5f;  // many ties
            if (n > 3) s[2] = NAN, s[n - 1] = -INFINITY;
            float* ds = dev(s);
            int32_t* di = nullptr;
            ASSERT_EQ(cudaMalloc(&di, sizeof(int32_t) * k), cudaSuccess);
            ASSERT_EQ(cuda::topk_rows(ds, 1, n, k, di, nullptr), cudaSuccess);
            EXPECT_EQ(host(di, size_t(k)), ref::topk_indices(s, k)) << "n=" << n << " k=" << k;
            cudaFree(ds);
            cudaFree(di);
        }
    }
}

TEST(CudaOps, ArgmaxLowestIndexOnTies) {
    SKIP_WITHOUT_GPU();
    std::vector<float> l(3 * 1000, 0.0f);
    l[17] = 5, l[900] = 5;               // row 0: tie -> 17
    l[1000 + 3] = NAN, l[1000 + 4] = 1;  // row 1: NaN skipped -> 4
    l[2000 + 999] = 2;                   // row 2: last
    float* dl = dev(l);
    int32_t* di = nullptr;
    ASSERT_EQ(cudaMalloc(&di, sizeof(int32_t) * 3), cudaSuccess);
    ASSERT_EQ(cuda::argmax_rows(dl, 3, 1000, di, nullptr), cudaSuccess);
    EXPECT_EQ(host(di, 3), (std::vector<int32_t>{17, 4, 999}));
    cudaFree(dl);
    cudaFree(di);
}

// The split argmax (many CTAs per row, option split_argmax) gives the one-CTA kernel's ids and a host
// scan's: vocabulary widths that do and do not divide into its slices, ties across slices (lowest id),
// -0 against +0 (equal: lowest id), NaN skipped, a row of NaN only (0), -inf rows, rows of one value.
TEST(CudaOps, SplitArgmaxEqualsOneCtaAndHostScan) {
    SKIP_WITHOUT_GPU();
    for (int64_t V : {int64_t(5), int64_t(1000), int64_t(2049), int64_t(129280)}) {
        const int R = 9;
        std::vector<float> l(size_t(R * V));
        std::mt19937 g(static_cast<uint32_t>(V));
        std::normal_distribution<float> nd;
        for (auto& x : l) x = nd(g);
        float* row;
        row = &l[size_t(1 * V)];  // tie between the first and the last entry
        row[0] = 50, row[V - 1] = 50;
        row = &l[size_t(2 * V)];  // -0 at a lower id than +0, everything else negative
        for (int64_t i = 0; i < V; ++i) row[i] = -1.0f - float(i % 7);
        row[V / 3] = -0.0f, row[V - 1] = 0.0f;
        row = &l[size_t(3 * V)];  // NaN only
        for (int64_t i = 0; i < V; ++i) row[i] = NAN;
        row = &l[size_t(4 * V)];  // NaN beside the maximum
        row[V / 2] = 40, row[0] = NAN, row[V - 1] = NAN;
        row = &l[size_t(5 * V)];  // -inf everywhere
        for (int64_t i = 0; i < V; ++i) row[i] = -INFINITY;
        row = &l[size_t(6 * V)];  // one value everywhere
        for (int64_t i = 0; i < V; ++i) row[i] = 3.5f;
        std::vector<int32_t> want(R);
        for (int r = 0; r < R; ++r) {
            int32_t best = -1;
            for (int64_t i = 0; i < V; ++i) {
                const float v = l[size_t(r * V + i)];
                if (!std::isnan(v) && (best < 0 || v > l[size_t(r * V + best)])) best = int32_t(i);
            }
            want[size_t(r)] = best < 0 ? 0 : best;
        }
        float* dl = dev(l);
        int32_t *a = nullptr, *b = nullptr;
        unsigned long long* ws = nullptr;
        ASSERT_EQ(cudaMalloc(&a, sizeof(int32_t) * R), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&b, sizeof(int32_t) * R), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&ws, sizeof(unsigned long long) * R * cuda::kArgmaxParts), cudaSuccess);
        ASSERT_EQ(cuda::argmax_rows(dl, R, V, a, nullptr), cudaSuccess);
        ASSERT_EQ(cuda::argmax_rows(dl, R, V, b, nullptr, ws), cudaSuccess);
        EXPECT_EQ(host(a, R), want) << "V " << V;
        EXPECT_EQ(host(b, R), want) << "V " << V;
        cudaFree(dl);
        cudaFree(a);
        cudaFree(b);
        cudaFree(ws);
    }
}

}  // namespace
}  // namespace dsv4
