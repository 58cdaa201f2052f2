#include "tune/calibrate.h"

#include <chrono>

namespace dsv4::tune {

Result<CalibrationReport> calibrate(TuneBench& bench, const ShapePoint& at, const CalibrationOptions& opt) {
    if (opt.aa < 0 || opt.detect < 0 || opt.pairs < 2 || !(opt.slowdown > 0) || !(opt.confidence > 0 && opt.confidence < 1))
        return invalid_argument("calibrate: need aa, detect >= 0, pairs >= 2, slowdown > 0, confidence in (0, 1)");
    const auto t0 = std::chrono::steady_clock::now();
    CalibrationReport rep;
    rep.at = at;
    rep.opt = opt;
    // One comparison: `pairs` ABBA pairs; A = the heuristics, B = the heuristics again (A/A) or slowed.
    auto compare = [&](bool slowed) -> Result<bench::RatioTest> {
        std::vector<double> a, b;
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
        return bench::compare_ratio_paired(a, b, /*higher_is_better=*/false, opt.confidence);
    };
    int false_n = 0, found = 0;
    for (int i = 0; i < opt.aa; ++i) {
        DSV4_ASSIGN_OR_RETURN(const bench::RatioTest t, compare(false));
        false_n += t.verdict == bench::Verdict::kFaster || t.verdict == bench::Verdict::kSlower;
        rep.aa.push_back(t);
    }
    for (int i = 0; i < opt.detect; ++i) {
        DSV4_ASSIGN_OR_RETURN(const bench::RatioTest t, compare(true));
        found += t.verdict == bench::Verdict::kSlower;
        rep.detect.push_back(t);
    }
    if (opt.detect > 0) DSV4_RETURN_IF_ERROR(bench.set_slowdown(at, 0.0));
    rep.false_verdicts = bench::wilson_interval(false_n, opt.aa);
    rep.detected = bench::wilson_interval(found, opt.detect);
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rep;
}

}  // namespace dsv4::tune
