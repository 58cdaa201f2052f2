// Tally of a series of comparisons (see series.h).
#include "bench/series.h"

#include <fmt/format.h>

namespace dsv4::bench {

void add_family(SeriesTally& t, const Comparison& c) {
    int faster = 0, slower = 0, tested = 0;
    for (const LevelComparison& r : c.rows) {
        if (r.test.verdict == Verdict::kInsufficientData) continue;
        ++tested;
        faster += r.test.verdict == Verdict::kFaster;
        slower += r.test.verdict == Verdict::kSlower;
    }
    ++t.families;
    t.families_paired += c.paired;
    t.families_any_verdict += faster + slower > 0;
    t.families_any_faster += faster > 0;
    t.families_any_slower += slower > 0;
    t.families_all_faster += tested > 0 && faster == tested;
    t.families_all_slower += tested > 0 && slower == tested;
    t.rows += tested;
    t.rows_faster += faster;
    t.rows_slower += slower;
}

namespace {

std::string share(int k, int n, double level) {
    const Proportion p = wilson_interval(k, n, level);
    return fmt::format("{:>4} of {:<4} {:6.2f}%  [{:.2f}%, {:.2f}%]", k, n, 100 * p.p, 100 * p.lo, 100 * p.hi);
}

nlohmann::json share_json(int k, int n, double level) {
    const Proportion p = wilson_interval(k, n, level);
    return {{"k", k}, {"n", n}, {"rate", p.p}, {"wilson", {p.lo, p.hi}}};
}

}  // namespace

std::string format_series(const SeriesTally& t, double level) {
    std::string s = fmt::format(
        "{} famil{} ({} paired), {} level{} tested; shares with their "
        "{:.0f}% Wilson score intervals:\n",
        t.families, t.families == 1 ? "y" : "ies", t.families_paired, t.rows, t.rows == 1 ? "" : "s", 100 * level);
    s += fmt::format("  families with any faster/slower verdict  {}\n",
                     share(t.families_any_verdict, t.families, level));
    s +=
        fmt::format("  families with any level faster           {}\n", share(t.families_any_faster, t.families, level));
    s +=
        fmt::format("  families with any level slower           {}\n", share(t.families_any_slower, t.families, level));
    s +=
        fmt::format("  families with every level faster         {}\n", share(t.families_all_faster, t.families, level));
    s +=
        fmt::format("  families with every level slower         {}\n", share(t.families_all_slower, t.families, level));
    s += fmt::format("  levels faster                            {}\n", share(t.rows_faster, t.rows, level));
    s += fmt::format("  levels slower                            {}\n", share(t.rows_slower, t.rows, level));
    return s;
}

nlohmann::json series_json(const SeriesTally& t, double level) {
    return {{"families", t.families},
            {"families_paired", t.families_paired},
            {"levels_tested", t.rows},
            {"interval", "wilson"},
            {"interval_level", level},
            {"families_any_verdict", share_json(t.families_any_verdict, t.families, level)},
            {"families_any_faster", share_json(t.families_any_faster, t.families, level)},
            {"families_any_slower", share_json(t.families_any_slower, t.families, level)},
            {"families_all_faster", share_json(t.families_all_faster, t.families, level)},
            {"families_all_slower", share_json(t.families_all_slower, t.families, level)},
            {"levels_faster", share_json(t.rows_faster, t.rows, level)},
            {"levels_slower", share_json(t.rows_slower, t.rows, level)}};
}

}  // namespace dsv4::bench
