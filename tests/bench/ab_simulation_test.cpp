// Seeded simulations of whole A/B comparisons (no server, no timing): a family of concurrency
// levels, each measured as batches in time order under multiplicative noise and a linear drift
// of the machine, analysed the way `bench --ab` does now (ABBA order, paired t test, Holm
// across levels) and the way it did before (A B A B order, Welch per level at 95%, no
// correction). Every number comes from SplitMix64 draws, so the results are the same on every
// run and machine.
#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "bench/family.h"
#include "bench/sweep.h"

namespace dsv4::bench {
namespace {

enum class Order { kAbab, kAbba };
enum class Analysis { kPairedHolm, kWelchPerLevel };

struct Scenario {
    int levels = 3;
    int pairs = 4;            // per level (the default --iterations)
    double noise = 0.03;      // per-batch coefficient of variation (log sd)
    double drift = 0.0;       // log change per batch, all levels run one after the other
    double true_ratio = 1.0;  // B/A at every level
};

struct Outcome {
    int families = 0;
    int families_with_any_verdict = 0;  // a "faster"/"slower" anywhere in the family
    int level_tests = 0;
    int level_detections = 0;  // rows whose verdict points the true way
};

// One family: batch values in run order, then the chosen analysis.
void simulate_family(const Scenario& sc, Order order, Analysis analysis, SplitMix64& rng, Outcome& out) {
    std::vector<RatioSamples> members;
    double t = 0;  // batch clock across the whole sweep
    for (int level = 0; level < sc.levels; ++level) {
        RatioSamples s;
        const double base = 100.0 * (level + 1);
        for (int k = 0; k < sc.pairs; ++k) {
            double v[2];
            for (int slot = 0; slot < 2; ++slot) {
                const int target = order == Order::kAbba ? abba_position(k, slot) : slot;
                const double mu = target == 1 ? base * sc.true_ratio : base;
                v[target] = mu * std::exp(sc.drift * t + sc.noise * rng.normal());
                t += 1;
            }
            s.a.push_back(v[0]);
            s.b.push_back(v[1]);
        }
        members.push_back(std::move(s));
    }
    std::vector<Verdict> verdicts;
    if (analysis == Analysis::kPairedHolm) {
        const FamilyComparison f = compare_family(members, /*paired=*/true, true, 0.95);
        for (const RatioTest& r : f.tests) verdicts.push_back(r.verdict);
    } else {
        for (const RatioSamples& s : members) verdicts.push_back(compare_ratio(s.a, s.b).verdict);
    }
    ++out.families;
    bool any = false;
    const Verdict truth = sc.true_ratio > 1 ? Verdict::kFaster : Verdict::kSlower;
    for (Verdict v : verdicts) {
        any |= v == Verdict::kFaster || v == Verdict::kSlower;
        ++out.level_tests;
        if (sc.true_ratio != 1.0 && v == truth) ++out.level_detections;
    }
    if (any) ++out.families_with_any_verdict;
}

Outcome simulate(const Scenario& sc, Order order, Analysis analysis, int families, uint64_t seed) {
    SplitMix64 rng(seed);
    Outcome out;
    for (int i = 0; i < families; ++i) simulate_family(sc, order, analysis, rng, out);
    return out;
}

double family_rate(const Outcome& o) { return static_cast<double>(o.families_with_any_verdict) / o.families; }
double level_power(const Outcome& o) { return static_cast<double>(o.level_detections) / o.level_tests; }

constexpr int kFamilies = 2000;

// A/A: the share of families in which any level claims a difference, against the 5% the new
// analysis promises, with and without drift.
TEST(BenchAbSimulation, AaFamilyWiseFalseVerdictsStayAtFivePercent) {
    for (double drift : {0.0, 0.005, 0.02}) {
        Scenario sc{.drift = drift};
        const Outcome now = simulate(sc, Order::kAbba, Analysis::kPairedHolm, kFamilies, 101);
        const Proportion p = wilson_interval(now.families_with_any_verdict, now.families);
        std::printf(
            "A/A, 3 levels x 4 ABBA pairs, noise 3%%, drift %.1f%%/batch: %d of %d families "
            "with a false verdict (%.2f%%, 95%% CI [%.2f%%, %.2f%%])\n",
            100 * drift, now.families_with_any_verdict, now.families, 100 * p.p, 100 * p.lo, 100 * p.hi);
        // 5% plus two binomial standard errors at 2,000 families (0.5%).
        EXPECT_LE(family_rate(now), 0.06) << "drift " << drift;
    }
}

// What the previous analysis did on the same kind of data: one 95% Welch test per level and
// no correction, so three A/A levels claim a difference in about 1 - 0.95^3 = 14% of the
// families. (A linear drift does not add to that: in A B A B order it shifts B by one batch's
// drift, but it also spreads each side's values, and Welch's variance grows with it.)
TEST(BenchAbSimulation, UncorrectedPerLevelWelchExceedsFivePercentPerFamily) {
    Scenario sc{.drift = 0.0};
    const Outcome old = simulate(sc, Order::kAbab, Analysis::kWelchPerLevel, kFamilies, 202);
    std::printf("A/A, old analysis (ABAB, Welch per level, no correction): %.2f%% of families\n",
                100 * family_rate(old));
    EXPECT_GE(family_rate(old), 0.10);
}

// Why the order matters for a paired analysis: with A always first, a drift adds the same
// step to every pair's B/A, and the paired test (whose variance no longer sees the drift)
// turns it into false verdicts; ABBA cancels it. (At 2% per batch against 3% noise the ABAB
// rate is about 11%, more with stronger drift or more pairs.)
TEST(BenchAbSimulation, PairedAnalysisNeedsAbbaOrderUnderDrift) {
    Scenario sc{.drift = 0.02};
    const Outcome abab = simulate(sc, Order::kAbab, Analysis::kPairedHolm, kFamilies, 303);
    const Outcome abba = simulate(sc, Order::kAbba, Analysis::kPairedHolm, kFamilies, 303);
    std::printf(
        "A/A, drift 2%%/batch, paired + Holm: ABAB order %.2f%%, ABBA order %.2f%% of "
        "families\n",
        100 * family_rate(abab), 100 * family_rate(abba));
    EXPECT_GE(family_rate(abab), 0.08);
    EXPECT_LE(family_rate(abba), 0.06);
}

// Power: a real 10% change at 3% noise with 6 pairs a level is found at about 99% of levels,
// also when three levels share the family's stricter thresholds and the machine drifts.
TEST(BenchAbSimulation, TenPercentEffectIsDetectedWithSixPairs) {
    for (double ratio : {1.10, 1.0 / 1.10}) {
        for (int levels : {1, 3}) {
            for (double drift : {0.0, 0.005}) {
                Scenario sc{.levels = levels, .pairs = 6, .drift = drift, .true_ratio = ratio};
                const Outcome now = simulate(sc, Order::kAbba, Analysis::kPairedHolm, kFamilies, 404);
                std::printf(
                    "B/A %.3f, %d level(s) x 6 ABBA pairs, noise 3%%, drift %.1f%%: "
                    "detected at %.2f%% of levels\n",
                    ratio, levels, 100 * drift, 100 * level_power(now));
                EXPECT_GE(level_power(now), 0.90) << "ratio " << ratio << " levels " << levels << " drift " << drift;
            }
        }
    }
}

}  // namespace
}  // namespace dsv4::bench
