// Several B/A comparisons judged together as one family (the concurrency levels of one
// `bench --ab` run, or the shape classes of one kernel comparison): with m levels each
// tested at 5%, the chance that at least one claims a difference that is not there grows to
// about 1 - 0.95^m (14% at m = 3). The family-wise error rate (FWER) is held at alpha instead
// by Holm's step-down procedure on the members' p-values, and each member's interval is
// reported at the Bonferroni level 1 - alpha/m, so the m intervals hold together with
// probability >= 1 - alpha. Pure functions; no I/O.
#pragma once

#include <span>
#include <vector>

#include "bench/stats.h"

namespace dsv4::bench {

// Holm-Bonferroni (S. Holm, "A simple sequentially rejective multiple test procedure",
// Scandinavian Journal of Statistics 6, 1979): sort the m p-values ascending, p_(1) <= ... <=
// p_(m); reject H_(1), H_(2), ... while p_(i) <= alpha / (m - i + 1) and stop at the first
// that is not. Controls the FWER at alpha under any dependence between the tests, and rejects
// everything plain Bonferroni (p <= alpha/m) rejects, sometimes more.
// adjusted_p[i] is the smallest alpha at which hypothesis i would be rejected:
// max over j <= rank(i) of min(1, (m - j + 1) p_(j)). Both vectors are in the input's order.
struct HolmResult {
    std::vector<bool> reject;
    std::vector<double> adjusted_p;
};
HolmResult holm_bonferroni(std::span<const double> p, double alpha);

// One member's values. Paired: a[k] and b[k] are one pair (same length); unpaired: any sizes.
struct RatioSamples {
    std::vector<double> a, b;
};

struct FamilyComparison {
    std::vector<RatioTest> tests;    // one per member, input order; [lo, hi] at ci_level
    std::vector<double> adjusted_p;  // Holm-adjusted p (1 for members without a test)
    bool paired = false;
    double alpha = 0.05;     // the family-wise error rate controlled
    double ci_level = 0.95;  // per-member interval level, 1 - alpha / m
    int m = 0;               // members with enough data to be tested
};

// Tests every member (compare_ratio_paired or compare_ratio on the same metric direction),
// then decides the verdicts by Holm at alpha = 1 - confidence over the members that have a
// test (at least 2 values a side or 2 pairs; the others stay "insufficient data" and are not
// counted in m), and recomputes the intervals at 1 - alpha/m. A member is "faster"/"slower"
// exactly when Holm rejects B/A == 1 for it; since Holm can reject where Bonferroni does not,
// a rejected member's Bonferroni interval may still touch 1.
FamilyComparison compare_family(std::span<const RatioSamples> members, bool paired, bool higher_is_better,
                                double confidence = 0.95);

}  // namespace dsv4::bench
