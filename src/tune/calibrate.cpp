#include "tune/calibrate.h"

#include <chrono>

namespace dsv4::tune {

Result<CalibrationReport> calibrate(TuneBench& bench, const ShapePoint& at, const CalibrationOptions& opt,
                                    const CalibrationProgress& progress) {
    if (opt.aa < 0 || opt.detect < 0 || opt.pairs < 2 || !(opt.slowdown > 0) ||
        !(opt.confidence > 0 && opt.confidence < 1) || !(opt.min_effect >= 0 && opt.min_effect < 1))
        return invalid_argument(
            "calibrate: need aa, detect >= 0, pairs >= 2, slowdown > 0, confidence in (0, 1), min_effect in [0, 1)");
    const auto t0 = std::chrono::steady_clock::now();
    CalibrationReport rep;
    rep.at = at;
    rep.opt = opt;
    // One comparison: `pairs` ABBA pairs; A = the heuristics, B = the heuristics again (A/A) or slowed.
    auto compare = [&](bool slowed) -> Result<CalibrationComparison> {
        CalibrationComparison c;
        auto& a = c.a_ms;
        auto& b = c.b_ms;
        for (int k = 0; k < opt.pairs; ++k) {
            const bool b_first = k % 2 == 1;
            double va = 0, vb = 0;
            for (int half = 0; half < 2; ++half) {
                const bool b_now = (half == 0) == b_first;
                // The same switch a candidate costs: rules reinstalled (graphs recaptured) every half.
                DSV4_RETURN_IF_ERROR(bench.set_rules({}));
                if (slowed) DSV4_RETURN_IF_ERROR(bench.set_slowdown(at, b_now ? opt.slowdown : 0.0));
                DSV4_ASSIGN_OR_RETURN(const double ms, bench.step_ms(at));
                (b_now ? vb : va) = ms;
            }
            a.push_back(va);
            b.push_back(vb);
        }
        c.test = bench::compare_ratio_paired(a, b, /*higher_is_better=*/false, opt.confidence);
        apply_min_effect(c.test, opt.min_effect, &c.below_min_effect);
        return c;
    };
    int false_n = 0, found = 0, false_alone = 0, found_alone = 0;
    for (int i = 0; i < opt.aa; ++i) {
        DSV4_ASSIGN_OR_RETURN(CalibrationComparison c, compare(false));
        false_n += c.test.verdict == bench::Verdict::kFaster || c.test.verdict == bench::Verdict::kSlower;
        false_alone += c.test.verdict == bench::Verdict::kFaster || c.test.verdict == bench::Verdict::kSlower ||
                       c.below_min_effect;
        if (progress) progress(false, i, c);
        rep.aa.push_back(std::move(c));
    }
    for (int i = 0; i < opt.detect; ++i) {
        DSV4_ASSIGN_OR_RETURN(CalibrationComparison c, compare(true));
        found += c.test.verdict == bench::Verdict::kSlower;
        found_alone += c.test.verdict == bench::Verdict::kSlower || (c.below_min_effect && c.test.ratio > 1);
        if (progress) progress(true, i, c);
        rep.detect.push_back(std::move(c));
    }
    if (opt.detect > 0) DSV4_RETURN_IF_ERROR(bench.set_slowdown(at, 0.0));
    rep.false_verdicts = bench::wilson_interval(false_n, opt.aa);
    rep.detected = bench::wilson_interval(found, opt.detect);
    rep.false_verdicts_test_alone = bench::wilson_interval(false_alone, opt.aa);
    rep.detected_test_alone = bench::wilson_interval(found_alone, opt.detect);
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rep;
}

}  // namespace dsv4::tune
