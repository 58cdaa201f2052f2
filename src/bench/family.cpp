// Family-wise error control across the members of one comparison (see family.h).
#include "bench/family.h"

#include <algorithm>
#include <numeric>

namespace dsv4::bench {

HolmResult holm_bonferroni(std::span<const double> p, double alpha) {
    const size_t m = p.size();
    HolmResult r;
    r.reject.assign(m, false);
    r.adjusted_p.assign(m, 1.0);
    std::vector<size_t> order(m);
    std::iota(order.begin(), order.end(), size_t{0});
    // Stable, so tied p-values keep their input order (their decisions are equal anyway).
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return p[x] < p[y]; });
    bool still_rejecting = true;
    double running_max = 0;
    for (size_t i = 0; i < m; ++i) {
        const size_t h = order[i];
        const double factor = static_cast<double>(m - i);  // m - rank + 1 with rank = i + 1
        // The running maximum makes adjusted p monotone in rank, which is what the step-down's
        // "stop at the first failure" means for the adjusted values.
        running_max = std::max(running_max, std::min(1.0, factor * p[h]));
        r.adjusted_p[h] = running_max;
        if (still_rejecting && p[h] <= alpha / factor) {
            r.reject[h] = true;
        } else {
            still_rejecting = false;
        }
    }
    return r;
}

namespace {

RatioTest test_member(const RatioSamples& s, bool paired, bool higher_is_better, double level) {
    return paired ? compare_ratio_paired(s.a, s.b, higher_is_better, level)
                  : compare_ratio(s.a, s.b, higher_is_better, level);
}

bool testable(const RatioTest& t) { return t.n_a >= 2 && t.n_b >= 2; }

}  // namespace

FamilyComparison compare_family(std::span<const RatioSamples> members, bool paired, bool higher_is_better,
                                double confidence) {
    FamilyComparison f;
    f.paired = paired;
    f.alpha = 1.0 - confidence;
    // p does not depend on the interval level: a first pass finds p and which members count.
    std::vector<double> p;
    std::vector<size_t> tested;
    for (size_t i = 0; i < members.size(); ++i) {
        const RatioTest t = test_member(members[i], paired, higher_is_better, confidence);
        if (testable(t)) {
            p.push_back(t.p);
            tested.push_back(i);
        }
    }
    f.m = static_cast<int>(tested.size());
    f.ci_level = f.m > 0 ? 1.0 - f.alpha / f.m : confidence;
    const HolmResult holm = holm_bonferroni(p, f.alpha);
    f.adjusted_p.assign(members.size(), 1.0);
    for (size_t i = 0; i < members.size(); ++i) {
        f.tests.push_back(test_member(members[i], paired, higher_is_better, f.ci_level));
    }
    for (size_t j = 0; j < tested.size(); ++j) {
        RatioTest& t = f.tests[tested[j]];
        f.adjusted_p[tested[j]] = holm.adjusted_p[j];
        t.verdict = ratio_verdict(t.ratio, holm.reject[j], higher_is_better);
    }
    return f;
}

}  // namespace dsv4::bench
