#include "tune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/family.h"

namespace dsv4::tune {

namespace {

std::string range_label(const char* what, const ShapeRange& r) {
    if (r.any()) return fmt::format("any {}", what);
    if (r.hi == std::numeric_limits<int64_t>::max()) return fmt::format("{} {}+", what, r.lo);
    if (r.lo == r.hi) return fmt::format("{} {}", what, r.lo);
    return fmt::format("{} {}-{}", what, r.lo, r.hi);
}

template <typename T>
Result<std::vector<ShapeRange>> ranges_of(std::vector<T>& v, const char* what) {
    if (v.empty()) return invalid_argument("tune: no {} given", what);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    if (v.front() < 1) return invalid_argument("tune: {} must be >= 1 (got {})", what, v.front());
    std::vector<ShapeRange> out;
    int64_t lo = 1;
    for (size_t i = 0; i < v.size(); ++i) {
        const int64_t hi = i + 1 == v.size() ? std::numeric_limits<int64_t>::max() : int64_t(v[i]);
        out.push_back({lo, hi});
        lo = int64_t(v[i]) + 1;
    }
    return out;
}

}  // namespace

std::string ShapeClass::label() const { return range_label("batch", tokens) + ", " + range_label("context", context); }

Result<std::vector<ShapeClass>> shape_classes(std::vector<int> batches, std::vector<int64_t> contexts,
                                              bool with_context) {
    DSV4_ASSIGN_OR_RETURN(const std::vector<ShapeRange> br, ranges_of(batches, "batch sizes"));
    DSV4_ASSIGN_OR_RETURN(const std::vector<ShapeRange> cr, ranges_of(contexts, "contexts"));
    std::vector<ShapeClass> out;
    for (size_t b = 0; b < batches.size(); ++b) {
        if (!with_context) {
            out.push_back({{batches[b], contexts.back()}, br[b], ShapeRange{}});
            continue;
        }
        for (size_t c = 0; c < contexts.size(); ++c) out.push_back({{batches[b], contexts[c]}, br[b], cr[c]});
    }
    return out;
}

const char* stage_name(Stage s) {
    switch (s) {
        case Stage::kIllegal:
            return "illegal";
        case Stage::kIncorrect:
            return "incorrect";
        case Stage::kKernelSlower:
            return "kernel slower";
        case Stage::kOverBudget:
            return "time budget";
        case Stage::kMeasured:
            return "measured";
    }
    return "?";
}

void apply_min_effect(bench::RatioTest& t, double min_effect, bool* demoted) {
    const bool decided = t.verdict == bench::Verdict::kFaster || t.verdict == bench::Verdict::kSlower;
    const bool small = std::fabs(t.ratio - 1.0) < min_effect;
    if (demoted) *demoted = decided && small;
    if (decided && small) t.verdict = bench::Verdict::kNoDifference;
}

Result<TuneReport> run_tune(TuneBench& bench, const std::vector<ShapeClass>& classes,
                            const std::vector<Candidate>& candidates, const TuneOptions& opt) {
    return run_tune(bench, std::vector<CandidateSet>{{classes, candidates}}, opt);
}

Result<TuneReport> run_tune(TuneBench& bench, const std::vector<CandidateSet>& sets, const TuneOptions& opt) {
    if (opt.pairs < 2) return invalid_argument("tune: --pairs must be >= 2 (got {})", opt.pairs);
    if (!(opt.min_effect >= 0 && opt.min_effect < 1))
        return invalid_argument("tune: the minimum effect must be in [0, 1) (got {})", opt.min_effect);
    if (!(opt.confidence > 0 && opt.confidence < 1))
        return invalid_argument("tune: confidence must be in (0, 1) (got {})", opt.confidence);
    const auto t0 = std::chrono::steady_clock::now();
    auto now = [&] {
        return opt.now_s ? opt.now_s() : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    const double start = now();
    TuneReport rep;
    auto heuristics = [&]() -> Status { return bench.set_rules({}).with_context("tune: the heuristics"); };
    std::vector<size_t> set_of;  // per outcome: its set
    for (size_t si = 0; si < sets.size(); ++si)
        for (const ShapeClass& cls : sets[si].classes) {
            const std::vector<Candidate>& candidates = sets[si].candidates;
            const ShapePoint& p = cls.at;
            std::map<TunedOp, double> base_op;  // the heuristics' op time at p, measured once per op
            for (const Candidate& c0 : candidates) {
                Outcome o;
                o.cls = cls;
                o.cand = c0;
                o.cand.rule.tokens = cls.tokens;
                o.cand.rule.context = o.cand.rule.op == TunedOp::kSparseDecode ? cls.context : ShapeRange{};
                if (opt.time_budget_s > 0 && now() - start > opt.time_budget_s) {
                    o.stage = Stage::kOverBudget;
                    o.detail = fmt::format("not started: the {:.0f} s budget was spent", opt.time_budget_s);
                    rep.outcomes.push_back(std::move(o));
                    set_of.push_back(si);
                    continue;
                }
                if (const Status s = bench.set_rules({o.cand.rule}); !s.is_ok()) {
                    o.stage = Stage::kIllegal;
                    o.detail = s.message();
                    rep.outcomes.push_back(std::move(o));
                    set_of.push_back(si);
                    continue;
                }
                DSV4_ASSIGN_OR_RETURN(const TuneBench::Correctness ok, bench.correctness(p));
                o.correctness_error = ok.error;
                o.correctness_check = ok.check;
                if (!(ok.error <= 1.0)) {
                    o.stage = Stage::kIncorrect;
                    o.detail = ok.check;
                    rep.outcomes.push_back(std::move(o));
                    set_of.push_back(si);
                    continue;
                }
                auto cand_op = bench.op_ms(p, o.cand.rule.op);
                if (cand_op.is_ok()) {
                    o.op_ms_candidate = *cand_op;
                    auto it = base_op.find(o.cand.rule.op);
                    if (it == base_op.end()) {
                        DSV4_RETURN_IF_ERROR(heuristics());
                        DSV4_ASSIGN_OR_RETURN(const double b, bench.op_ms(p, o.cand.rule.op));
                        it = base_op.emplace(o.cand.rule.op, b).first;
                    }
                    o.op_ms_heuristic = it->second;
                    if (o.op_ms_candidate > opt.kernel_keep * o.op_ms_heuristic) {
                        o.stage = Stage::kKernelSlower;
                        o.detail = fmt::format("op {:.4f} ms vs the heuristics' {:.4f} ms (keep at <= {:.2f}x)",
                                               o.op_ms_candidate, o.op_ms_heuristic, opt.kernel_keep);
                        rep.outcomes.push_back(std::move(o));
                        set_of.push_back(si);
                        continue;
                    }
                } else if (cand_op.status().code() != StatusCode::kUnimplemented) {
                    return cand_op.status();
                }
                // End to end, ABBA: pair k runs heuristics then candidate when k is even, else the reverse,
                // so a drift that is linear over one block of four cancels in the pairs' mean.
                for (int k = 0; k < opt.pairs; ++k) {
                    const bool cand_first = k % 2 == 1;
                    double a = 0, b = 0;
                    for (int half = 0; half < 2; ++half) {
                        const bool cand_now = (half == 0) == cand_first;
                        if (cand_now) {
                            DSV4_RETURN_IF_ERROR(bench.set_rules({o.cand.rule}));
                            DSV4_ASSIGN_OR_RETURN(b, bench.step_ms(p));
                        } else {
                            DSV4_RETURN_IF_ERROR(heuristics());
                            DSV4_ASSIGN_OR_RETURN(a, bench.step_ms(p));
                        }
                    }
                    o.heuristic_ms.push_back(a);
                    o.candidate_ms.push_back(b);
                    o.candidate_first.push_back(cand_first);
                }
                rep.outcomes.push_back(std::move(o));
                set_of.push_back(si);
            }
        }
    DSV4_RETURN_IF_ERROR(heuristics());

    // The family: every end-to-end comparison of the run; step time, lower is better.
    std::vector<size_t> idx;
    std::vector<bench::RatioSamples> members;
    for (size_t i = 0; i < rep.outcomes.size(); ++i)
        if (rep.outcomes[i].stage == Stage::kMeasured) {
            idx.push_back(i);
            members.push_back({rep.outcomes[i].heuristic_ms, rep.outcomes[i].candidate_ms});
        }
    const bench::FamilyComparison fam = bench::compare_family(members, /*paired=*/true,
                                                              /*higher_is_better=*/false, opt.confidence);
    rep.alpha = fam.alpha;
    rep.min_effect = opt.min_effect;
    rep.m = fam.m;
    for (size_t j = 0; j < idx.size(); ++j) {
        Outcome& o = rep.outcomes[idx[j]];
        o.test = fam.tests[j];
        o.adjusted_p = fam.adjusted_p[j];
        apply_min_effect(o.test, opt.min_effect, &o.below_min_effect);
    }
    // Per set, class and op: the faster candidate with the lowest ratio.
    for (size_t si = 0; si < sets.size(); ++si)
        for (const ShapeClass& cls : sets[si].classes) {
            std::map<TunedOp, Outcome*> best;
            for (size_t i = 0; i < rep.outcomes.size(); ++i) {
                Outcome& o = rep.outcomes[i];
                if (set_of[i] != si || o.stage != Stage::kMeasured || o.test.verdict != bench::Verdict::kFaster)
                    continue;
                if (o.cls.tokens.lo != cls.tokens.lo || o.cls.context.lo != cls.context.lo) continue;
                Outcome*& b = best[o.cand.rule.op];
                if (!b || o.test.ratio < b->test.ratio) b = &o;
            }
            for (auto& [op, o] : best) {
                o->kept = true;
                TuningRule r = o->cand.rule;
                const nlohmann::json m = {
                    {"metric", "decode step time (ms), candidate / heuristics, paired ABBA"},
                    {"point", {{"batch", cls.at.batch}, {"context", cls.at.context}}},
                    {"heuristic_ms", o->heuristic_ms},
                    {"candidate_ms", o->candidate_ms},
                    {"ratio", o->test.ratio},
                    {"ci", {o->test.lo, o->test.hi}},
                    {"ci_level", o->test.level},
                    {"p", o->test.p},
                    {"holm_adjusted_p", o->adjusted_p},
                    {"family", {{"comparisons", rep.m}, {"fwer", rep.alpha}}},
                    {"op_ms", {{"heuristics", o->op_ms_heuristic}, {"candidate", o->op_ms_candidate}}},
                    {"correctness", {{"error", o->correctness_error}, {"check", o->correctness_check}}},
                    {"min_effect", opt.min_effect},
                    {"candidate", o->cand.label},
                    {"date", opt.date},
                    {"git_sha", opt.git_sha}};
                r.measurement_json = m.dump();
                rep.chosen.push_back(std::move(r));
            }
        }
    rep.seconds = now() - start;
    return rep;
}

}  // namespace dsv4::tune
