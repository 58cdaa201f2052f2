#include "tune/tune_ledger.h"

#include <fstream>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dsv4::tune {

namespace {

using nlohmann::json;

json range_json(const ShapeRange& r) {
    if (r.any()) return nullptr;
    return json::array({r.lo, r.hi});
}

double mean_of(const std::vector<double>& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

std::string ms(double v) { return v < 0 ? "-" : fmt::format("{:.4f}", v); }

// The fields every ledger line starts with: what it is and which run, machine and build made it.
json run_json(const char* schema, const TuneRunInfo& info) {
    return {{"schema", schema},
            {"date", info.date},
            {"git_sha", info.git_sha},
            {"gpu", info.key.gpu},
            {"driver", info.key.driver},
            {"cuda", info.key.cuda},
            {"model_shape", info.key.model_shape},
            {"command", info.command}};
}

}  // namespace

Status append_text_file(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::app | std::ios::binary);
    if (!f) return error(StatusCode::kInvalidArgument, "cannot open {} for appending", path);
    f << text;
    f.flush();
    if (!f) return error(StatusCode::kInternal, "writing {} failed", path);
    return Status::ok();
}

Status append_ledger_jsonl(const std::string& path, const TuneRunInfo& info, const TuneReport& rep) {
    std::string out;
    for (const Outcome& o : rep.outcomes) {
        const TuningRule& r = o.cand.rule;
        json j = run_json("dsv4.tune.ledger.v1", info);
        j.update({{"class",
                   {{"batch", range_json(o.cls.tokens)},
                    {"context", range_json(o.cls.context)},
                    {"measured_at", {{"batch", o.cls.at.batch}, {"context", o.cls.at.context}}}}},
                  {"hypothesis", fmt::format("{} {} is faster than the heuristics at {}", tuned_op_name(r.op),
                                             o.cand.label, o.cls.label())},
                  {"op", tuned_op_name(r.op)},
                  {"variant", r.variant},
                  {"split_kv_target_ctas", r.split_kv_target_ctas},
                  {"stage", stage_name(o.stage)},
                  {"detail", o.detail},
                  {"correctness", {{"error", o.correctness_error}, {"check", o.correctness_check}}},
                  {"op_ms", {{"heuristics", o.op_ms_heuristic}, {"candidate", o.op_ms_candidate}}},
                  {"heuristic_ms", o.heuristic_ms},
                  {"candidate_ms", o.candidate_ms},
                  {"candidate_first", o.candidate_first},
                  {"kept", o.kept},
                  {"tuning_file", info.tuning_file}});
        if (o.stage == Stage::kMeasured) {
            j["ratio"] = o.test.ratio;
            j["ci"] = {o.test.lo, o.test.hi};
            j["ci_level"] = o.test.level;
            j["p"] = o.test.p;
            j["holm_adjusted_p"] = o.adjusted_p;
            j["verdict"] = bench::verdict_name(o.test.verdict);
            j["below_min_effect"] = o.below_min_effect;
            j["family"] = {{"comparisons", rep.m}, {"fwer", rep.alpha}};
        }
        out += j.dump() + "\n";
    }
    return append_text_file(path, out);
}

std::string ledger_markdown(const TuneRunInfo& info, const TuneReport& rep) {
    std::set<std::string> ops;
    for (const Outcome& o : rep.outcomes) ops.insert(tuned_op_name(o.cand.rule.op));
    std::string opl;
    for (const std::string& s : ops) opl += (opl.empty() ? "" : ", ") + s;
    std::string md = fmt::format("## {} · dsv4 tune · {} (machine-written)\n\n", info.date.substr(0, 10), opl);
    md += fmt::format("- **Run.** `{}` on {} (driver {}, CUDA {}), build {}, model shape `{}`; {:.0f} s.\n",
                      info.command, info.key.gpu, info.key.driver.empty() ? "?" : info.key.driver,
                      info.key.cuda.empty() ? "?" : info.key.cuda, info.git_sha, info.key.model_shape, rep.seconds);
    md += fmt::format(
        "- **Method.** Per class and candidate: correctness (the op against an fp64 CPU evaluation, or the "
        "logits against the heuristics'), the op's time in the step, then the step time in ABBA pairs; paired "
        "t test on log times; verdicts by Holm over the {} end-to-end comparisons of the run (family-wise "
        "error rate {:.0f}%), intervals at the Bonferroni level; a verdict also needs a change of at least "
        "{:.1f}%.\n",
        rep.m, 100 * rep.alpha, 100 * rep.min_effect);
    md += fmt::format("- **Kept.** {} rule(s){}.\n\n", rep.chosen.size(),
                      info.tuning_file.empty() ? "" : " written to `" + info.tuning_file + "`");
    md +=
        "| class | op | candidate | stage | op ms (heur. / cand.) | step ms (heur. / cand.) | cand./heur. [CI] | Holm "
        "p | verdict | kept |\n";
    md += "|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Outcome& o : rep.outcomes) {
        const bool m = o.stage == Stage::kMeasured;
        md += fmt::format("| {} | {} | {} | {} | {} / {} | {} | {} | {} | {} | {} |\n", o.cls.label(),
                          tuned_op_name(o.cand.rule.op), o.cand.label,
                          std::string(stage_name(o.stage)) + (o.detail.empty() || m ? "" : ": " + o.detail),
                          ms(o.op_ms_heuristic), ms(o.op_ms_candidate),
                          m ? fmt::format("{} / {}", ms(mean_of(o.heuristic_ms)), ms(mean_of(o.candidate_ms))) : "-",
                          m ? fmt::format("{:.3f} [{:.3f}, {:.3f}]", o.test.ratio, o.test.lo, o.test.hi) : "-",
                          m ? fmt::format("{:.3g}", o.adjusted_p) : "-",
                          m ? std::string(bench::verdict_name(o.test.verdict)) +
                                  (o.below_min_effect ? " (tested different, by less than the minimum effect)" : "")
                            : "-",
                          o.kept ? "yes" : "no");
    }
    return md + "\n";
}

Status append_calibration_jsonl(const std::string& path, const TuneRunInfo& info, const CalibrationReport& rep) {
    auto tests = [](const std::vector<CalibrationComparison>& v) {
        json a = json::array();
        for (const auto& c : v) {
            const auto& t = c.test;
            a.push_back({{"ratio", t.ratio},
                         {"ci", {t.lo, t.hi}},
                         {"p", t.p},
                         {"verdict", bench::verdict_name(t.verdict)},
                         {"below_min_effect", c.below_min_effect},
                         {"a_ms", c.a_ms},
                         {"b_ms", c.b_ms}});
        }
        return a;
    };
    auto prop = [](const bench::Proportion& p) {
        return json{{"k", p.k}, {"n", p.n}, {"rate", p.p}, {"wilson95", {p.lo, p.hi}}};
    };
    json j = run_json("dsv4.tune.calibration.v1", info);
    j.update({{"point", {{"batch", rep.at.batch}, {"context", rep.at.context}}},
              {"pairs", rep.opt.pairs},
              {"confidence", rep.opt.confidence},
              {"slowdown", rep.opt.slowdown},
              {"min_effect", rep.opt.min_effect},
              {"false_verdicts", prop(rep.false_verdicts)},
              {"detected", prop(rep.detected)},
              {"false_verdicts_test_alone", prop(rep.false_verdicts_test_alone)},
              {"detected_test_alone", prop(rep.detected_test_alone)},
              {"aa", tests(rep.aa)},
              {"detect", tests(rep.detect)},
              {"seconds", rep.seconds}});
    return append_text_file(path, j.dump() + "\n");
}

std::string calibration_markdown(const TuneRunInfo& info, const CalibrationReport& rep) {
    const auto& f = rep.false_verdicts;
    const auto& d = rep.detected;
    std::string md = fmt::format("## {} · dsv4 tune --calibrate (machine-written)\n\n", info.date.substr(0, 10));
    const auto& fa = rep.false_verdicts_test_alone;
    const auto& da = rep.detected_test_alone;
    md += fmt::format(
        "- **Run.** `{}` on {} (driver {}, CUDA {}), build {}; batch {}, context {}; {} ABBA pairs per "
        "comparison, each judged alone at {:.0f}% with a minimum effect of {:.1f}% (as the tuner); "
        "{:.0f} s.\n",
        info.command, info.key.gpu, info.key.driver, info.key.cuda, info.git_sha, rep.at.batch, rep.at.context,
        rep.opt.pairs, 100 * rep.opt.confidence, 100 * rep.opt.min_effect, rep.seconds);
    md += fmt::format(
        "- **A/A.** {} of {} comparisons of the heuristics with themselves said faster or slower: {:.1f}% "
        "(95% Wilson interval {:.1f}-{:.1f}%; the target is at most 5%). The paired test alone: {} of "
        "{} ({:.1f}%, {:.1f}-{:.1f}%).\n",
        f.k, f.n, 100 * f.p, 100 * f.lo, 100 * f.hi, fa.k, fa.n, 100 * fa.p, 100 * fa.lo, 100 * fa.hi);
    md += fmt::format(
        "- **Detection.** A step slowed by {:.0f}% was found slower in {} of {}: {:.1f}% (95% Wilson "
        "interval {:.1f}-{:.1f}%; the target is at least 90%). The paired test alone: {} of {}.\n\n",
        100 * rep.opt.slowdown, d.k, d.n, 100 * d.p, 100 * d.lo, 100 * d.hi, da.k, da.n);
    return md;
}

}  // namespace dsv4::tune
