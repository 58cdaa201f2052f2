// Statistics behind the bench verdicts: percentiles, Student t values against tables, the
// confidence interval, and seeded simulations of the A/B test's error rates.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "bench/family.h"
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

TEST(BenchStats, TwoSidedPMatchesTables) {
    EXPECT_NEAR(student_t_two_sided_p(2.776, 4), 0.05, 1e-4);
    EXPECT_NEAR(student_t_two_sided_p(-2.776, 4), 0.05, 1e-4);
    EXPECT_NEAR(student_t_two_sided_p(12.706, 1), 0.05, 1e-5);
    EXPECT_NEAR(student_t_two_sided_p(1.960, 1e9), 0.05, 1e-4);
    EXPECT_DOUBLE_EQ(student_t_two_sided_p(0, 7), 1.0);
    // Consistent with the CDF and the critical value.
    EXPECT_NEAR(student_t_two_sided_p(1.3, 6), 2 * student_t_cdf(-1.3, 6), 1e-12);
    EXPECT_NEAR(student_t_two_sided_p(student_t_critical(0.99, 9), 9), 0.01, 1e-9);
}

// Student's sleep data (Cushny & Peebles; R's `sleep`): extra hours of sleep of 10 patients
// under two drugs. Put through exp(), the log-ratio tests see the raw values, so they must
// reproduce R's t.test(extra ~ group, data = sleep, paired = TRUE) and the Welch default.
constexpr double kSleep1[] = {0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
constexpr double kSleep2[] = {1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4};

std::vector<double> exp_of(std::span<const double> v) {
    std::vector<double> out;
    for (double x : v) out.push_back(std::exp(x));
    return out;
}

TEST(BenchStats, PairedTestMatchesRSleepExample) {
    // R: t = -4.0621, df = 9, p-value = 0.002833, 95% CI of group1 - group2 [-2.4598858,
    // -0.7001142], mean difference -1.58. Here B - A = group2 - group1, so the signs flip.
    const RatioTest t = compare_ratio_paired(exp_of(kSleep1), exp_of(kSleep2));
    EXPECT_TRUE(t.paired);
    EXPECT_EQ(t.n_a, 10);
    EXPECT_DOUBLE_EQ(t.df, 9);
    EXPECT_NEAR(std::log(t.ratio), 1.58, 1e-12);
    EXPECT_NEAR(std::log(t.lo), 0.7001142, 1e-6);
    EXPECT_NEAR(std::log(t.hi), 2.4598858, 1e-6);
    EXPECT_NEAR(t.p, 0.002833, 1e-6);
    EXPECT_EQ(t.verdict, Verdict::kFaster);
    // A latency metric: the same numbers, the other direction.
    EXPECT_EQ(compare_ratio_paired(exp_of(kSleep1), exp_of(kSleep2), false).verdict, Verdict::kSlower);
}

TEST(BenchStats, WelchTestMatchesRSleepExample) {
    // R: t = -1.8608, df = 17.776, p-value = 0.07939, 95% CI [-3.3654832, 0.2054832].
    const RatioTest t = compare_ratio(exp_of(kSleep1), exp_of(kSleep2));
    EXPECT_FALSE(t.paired);
    EXPECT_NEAR(t.df, 17.776, 1e-3);
    EXPECT_NEAR(std::log(t.lo), -0.2054832, 1e-6);
    EXPECT_NEAR(std::log(t.hi), 3.3654832, 1e-6);
    EXPECT_NEAR(t.p, 0.07939, 1e-5);
    EXPECT_EQ(t.verdict, Verdict::kNoDifference);
}

TEST(BenchStats, PairedTestEdgeCases) {
    const std::vector<double> a = {100, 200, 300}, b = {110, 220, 330};
    // Every pair the same ratio (up to rounding): no spread, the difference is certain.
    RatioTest t = compare_ratio_paired(a, b);
    EXPECT_NEAR(t.ratio, 1.1, 1e-12);
    EXPECT_LT(t.p, 1e-12);
    EXPECT_EQ(t.verdict, Verdict::kFaster);
    t = compare_ratio_paired(a, a);
    EXPECT_DOUBLE_EQ(t.p, 1.0);
    EXPECT_EQ(t.verdict, Verdict::kNoDifference);
    // Non-positive values drop their pair; one pair left is not enough.
    t = compare_ratio_paired(std::vector<double>{100, 0, 300}, std::vector<double>{110, 220, -1});
    EXPECT_EQ(t.n_a, 1);
    EXPECT_EQ(t.verdict, Verdict::kInsufficientData);
    // Unequal lengths: the extra values are ignored.
    EXPECT_EQ(compare_ratio_paired(a, std::vector<double>{110, 220}).n_a, 2);
    // Pairing removes what the pair shares: level differences between pairs that would swamp
    // an unpaired test.
    const std::vector<double> pa = {100, 300, 150, 250}, pb = {105, 314, 158, 262};
    EXPECT_EQ(compare_ratio_paired(pa, pb).verdict, Verdict::kFaster);
    EXPECT_EQ(compare_ratio(pa, pb).verdict, Verdict::kNoDifference);
}

TEST(BenchStats, WilsonIntervalMatchesPublishedValues) {
    // 95% Wilson intervals (e.g. Brown, Cai & DasGupta 2001; any Wilson calculator).
    Proportion p = wilson_interval(5, 10);
    EXPECT_DOUBLE_EQ(p.p, 0.5);
    EXPECT_NEAR(p.lo, 0.2366, 1e-4);
    EXPECT_NEAR(p.hi, 0.7634, 1e-4);
    p = wilson_interval(0, 10);
    EXPECT_DOUBLE_EQ(p.lo, 0.0);
    EXPECT_NEAR(p.hi, 0.2775, 1e-4);  // z^2 / (n + z^2)
    p = wilson_interval(10, 10);
    EXPECT_NEAR(p.lo, 0.7225, 1e-4);
    EXPECT_DOUBLE_EQ(p.hi, 1.0);
    p = wilson_interval(6, 120);
    EXPECT_NEAR(p.lo, 0.02311, 1e-4);
    EXPECT_NEAR(p.hi, 0.10480, 1e-4);
    p = wilson_interval(0, 0);
    EXPECT_DOUBLE_EQ(p.lo, 0.0);
    EXPECT_DOUBLE_EQ(p.hi, 1.0);
    // A higher level gives a wider interval.
    EXPECT_LT(wilson_interval(6, 120, 0.99).lo, wilson_interval(6, 120).lo);
}

// Holm's worked example (Wikipedia, "Holm-Bonferroni method"): four hypotheses with p 0.01,
// 0.04, 0.03, 0.005 at alpha 0.05. Sorted: 0.005 <= 0.05/4 and 0.01 <= 0.05/3 are rejected;
// 0.03 > 0.05/2 stops the procedure, so 0.04 is kept although it is below 0.05.
TEST(BenchFamily, HolmMatchesWorkedExample) {
    const std::vector<double> p = {0.01, 0.04, 0.03, 0.005};
    const HolmResult h = holm_bonferroni(p, 0.05);
    EXPECT_EQ(h.reject, (std::vector<bool>{true, false, false, true}));
    // Adjusted: 4 x 0.005 = 0.02, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, max(0.06, 1 x 0.04) = 0.06.
    EXPECT_NEAR(h.adjusted_p[3], 0.02, 1e-15);
    EXPECT_NEAR(h.adjusted_p[0], 0.03, 1e-15);
    EXPECT_NEAR(h.adjusted_p[2], 0.06, 1e-15);
    EXPECT_NEAR(h.adjusted_p[1], 0.06, 1e-15);
    for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(h.reject[i], h.adjusted_p[i] <= 0.05);
}

TEST(BenchFamily, HolmRejectsWhatBonferroniRejectsAndMore) {
    // Bonferroni (0.05/3 = 0.0167) rejects only 0.012; Holm also 0.02 (<= 0.05/2).
    HolmResult h = holm_bonferroni(std::vector<double>{0.3, 0.012, 0.02}, 0.05);
    EXPECT_EQ(h.reject, (std::vector<bool>{false, true, true}));
    EXPECT_NEAR(h.adjusted_p[0], 0.3, 1e-15);
    // All small: all rejected, the largest at alpha itself.
    h = holm_bonferroni(std::vector<double>{0.05, 0.01, 0.02}, 0.05);
    EXPECT_EQ(h.reject, (std::vector<bool>{true, true, true}));
    // One test: Holm is the plain test; adjusted p capped at 1.
    h = holm_bonferroni(std::vector<double>{0.049}, 0.05);
    EXPECT_TRUE(h.reject[0]);
    EXPECT_DOUBLE_EQ(holm_bonferroni(std::vector<double>{0.9, 0.8}, 0.05).adjusted_p[0], 1.0);
    EXPECT_TRUE(holm_bonferroni(std::vector<double>{}, 0.05).reject.empty());
}

TEST(BenchFamily, VerdictsFromHolmIntervalsAtBonferroniLevel) {
    // Three members: a clear 20% gain, no change, and one with a single pair (not tested).
    std::vector<RatioSamples> members(3);
    members[0] = {{100, 102, 98, 101}, {120, 123, 117, 121}};
    members[1] = {{100, 102, 98, 101}, {101, 101, 99, 100}};
    members[2] = {{100}, {150}};
    const FamilyComparison f = compare_family(members, true, true, 0.95);
    EXPECT_TRUE(f.paired);
    EXPECT_EQ(f.m, 2);
    EXPECT_NEAR(f.alpha, 0.05, 1e-15);
    EXPECT_NEAR(f.ci_level, 0.975, 1e-15);
    EXPECT_EQ(f.tests[0].verdict, Verdict::kFaster);
    EXPECT_EQ(f.tests[1].verdict, Verdict::kNoDifference);
    EXPECT_EQ(f.tests[2].verdict, Verdict::kInsufficientData);
    EXPECT_DOUBLE_EQ(f.adjusted_p[2], 1.0);
    for (int i = 0; i < 2; ++i) {
        EXPECT_NEAR(f.tests[i].level, 0.975, 1e-15);
        // The interval is the one of the plain test at the Bonferroni level.
        const RatioTest plain = compare_ratio_paired(members[i].a, members[i].b, true, 0.975);
        EXPECT_DOUBLE_EQ(f.tests[i].lo, plain.lo);
        EXPECT_DOUBLE_EQ(f.tests[i].hi, plain.hi);
        EXPECT_DOUBLE_EQ(f.tests[i].p, plain.p);
    }
    // A member significant on its own at 95% but not after the correction: p between 0.025 and
    // 0.05 with two members.
    std::vector<RatioSamples> close(2);
    close[0] = {{100, 100, 100, 100}, {103, 101.5, 104, 101}};
    close[1] = members[1];
    const RatioTest alone = compare_ratio_paired(close[0].a, close[0].b);
    ASSERT_GT(alone.p, 0.025);
    ASSERT_LT(alone.p, 0.05);
    EXPECT_EQ(alone.verdict, Verdict::kFaster);
    EXPECT_EQ(compare_family(close, true, true).tests[0].verdict, Verdict::kNoDifference);
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
