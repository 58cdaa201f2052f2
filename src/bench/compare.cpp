// Per-level A/B comparison (see compare.h).
#include "bench/compare.h"

#include <map>

#include <fmt/format.h>

namespace dsv4::bench {

Result<std::vector<LevelComparison>> compare_levels(const std::vector<IterationMetrics>& a,
                                                    const std::vector<IterationMetrics>& b,
                                                    const std::string& metric,
                                                    double confidence) {
    std::map<int, std::pair<std::vector<double>, std::vector<double>>> by_level;
    for (const auto& m : a) {
        auto v = metric_value(m, metric);
        if (!v) return invalid_argument("unknown metric '{}'", metric);
        by_level[m.level].first.push_back(*v);
    }
    for (const auto& m : b) {
        auto v = metric_value(m, metric);
        if (!v) return invalid_argument("unknown metric '{}'", metric);
        by_level[m.level].second.push_back(*v);
    }
    std::vector<LevelComparison> out;
    const bool higher = metric_higher_is_better(metric);
    for (const auto& [level, ab] : by_level) {
        if (ab.first.empty() || ab.second.empty()) continue;
        LevelComparison c;
        c.level = level;
        c.mean_a = mean(ab.first);
        c.mean_b = mean(ab.second);
        c.test = compare_ratio(ab.first, ab.second, higher, confidence);
        out.push_back(c);
    }
    if (out.empty()) return invalid_argument("A and B share no concurrency level");
    return out;
}

std::string format_comparison(const std::vector<LevelComparison>& rows, const std::string& metric,
                              const std::string& name_a, const std::string& name_b,
                              double confidence) {
    std::string s;
    s += fmt::format("A/B on {} ({}), A = {}, B = {}\n", metric,
                     metric_higher_is_better(metric) ? "higher is better" : "lower is better",
                     name_a, name_b);
    s += fmt::format("{:>6} {:>5} {:>12} {:>12} {:>8} {:>19} {:>8} {:>8}  {}\n", "conc", "n A/B",
                     "mean A", "mean B", "B/A", fmt::format("{:.0f}% CI", 100 * confidence),
                     "noise A", "noise B", "verdict");
    for (const auto& r : rows) {
        const RatioTest& t = r.test;
        s += fmt::format("{:>6} {:>5} {:>12.2f} {:>12.2f} {:>8.3f} {:>19} {:>7.1f}% {:>7.1f}%  {}\n",
                         r.level, fmt::format("{}/{}", t.n_a, t.n_b), r.mean_a, r.mean_b, t.ratio,
                         fmt::format("[{:.3f}, {:.3f}]", t.lo, t.hi), 100 * t.cv_a, 100 * t.cv_b,
                         verdict_name(t.verdict));
    }
    s += "B/A: ratio of geometric means over iterations; CI from Welch's t on log values. "
         "\"no detectable difference\" means the CI contains 1: any real effect is smaller "
         "than the CI half-width at this noise.\n";
    return s;
}

}  // namespace dsv4::bench
