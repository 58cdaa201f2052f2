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
        json j = {{"schema", "dsv4.tune.ledger.v1"},
                  {"date", info.date},
                  {"git_sha", info.git_sha},
                  {"gpu", info.key.gpu},
                  {"driver", info.key.driver},
                  {"cuda", info.key.cuda},
                  {"model_shape", info.key.model_shape},
                  {"command", info.command},
                  {"class", {{"batch", range_json(o.cls.tokens)}, {"context", range_json(o.cls.context)},
                             {"measured_at", {{"batch", o.cls.at.batch}, {"context", o.cls.at.context}}}}},
                  {"hypothesis", fmt::format("{} {} is faster than the heuristics at {}", tuned_op_name(r.op),
                                             o.cand.label, o.cls.label())},
                  {"op", tuned_op_name(r.op)},
                  {"variant", r.variant},
                  {"split_kv_target_ctas", r.split_kv_target_ctas},
                  {"stage", stage_name(o.stage)},
                  {"detail", o.detail},
                  {"logit_error", o.logit_error},
                  {"op_ms", {{"heuristics", o.op_ms_heuristic}, {"candidate", o.op_ms_candidate}}},
                  {"heuristic_ms", o.heuristic_ms},
                  {"candidate_ms", o.candidate_ms},
                  {"candidate_first", o.candidate_first},
                  {"kept", o.kept},
                  {"tuning_file", info.tuning_file}};
        if (o.stage == Stage::kMeasured) {
            j["ratio"] = o.test.ratio;
            j["ci"] = {o.test.lo, o.test.hi};
            j["ci_level"] = o.test.level;
            j["p"] = o.test.p;
            j["holm_adjusted_p"] = o.adjusted_p;
            j["verdict"] = bench::verdict_name(o.test.verdict);
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
        "- **Method.** Per class and candidate: logits against the heuristics', the op's time in the step, then "
        "the step time in ABBA pairs; paired t test on log times; verdicts by Holm over the {} end-to-end "
        "comparisons of the run (family-wise error rate {:.0f}%), intervals at the Bonferroni level.\n",
        rep.m, 100 * rep.alpha);
    md += fmt::format("- **Kept.** {} rule(s){}.\n\n", rep.chosen.size(),
                      info.tuning_file.empty() ? "" : " written to `" + info.tuning_file + "`");
    md += "| class | op | candidate | stage | op ms (heur. / cand.) | step ms (heur. / cand.) | cand./heur. [CI] | Holm p | verdict | kept |\n";
    md += "|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Outcome& o : rep.outcomes) {
        const bool m = o.stage == Stage::kMeasured;
        md += fmt::format("| {} | {} | {} | {} | {} / {} | {} | {} | {} | {} | {} |\n", o.cls.label(),
                          tuned_op_name(o.cand.rule.op), o.cand.label,
                          std::string(stage_name(o.stage)) + (o.detail.empty() || m ? "" : ": " + o.detail),
                          ms(o.op_ms_heuristic), ms(o.op_ms_candidate),
                          m ? fmt::format("{} / {}", ms(mean_of(o.heuristic_ms)), ms(mean_of(o.candidate_ms))) : "-",
                          m ? fmt::format("{:.3f} [{:.3f}, {:.3f}]", o.test.ratio, o.test.lo, o.test.hi) : "-",
                          m ? fmt::format("{:.3g}", o.adjusted_p) : "-", m ? bench::verdict_name(o.test.verdict) : "-",
                          o.kept ? "yes" : "no");
    }
    return md + "\n";
}

}  // namespace dsv4::tune
