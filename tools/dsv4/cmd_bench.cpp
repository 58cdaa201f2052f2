// `dsv4 bench`: concurrency-sweep throughput benchmark against any OpenAI-compatible server,
// with JSON-lines records, a gnuplot figure, and noise-aware A/B verdicts
// (`--ab URL_B` alternates two servers in ABBA order and pairs their batches; `dsv4 bench
// compare A.jsonl B.jsonl` compares files).
// The work lives in src/bench; this file maps flags to options and prints.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/compare.h"
#include "bench/multi_turn.h"
#include "bench/plot.h"
#include "bench/record_io.h"
#include "bench/report.h"
#include "bench/sweep.h"
#include "tools/dsv4/commands.h"

namespace dsv4::cli {
namespace {

using namespace dsv4::bench;

struct BenchFlags {
    std::string url = "http://127.0.0.1:8000";
    std::string url_b;  // --ab
    std::string model, model_b;
    std::string endpoint = "chat";
    std::string dataset = "random-words";
    int input_len = -1;  // -1: 128, or 16 with --decode-heavy
    int token_id_min = 100, token_id_max = 32000;
    bool decode_heavy = false;
    std::string levels = "1,8,32,64,128,256,512";
    std::string out, plot, label;
    std::string metric = "output_tok_s";
    double confidence = 0.95;
    bool no_progress = false;
    SweepOptions sweep;
};

struct CompareFlags {
    std::vector<std::string> files;
    std::string metric = "output_tok_s";
    double confidence = 0.95;
    std::string plot;
};

Result<std::vector<int>> parse_levels(const std::string& text) {
    std::vector<int> out;
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = std::min(text.find(',', pos), text.size());
        const std::string item = text.substr(pos, comma - pos);
        try {
            size_t used = 0;
            const int v = std::stoi(item, &used);
            if (used != item.size() || v < 1) throw std::invalid_argument(item);
            out.push_back(v);
        } catch (const std::exception&) {
            return invalid_argument("--conc: '{}' is not a positive integer", item);
        }
        pos = comma + 1;
    }
    return out;
}

// Hundreds of concurrent connections need more descriptors than the usual soft limit of 1024.
void raise_fd_limit() {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

std::string default_plot_path(const std::string& out) {
    const size_t dot = out.find_last_of('.');
    const size_t slash = out.find_last_of('/');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    return (has_ext ? out.substr(0, dot) : out) + ".svg";
}

// Groups iterations by configuration and level into plot series / summaries.
std::vector<PlotSeries> series_of(const std::vector<IterationMetrics>& its,
                                  const std::map<std::string, std::string>& names) {
    std::map<std::string, std::map<int, std::vector<IterationMetrics>>> grouped;
    for (const auto& m : its) grouped[m.config][m.level].push_back(m);
    std::vector<PlotSeries> out;
    for (const auto& [config, levels] : grouped) {
        PlotSeries s;
        auto it = names.find(config);
        s.name = it != names.end() ? it->second : config;
        for (const auto& [level, v] : levels) s.levels.push_back(summarize_level(v));
        out.push_back(std::move(s));
    }
    return out;
}

Status draw_plot(const std::string& path, const std::vector<PlotSeries>& series, const std::string& title) {
    DSV4_ASSIGN_OR_RETURN(PlotResult pr, write_plot(path, series, title));
    if (pr.drawn) {
        std::fprintf(stderr, "plot: %s (gnuplot script %s)\n", path.c_str(), pr.script_path.c_str());
    } else {
        std::fprintf(stderr, "plot: %s\n", pr.note.c_str());
    }
    return Status::ok();
}

Status run_bench(BenchFlags f) {
    raise_fd_limit();
    DSV4_ASSIGN_OR_RETURN(f.sweep.levels, parse_levels(f.levels));
    if (f.endpoint != "chat" && f.endpoint != "completions") {
        return invalid_argument("--endpoint must be chat or completions");
    }
    f.sweep.chat = f.endpoint == "chat";
    if (f.decode_heavy) f.sweep.ignore_eos = true;
    if (metric_value(IterationMetrics{}, f.metric) == std::nullopt) {
        return invalid_argument("--metric: unknown metric '{}'", f.metric);
    }

    PromptSourceOptions po;
    po.input_len = f.input_len > 0 ? f.input_len : (f.decode_heavy ? 16 : 128);
    po.token_id_min = f.token_id_min;
    po.token_id_max = f.token_id_max;
    if (f.dataset == "random-ids") {
        if (f.sweep.chat) {
            return invalid_argument(
                "random-ids prompts need --endpoint completions "
                "(chat messages are text; use random-words)");
        }
        po.kind = PromptKind::kRandomIds;
    } else if (f.dataset == "random-words") {
        po.kind = PromptKind::kRandomWords;
    } else {
        po.kind = PromptKind::kFile;
        po.path = f.dataset;
    }
    DSV4_ASSIGN_OR_RETURN(PromptSource prompts, PromptSource::create(po));

    std::vector<Target> targets;
    auto add_target = [&](const std::string& name, const std::string& url_text, const std::string& model) -> Status {
        Target t;
        t.name = name;
        DSV4_ASSIGN_OR_RETURN(t.url, parse_url(url_text));
        t.model = model;
        if (t.model.empty()) {
            auto m = discover_model(t.url);
            if (!m.is_ok()) return m.status().with_context("--model not given and " + url_text);
            t.model = m.value();
        }
        targets.push_back(std::move(t));
        return Status::ok();
    };
    const bool ab = !f.url_b.empty();
    DSV4_RETURN_IF_ERROR(add_target(ab ? "A" : "", f.url, f.model));
    if (ab) DSV4_RETURN_IF_ERROR(add_target("B", f.url_b, f.model_b.empty() ? f.model : f.model_b));

    RunInfo info = current_run_info();
    info.endpoint = f.endpoint;
    info.dataset = prompts.describe();
    info.label = f.label;
    info.max_tokens = f.sweep.max_tokens;
    info.ignore_eos = f.sweep.ignore_eos;
    info.seed = f.sweep.seed;
    std::optional<JsonlWriter> writer;
    if (!f.out.empty()) {
        DSV4_ASSIGN_OR_RETURN(JsonlWriter w, JsonlWriter::open(f.out));
        writer = std::move(w);
    }

    for (const Target& t : targets) {
        std::fprintf(stderr, "%starget %s model %s\n", t.name.empty() ? "" : ("[" + t.name + "] ").c_str(),
                     t.url.to_string().c_str(), t.model.c_str());
    }
    std::fprintf(stderr, "workload: %s endpoint, %s, max_tokens %d%s, %d iterations, seed %llu\n", f.endpoint.c_str(),
                 info.dataset.c_str(), f.sweep.max_tokens, f.sweep.ignore_eos ? " (ignore_eos)" : "",
                 f.sweep.iterations, static_cast<unsigned long long>(f.sweep.seed));

    ProgressBar bar(stderr, isatty(STDERR_FILENO) != 0);
    Status write_status;
    std::fputs(format_summary_header().c_str(), stdout);
    std::fflush(stdout);
    SweepHooks hooks;
    hooks.progress = f.no_progress ? nullptr : &bar;
    hooks.on_iteration = [&](const IterationMetrics& m) {
        std::fputs(format_iteration_line(m).c_str(), stderr);
        if (writer && write_status.is_ok()) {
            RunInfo ri = info;
            const Target& t = (m.config == "B") ? targets[1] : targets[0];
            ri.url = t.url.to_string();
            ri.model = t.model;
            write_status = writer->write(ri, m);
        }
    };
    hooks.on_level = [&](const std::vector<LevelSummary>& sums) {
        for (const auto& s : sums) std::fputs(format_summary_row(s).c_str(), stdout);
        std::fflush(stdout);
    };
    auto result = run_sweep(f.sweep, prompts, targets, hooks);
    std::fputs(format_summary_legend().c_str(), stdout);
    DSV4_RETURN_IF_ERROR(write_status);
    if (!result.is_ok()) return result.status();
    if (writer) std::fprintf(stderr, "records: %s\n", writer->path().c_str());

    std::map<std::string, std::string> names;
    for (const Target& t : targets) {
        names[t.name] = (t.name.empty() ? "" : t.name + ": ") + t.model + " @ " + t.url.to_string();
    }
    if (ab) {
        std::vector<IterationMetrics> a, b;
        for (const auto& m : result.value()) (m.config == "B" ? b : a).push_back(m);
        DSV4_ASSIGN_OR_RETURN(auto cmp, compare_levels(a, b, f.metric, f.confidence));
        std::fputs(("\n" + format_comparison(cmp, f.metric, names["A"], names["B"])).c_str(), stdout);
    }
    std::string plot = f.plot;
    if (plot.empty() && !f.out.empty()) plot = default_plot_path(f.out);
    if (!plot.empty() && plot != "none") {
        const std::string title = fmt::format("dsv4 bench: {} ({}, max_tokens {}) {} {}", targets[0].model,
                                              info.dataset, f.sweep.max_tokens, info.git_sha, info.date);
        DSV4_RETURN_IF_ERROR(draw_plot(plot, series_of(result.value(), names), title));
    }
    return Status::ok();
}

Status run_compare(const CompareFlags& f) {
    std::vector<IterationMetrics> a, b;
    std::string name_a, name_b;
    auto describe = [](const StoredRecord& r) {
        return fmt::format("{} @ {} ({}, {})", r.info.model, r.info.url, r.info.git_sha, r.info.date);
    };
    DSV4_ASSIGN_OR_RETURN(auto first, read_jsonl(f.files[0]));
    if (f.files.size() == 2) {
        DSV4_ASSIGN_OR_RETURN(auto second, read_jsonl(f.files[1]));
        for (const auto& r : first) a.push_back(r.m);
        for (const auto& r : second) b.push_back(r.m);
        name_a = f.files[0] + ": " + describe(first.front());
        name_b = f.files[1] + ": " + describe(second.front());
    } else {
        // One file from an --ab run holds both sides, tagged by "config".
        for (const auto& r : first) {
            if (r.m.config == "A") {
                if (a.empty()) name_a = "A: " + describe(r);
                a.push_back(r.m);
            } else if (r.m.config == "B") {
                if (b.empty()) name_b = "B: " + describe(r);
                b.push_back(r.m);
            }
        }
        if (a.empty() || b.empty()) {
            return invalid_argument(
                "{} is not an --ab run (needs config A and B records); "
                "pass two files to compare",
                f.files[0]);
        }
    }
    // Two files are two runs made at different times: no batch of one has a partner in the
    // other, so they are compared unpaired. One --ab file pairs its A and B batches.
    const Pairing pairing = f.files.size() == 2 ? Pairing::kUnpaired : Pairing::kAuto;
    DSV4_ASSIGN_OR_RETURN(auto cmp, compare_levels(a, b, f.metric, f.confidence, pairing));
    std::fputs(format_comparison(cmp, f.metric, name_a, name_b).c_str(), stdout);
    if (!f.plot.empty()) {
        for (auto& m : a) m.config = "A";
        for (auto& m : b) m.config = "B";
        std::vector<IterationMetrics> all = a;
        all.insert(all.end(), b.begin(), b.end());
        DSV4_RETURN_IF_ERROR(draw_plot(f.plot, series_of(all, {{"A", name_a}, {"B", name_b}}), "dsv4 bench compare"));
    }
    return Status::ok();
}

}  // namespace

Status run_multi_turn_cmd(const std::string& url_text, const bench::MultiTurnOptions& o, const std::string& out,
                          const std::string& label) {
    DSV4_ASSIGN_OR_RETURN(bench::Url url, bench::parse_url(url_text));
    std::printf(
        "multi-turn: %d conversations x %d turns, %d-token shared system prompt, %d-token user turns, "
        "%d-token answers, %s\n",
        o.conversations, o.turns, o.system_len, o.user_len, o.answer_len, url.to_string().c_str());
    DSV4_ASSIGN_OR_RETURN(auto turns, bench::run_multi_turn(url, o));
    std::printf("%5s %4s %4s %12s %12s %12s %12s %12s %9s %8s\n", "turn", "ok", "err", "TTFT med ms", "TTFT p90 ms",
                "prompt tok", "cached tok", "computed", "hit rate", "wall s");
    int64_t later_computed = 0, later_prompt = 0;
    std::vector<double> later_ttft;
    std::FILE* f = out.empty() ? nullptr : std::fopen(out.c_str(), "w");
    if (!out.empty() && !f) return error(StatusCode::kInternal, "cannot write {}", out);
    for (const auto& t : turns) {
        std::printf("%5d %4d %4d %12.1f %12.1f %12lld %12lld %12lld %8.1f%% %8.2f\n", t.turn, t.n_ok, t.n_errors,
                    t.ttft_ms.median, t.ttft_ms.p90, (long long)t.prompt_tokens, (long long)t.cached_tokens,
                    (long long)t.computed_tokens(), 100.0 * t.hit_rate(), t.wall_s);
        if (t.turn >= 2) {
            later_computed += t.computed_tokens();
            later_prompt += t.prompt_tokens;
            later_ttft.insert(later_ttft.end(), t.ttft_values_ms.begin(), t.ttft_values_ms.end());
        }
        if (f) {
            nlohmann::json j = {
                {"schema", "dsv4.bench.multiturn.v1"},
                {"label", label},
                {"url", url.to_string()},
                {"turn", t.turn},
                {"n_ok", t.n_ok},
                {"n_errors", t.n_errors},
                {"ttft_ms", {{"median", t.ttft_ms.median}, {"p90", t.ttft_ms.p90}, {"mean", t.ttft_ms.mean}}},
                {"prompt_tokens", t.prompt_tokens},
                {"cached_tokens", t.cached_tokens},
                {"computed_tokens", t.computed_tokens()},
                {"wall_s", t.wall_s},
                {"conversations", o.conversations},
                {"system_len", o.system_len},
                {"user_len", o.user_len},
                {"answer_len", o.answer_len}};
            std::fprintf(f, "%s\n", j.dump().c_str());
        }
    }
    if (f) std::fclose(f);
    const bench::Dist later = bench::summarize(later_ttft);
    std::printf("turns 2-%d: %lld of %lld prompt tokens computed (%.1f%%), TTFT median %.1f ms\n", o.turns,
                (long long)later_computed, (long long)later_prompt,
                later_prompt ? 100.0 * double(later_computed) / double(later_prompt) : 0.0, later.median);
    return Status::ok();
}

void register_bench(CLI::App& app, CommandContext& ctx) {
    auto* cmd =
        app.add_subcommand("bench", "Throughput benchmark of an OpenAI-compatible server (concurrency sweep, A/B)");
    auto f = std::make_shared<BenchFlags>();
    cmd->add_option("--url", f->url, "Server base URL (A in --ab mode)")->capture_default_str();
    cmd->add_option("--ab", f->url_b,
                    "Second server URL: per level, pairs of batches in ABBA order (A B, B A, A B, "
                    "...; an even --iterations cancels linear drift), then B/A per level from the "
                    "paired t test, Holm-corrected across levels");
    cmd->add_option("--model", f->model, "Model name (default: first id of GET /v1/models)");
    cmd->add_option("--model-b", f->model_b, "Model name for B (default: --model or ask B)");
    cmd->add_option("--endpoint", f->endpoint, "chat or completions")->capture_default_str();
    cmd->add_option("--dataset", f->dataset,
                    "Prompt file (ShareGPT .json, MT-Bench/HumanEval .jsonl[.gz]), "
                    "random-words, or random-ids (completions only)")
        ->capture_default_str();
    cmd->add_option("--input-len", f->input_len,
                    "Synthetic prompt length: tokens (random-ids) or words (default 128; 16 with "
                    "--decode-heavy)");
    cmd->add_option("--token-id-min", f->token_id_min, "random-ids: lowest id")->capture_default_str();
    cmd->add_option("--token-id-max", f->token_id_max, "random-ids: one past the highest id")->capture_default_str();
    cmd->add_flag("--decode-heavy", f->decode_heavy,
                  "Short synthetic prompt, output to --max-tokens (sets --ignore-eos)");
    cmd->add_flag("--ignore-eos", f->sweep.ignore_eos, "Ask the server to ignore EOS");
    cmd->add_option("--max-tokens", f->sweep.max_tokens, "Output tokens per request")->capture_default_str();
    cmd->add_option("--conc", f->levels, "Concurrency levels")->capture_default_str();
    cmd->add_option("--n", f->sweep.n, "Requests per measured batch (default: --n-mult x level)");
    cmd->add_option("--request-rate", f->sweep.request_rate,
                    "Open loop: requests/s arriving as a Poisson process, --conc capping those in flight "
                    "(0 = closed loop at --conc)");
    cmd->add_option("--n-mult", f->sweep.n_mult, "Requests per batch as a multiple of the level")
        ->capture_default_str();
    cmd->add_option("--n-min", f->sweep.n_min, "Lower bound on requests per batch with --n-mult")
        ->capture_default_str();
    cmd->add_option("--warmup", f->sweep.warmup,
                    "Warm-up requests per level and server (default: one wave = the level)");
    cmd->add_option("--iterations", f->sweep.iterations, "Measured batches per level (and side)")
        ->capture_default_str();
    cmd->add_option("--seed", f->sweep.seed, "Seed of the prompt draws")->capture_default_str();
    cmd->add_option("--temperature", f->sweep.temperature, "Sampling temperature")->capture_default_str();
    cmd->add_option("--timeout", f->sweep.timeout_s, "Per-request timeout, seconds")->capture_default_str();
    cmd->add_option("--out", f->out, "JSON-lines records (one per level, iteration and side)");
    cmd->add_option("--plot", f->plot, "Plot image (.svg or .png; default <out>.svg when --out is given; 'none')");
    cmd->add_option("--label", f->label, "Free-text label stored in every record");
    cmd->add_option("--metric", f->metric, "Metric for the A/B verdict")->capture_default_str();
    cmd->add_option("--confidence", f->confidence,
                    "1 - the family-wise error rate of the A/B verdicts over all levels (intervals "
                    "at the Bonferroni level)")
        ->capture_default_str();
    cmd->add_flag("--no-progress", f->no_progress, "No progress bar on stderr");

    auto* cmp = cmd->add_subcommand(
        "compare",
        "Compare two JSON-lines files (B/A per level, Welch, unpaired) or the A and B records of one "
        "--ab file (paired by ABBA pair); verdicts Holm-corrected across levels");
    auto cf = std::make_shared<CompareFlags>();
    cmp->add_option("files", cf->files, "A.jsonl B.jsonl, or one file from an --ab run")->required()->expected(1, 2);
    cmp->add_option("--metric", cf->metric, "Metric to compare")->capture_default_str();
    cmp->add_option("--confidence", cf->confidence, "1 - the family-wise error rate over all levels")
        ->capture_default_str();
    cmp->add_option("--plot", cf->plot, "Also draw both sides into this image");
    cmp->callback([&ctx, cf] {
        Status s = run_compare(*cf);
        if (!s.is_ok()) {
            std::fprintf(stderr, "dsv4 bench compare: %s\n", s.to_string().c_str());
            ctx.exit_code = 1;
        }
    });
    auto* mt = cmd->add_subcommand("multi-turn",
                                   "Multi-turn conversations as token ids (shared system prompt, history resent "
                                   "every turn): per-turn TTFT, cached and computed prompt tokens");
    auto mo = std::make_shared<bench::MultiTurnOptions>();
    auto mt_url = std::make_shared<std::string>("http://127.0.0.1:8000");
    auto mt_out = std::make_shared<std::string>();
    auto mt_label = std::make_shared<std::string>();
    mt->add_option("--url", *mt_url, "Server base URL")->capture_default_str();
    mt->add_option("--conversations", mo->conversations, "Concurrent conversations")->capture_default_str();
    mt->add_option("--turns", mo->turns, "Turns per conversation")->capture_default_str();
    mt->add_option("--system-len", mo->system_len, "Token ids of the shared system prompt")->capture_default_str();
    mt->add_option("--user-len", mo->user_len, "Token ids of each user turn")->capture_default_str();
    mt->add_option("--answer-len", mo->answer_len, "Output tokens of each answer")->capture_default_str();
    mt->add_option("--token-id-min", mo->id_min, "Lowest random id")->capture_default_str();
    mt->add_option("--token-id-max", mo->id_max, "One past the highest random id")->capture_default_str();
    mt->add_option("--temperature", mo->temperature, "Sampling temperature (seeded)")->capture_default_str();
    mt->add_option("--seed", mo->seed, "Seed of the ids")->capture_default_str();
    mt->add_option("--model", mo->model, "Model name (default: the server's first)");
    mt->add_option("--timeout", mo->timeout_s, "Per request, seconds")->capture_default_str();
    mt->add_option("--out", *mt_out, "JSON lines, one record per turn");
    mt->add_option("--label", *mt_label, "Free-text label stored in every record");
    mt->callback([&ctx, mo, mt_url, mt_out, mt_label] {
        Status s = run_multi_turn_cmd(*mt_url, *mo, *mt_out, *mt_label);
        if (!s.is_ok()) {
            std::fprintf(stderr, "dsv4 bench multi-turn: %s\n", s.to_string().c_str());
            ctx.exit_code = 1;
        }
    });
    auto* series = register_bench_series(*cmd, ctx);
    cmd->callback([&ctx, f, cmp, mt, series] {
        if (cmp->parsed() || mt->parsed() || series->parsed()) return;
        Status s = run_bench(*f);
        if (!s.is_ok()) {
            std::fprintf(stderr, "dsv4 bench: %s\n", s.to_string().c_str());
            ctx.exit_code = 1;
        }
    });
}

}  // namespace dsv4::cli
