// Statistics behind the bench verdicts: percentiles, Student t values against tables, the
// confidence interval, and seeded simulations of the A/B test's error rates.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "bench/stats.h"

namespace dsv4::bench {
namespace {

TEST(BenchStats, PercentilesInterpolate) {
    Dist d = summarize({5, 1, 4, 2, 3});
    EXPECT_EQ(d.count, 5);
    EXPECT_DOUBLE_EQ(d.mean, 3);
    EXPECT_DOUBLE_EQ(d.median, 3);
    EXPECT_DOUBLE_EQ(d.min, 1);
    EXPECT_DOUBLE_EQ(d.max, 5);
    EXPECT_NEAR(d.p90, 4.6, 1e-12);
    EXPECT_NEAR(d.p99, 4.96, 1e-12);
    EXPECT_EQ(summarize({}).count, 0);
}

TEST(BenchStats, StudentTMatchesTables) {
    // Two-sided 95% critical values from standard t tables.
    EXPECT_NEAR(student_t_critical(0.95, 1), 12.706, 1e-3);
    EXPECT_NEAR(student_t_critical(0.95, 3), 3.182, 1e-3);
    EXPECT_NEAR(student_t_critical(0.95, 5), 2.571, 1e-3);
    EXPECT_NEAR(student_t_critical(0.95, 30), 2.042, 1e-3);
    EXPECT_NEAR(student_t_critical(0.99, 10), 3.169, 1e-3);
    EXPECT_NEAR(student_t_critical(0.95, 1e9), 1.960, 1e-3);
    EXPECT_NEAR(student_t_cdf(0, 4), 0.5, 1e-12);
    EXPECT_NEAR(student_t_cdf(-2.776, 4), 0.025, 1e-4);
}

TEST(BenchStats, MeanCiAndCv) {
    const std::vector<double> v = {100, 102, 98, 100};
    MeanCi c = mean_ci(v);
    EXPECT_DOUBLE_EQ(c.mean, 100);
    const double sd = std::sqrt(8.0 / 3.0);
    EXPECT_NEAR(c.stddev, sd, 1e-12);
    EXPECT_NEAR(c.cv, sd / 100, 1e-12);
    EXPECT_NEAR(c.hi - c.mean, 3.182446 * sd / 2, 1e-5);
    MeanCi one = mean_ci(std::vector<double>{7});
    EXPECT_EQ(one.lo, 7);
    EXPECT_EQ(one.hi, 7);
}

TEST(BenchStats, RatioVerdictDirections) {
    const std::vector<double> a = {100, 101, 99, 100}, b = {120, 121, 119, 120};
    RatioTest t = compare_ratio(a, b);
    EXPECT_NEAR(t.ratio, 1.2, 0.01);
    EXPECT_EQ(t.verdict, Verdict::kFaster);
    EXPECT_EQ(compare_ratio(b, a).verdict, Verdict::kSlower);
    // Latency: lower is better, so a larger B is slower.
    EXPECT_EQ(compare_ratio(a, b, /*higher_is_better=*/false).verdict, Verdict::kSlower);
    EXPECT_EQ(compare_ratio(a, a).verdict, Verdict::kNoDifference);
    EXPECT_EQ(compare_ratio(std::vector<double>{1}, b).verdict, Verdict::kInsufficientData);
}

// Simulated runs: throughput = true value x (1 + 5% multiplicative noise), `iters` per side.
double detection_rate(double true_ratio, int iters, int trials, uint64_t seed) {
    SplitMix64 rng(seed);
    int detected = 0;
    for (int t = 0; t < trials; ++t) {
        std::vector<double> a, b;
        for (int i = 0; i < iters; ++i) {
            a.push_back(1000.0 * (1 + 0.05 * rng.normal()));
            b.push_back(1000.0 * true_ratio * (1 + 0.05 * rng.normal()));
        }
        if (compare_ratio(a, b).verdict != Verdict::kNoDifference) ++detected;
    }
    return static_cast<double>(detected) / trials;
}

TEST(BenchStats, AaComparisonRarelyClaimsADifference) {
    // The default 4 iterations per side; 95% CI: about 5% false alarms expected.
    for (uint64_t seed : {1u, 2u, 3u}) {
        const double false_alarms = detection_rate(1.0, 4, 200, seed);
        EXPECT_LE(false_alarms, 0.10) << "seed " << seed;
    }
}

TEST(BenchStats, FifteenPercentDifferenceIsDetected) {
    // 6 iterations per side give > 95% power against 15% at 5% noise (4 give about 90%).
    for (uint64_t seed : {11u, 12u, 13u}) {
        EXPECT_GE(detection_rate(1.15, 6, 200, seed), 0.90) << "seed " << seed;
        EXPECT_GE(detection_rate(1.0 / 1.15, 6, 200, seed + 100), 0.90) << "seed " << seed;
    }
}

TEST(BenchStats, DefaultIterationsPowerIsReported) {
    // With the default 4 iterations a side the power against 15% is lower; the README quotes
    // this number, so keep it measured here.
    const double power = detection_rate(1.15, 4, 400, 21);
    std::printf("power against 15%% at 5%% noise, 4 iterations a side: %.3f\n", power);
    EXPECT_GE(power, 0.75);
}

TEST(BenchStats, SplitMixIsDeterministic) {
    SplitMix64 a(42), b(42);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next(), b.next());
    EXPECT_NE(mix_seed(1, 2, 3), mix_seed(1, 3, 2));
    SplitMix64 r(7);
    for (int i = 0; i < 1000; ++i) EXPECT_LT(r.below(10), 10u);
}

}  // namespace
}  // namespace dsv4::bench
