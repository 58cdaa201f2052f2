// `dsv4 bench series FILE...`: the error rates of the A/B comparison measured, not assumed.
// Each file is one `dsv4 bench --ab ... --out FILE` run (a family of levels); the command
// compares each as `bench compare FILE` would and tallies how many families and levels said
// faster or slower, with Wilson intervals. An A/A series (both sides the same server build)
// estimates the false-verdict rate per family; a series with a known slowdown on B the power.
// scripts/bench-ab-series.sh runs such a series against two local servers.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/compare.h"
#include "bench/record_io.h"
#include "bench/series.h"
#include "tools/dsv4/commands.h"

namespace dsv4::cli {
namespace {

using namespace dsv4::bench;

struct SeriesFlags {
    std::vector<std::string> files;
    std::string metric = "output_tok_s";
    double confidence = 0.95;
    std::string json;
};

// One line per family: the file and each level's B/A, p and verdict.
std::string family_line(const std::string& file, const Comparison& c) {
    std::string s = file + ":";
    for (const LevelComparison& r : c.rows) {
        s += fmt::format("  conc {} B/A {:.3f} p {:.3g} {}", r.level, r.test.ratio, r.test.p,
                         verdict_name(r.test.verdict));
    }
    return s + "\n";
}

Status run_series(const SeriesFlags& f) {
    SeriesTally tally;
    nlohmann::json per_file = nlohmann::json::array();
    for (const std::string& file : f.files) {
        DSV4_ASSIGN_OR_RETURN(auto records, read_jsonl(file));
        std::vector<IterationMetrics> a, b;
        for (const auto& r : records) {
            if (r.m.config == "A") a.push_back(r.m);
            if (r.m.config == "B") b.push_back(r.m);
        }
        if (a.empty() || b.empty()) {
            return invalid_argument("{} is not an --ab run (needs config A and B records)", file);
        }
        DSV4_ASSIGN_OR_RETURN(Comparison c, compare_levels(a, b, f.metric, f.confidence));
        std::fputs(family_line(file, c).c_str(), stdout);
        add_family(tally, c);
        nlohmann::json rows = nlohmann::json::array();
        for (const LevelComparison& r : c.rows) {
            rows.push_back({{"level", r.level},
                            {"n", r.test.n_a},
                            {"ratio", r.test.ratio},
                            {"lo", r.test.lo},
                            {"hi", r.test.hi},
                            {"p", r.test.p},
                            {"p_holm", r.p_adjusted},
                            {"verdict", verdict_name(r.test.verdict)}});
        }
        per_file.push_back({{"file", file}, {"paired", c.paired}, {"ci_level", c.ci_level}, {"levels", rows}});
    }
    std::fputs(("\n" + format_series(tally)).c_str(), stdout);
    std::printf(
        "Per family: verdicts by Holm at a family-wise error rate of %.3g%%; an A/A series "
        "should show about that share of families with a verdict, or less.\n",
        100 * (1 - f.confidence));
    if (!f.json.empty()) {
        const nlohmann::json j = {{"schema", "dsv4.bench.series.v1"},
                                  {"metric", f.metric},
                                  {"family_wise_error_rate", 1 - f.confidence},
                                  {"tally", series_json(tally)},
                                  {"families", per_file}};
        std::ofstream out(f.json);
        out << j.dump(1) << '\n';
        if (!out) return error(StatusCode::kUnavailable, "cannot write {}", f.json);
    }
    return Status::ok();
}

}  // namespace

CLI::App* register_bench_series(CLI::App& bench, CommandContext& ctx) {
    auto* cmd =
        bench.add_subcommand("series",
                             "Tally a series of --ab runs (one JSON-lines file each): families and levels with a "
                             "faster/slower verdict, with Wilson intervals (A/A false-verdict rate, or power)");
    auto f = std::make_shared<SeriesFlags>();
    cmd->add_option("files", f->files, "JSON-lines files, one --ab run each")->required();
    cmd->add_option("--metric", f->metric, "Metric to compare")->capture_default_str();
    cmd->add_option("--confidence", f->confidence, "1 - the family-wise error rate per file")->capture_default_str();
    cmd->add_option("--json", f->json, "Also write the tally and every family's rows here");
    cmd->callback([&ctx, f] {
        Status s = run_series(*f);
        if (!s.is_ok()) {
            std::fprintf(stderr, "dsv4 bench series: %s\n", s.to_string().c_str());
            ctx.exit_code = 1;
        }
    });
    return cmd;
}

}  // namespace dsv4::cli
