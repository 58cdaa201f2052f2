// Per-level A/B comparison as one family (see compare.h).
#include "bench/compare.h"

#include <array>
#include <map>
#include <set>

#include <fmt/format.h>

namespace dsv4::bench {
namespace {

// One side's (pair index, value) records of one level.
using SideValues = std::vector<std::pair<int, double>>;

bool has_duplicate_pair(const SideValues& v) {
    std::set<int> seen;
    for (const auto& [pair, value] : v) {
        if (!seen.insert(pair).second) return true;
    }
    return false;
}

// Matches A and B by pair index (ascending), dropping pairs with one side only.
RatioSamples matched_pairs(const SideValues& a, const SideValues& b) {
    std::map<int, double> b_by_pair(b.begin(), b.end());
    std::map<int, double> a_by_pair(a.begin(), a.end());
    RatioSamples s;
    for (const auto& [pair, value] : a_by_pair) {
        auto it = b_by_pair.find(pair);
        if (it == b_by_pair.end()) continue;
        s.a.push_back(value);
        s.b.push_back(it->second);
    }
    return s;
}

RatioSamples all_values(const SideValues& a, const SideValues& b) {
    RatioSamples s;
    for (const auto& [pair, value] : a) s.a.push_back(value);
    for (const auto& [pair, value] : b) s.b.push_back(value);
    return s;
}

}  // namespace

Result<Comparison> compare_levels(const std::vector<IterationMetrics>& a, const std::vector<IterationMetrics>& b,
                                  const std::string& metric, double confidence, Pairing pairing) {
    std::map<int, std::array<SideValues, 2>> by_level;
    bool paired = pairing == Pairing::kAuto;
    const std::array<const std::vector<IterationMetrics>*, 2> sides = {&a, &b};
    for (size_t side = 0; side < 2; ++side) {
        for (const auto& m : *sides[side]) {
            auto v = metric_value(m, metric);
            if (!v) return invalid_argument("unknown metric '{}'", metric);
            by_level[m.level][side].emplace_back(m.pair, *v);
            if (m.pair < 0) paired = false;
        }
    }
    std::vector<int> levels;
    for (const auto& [level, ab] : by_level) {
        if (ab[0].empty() || ab[1].empty()) continue;
        levels.push_back(level);
        if (has_duplicate_pair(ab[0]) || has_duplicate_pair(ab[1])) paired = false;
    }
    if (levels.empty()) return invalid_argument("A and B share no concurrency level");

    std::vector<RatioSamples> members;
    for (int level : levels) {
        const auto& ab = by_level[level];
        members.push_back(paired ? matched_pairs(ab[0], ab[1]) : all_values(ab[0], ab[1]));
    }
    const FamilyComparison f = compare_family(members, paired, metric_higher_is_better(metric), confidence);
    Comparison c;
    c.paired = f.paired;
    c.alpha = f.alpha;
    c.ci_level = f.ci_level;
    c.m = f.m;
    for (size_t i = 0; i < levels.size(); ++i) {
        LevelComparison row;
        row.level = levels[i];
        row.mean_a = mean(members[i].a);
        row.mean_b = mean(members[i].b);
        row.test = f.tests[i];
        row.p_adjusted = f.adjusted_p[i];
        c.rows.push_back(row);
    }
    return c;
}

std::string format_comparison(const Comparison& c, const std::string& metric, const std::string& name_a,
                              const std::string& name_b) {
    std::string s;
    s += fmt::format("A/B on {} ({}), A = {}, B = {}\n", metric,
                     metric_higher_is_better(metric) ? "higher is better" : "lower is better", name_a, name_b);
    s += fmt::format("{:>6} {:>7} {:>12} {:>12} {:>8} {:>19} {:>8} {:>8} {:>8} {:>8}  {}\n", "conc",
                     c.paired ? "pairs" : "n A/B", "mean A", "mean B", "B/A",
                     fmt::format("{:.1f}% CI", 100 * c.ci_level), "p", "p Holm", "noise A", "noise B", "verdict");
    for (const auto& r : c.rows) {
        const RatioTest& t = r.test;
        s += fmt::format(
            "{:>6} {:>7} {:>12.2f} {:>12.2f} {:>8.3f} {:>19} {:>8.3g} {:>8.3g} {:>7.1f}% {:>7.1f}%  "
            "{}\n",
            r.level, c.paired ? fmt::format("{}", t.n_a) : fmt::format("{}/{}", t.n_a, t.n_b), r.mean_a, r.mean_b,
            t.ratio, fmt::format("[{:.3f}, {:.3f}]", t.lo, t.hi), t.p, r.p_adjusted, 100 * t.cv_a, 100 * t.cv_b,
            verdict_name(t.verdict));
    }
    if (c.paired) {
        s += "B/A: exp(mean over pairs of log(B/A)); a pair is the A and B batch of one iteration, "
             "run back to back in ABBA order (A B, B A, A B, ...); CI and p from the paired t test "
             "on the log ratios (pairs - 1 degrees of freedom).\n";
    } else {
        s += "B/A: ratio of geometric means; unpaired (runs not matched batch by batch); CI and p "
             "from Welch's t test on log values.\n";
    }
    s += fmt::format(
        "Family of {} level{}: verdicts by Holm-Bonferroni at a family-wise error rate of {:.3g}% "
        "(the chance that any row claims a difference that is not there); CIs at the Bonferroni "
        "level {:.1f}% = 1 - {:.3g}%/{}, which hold for all rows together. \"no detectable "
        "difference\": Holm does not reject B/A = 1; the data agree with any B/A inside the CI.\n",
        c.m, c.m == 1 ? "" : "s", 100 * c.alpha, 100 * c.ci_level, 100 * c.alpha, c.m);
    return s;
}

}  // namespace dsv4::bench
