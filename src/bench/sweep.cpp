// Sweep orchestration (see sweep.h). Seeds: every batch draws its prompts from
// mix_seed(seed, level, iteration) so a rerun with the same --seed sends the same requests,
// and warm-up batches use a separate stream so they never repeat measured prompts.
#include "bench/sweep.h"

#include <nlohmann/json.hpp>

namespace dsv4::bench {

std::string build_request_body(const Prompt& p, const std::string& model, const SweepOptions& opt) {
    nlohmann::json j;
    j["model"] = model;
    if (opt.chat) {
        j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", p.text}}});
    } else if (!p.ids.empty()) {
        j["prompt"] = p.ids;
    } else {
        j["prompt"] = p.text;
    }
    j["max_tokens"] = opt.max_tokens;
    j["temperature"] = opt.temperature;
    j["stream"] = true;
    j["stream_options"] = {{"include_usage", true}};
    if (opt.ignore_eos) j["ignore_eos"] = true;
    return j.dump();
}

std::vector<StreamJob> build_jobs(const PromptSource& prompts, const std::string& model, const SweepOptions& opt,
                                  uint64_t draw_seed, int n) {
    std::vector<StreamJob> jobs;
    for (const Prompt& p : prompts.draw(draw_seed, n)) {
        jobs.push_back(StreamJob{.body = build_request_body(p, model, opt), .expected_prompt_tokens = p.known_tokens});
    }
    return jobs;
}

Result<std::string> discover_model(const Url& url, double timeout_s) {
    DSV4_ASSIGN_OR_RETURN(HttpResponse r, http_get(url, "/v1/models", timeout_s));
    if (r.status != 200) {
        return error(StatusCode::kUnavailable, "GET /v1/models: HTTP {}: {}", r.status, r.body.substr(0, 200));
    }
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].is_object() &&
        j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
        return j["data"][0]["id"].get<std::string>();
    }
    return error(StatusCode::kDataLoss, "GET /v1/models: no data[0].id in {}", r.body.substr(0, 200));
}

namespace {

Result<std::vector<RequestRecord>> run_batch(const SweepOptions& opt, const Target& t, std::vector<StreamJob> jobs,
                                             int level, const std::string& label, ProgressBar* progress,
                                             uint64_t arrival_seed) {
    BatchOptions b{.url = t.url,
                   .path = opt.chat ? "/v1/chat/completions" : "/v1/completions",
                   .concurrency = level,
                   .timeout_s = opt.timeout_s,
                   .request_rate = opt.request_rate,
                   .arrival_seed = arrival_seed};
    const int total = static_cast<int>(jobs.size());
    ProgressFn fn = [&](int done, int errors) {
        if (progress) progress->update(label, done, total, errors);
    };
    if (progress) progress->update(label, 0, total, 0);
    auto r = run_streaming_batch(b, jobs, fn);
    if (progress) progress->clear();
    return r;
}

}  // namespace

int abba_position(int pair, int target) { return (pair % 2 == 0) ? target : 1 - target; }

Result<std::vector<IterationMetrics>> run_sweep(const SweepOptions& opt, const PromptSource& prompts,
                                                const std::vector<Target>& targets, const SweepHooks& hooks) {
    if (targets.empty()) return invalid_argument("no target to benchmark");
    if (opt.iterations < 1) return invalid_argument("--iterations must be >= 1");
    std::vector<IterationMetrics> all;
    constexpr uint64_t kWarmupStream = 0xFFFF'FFFF;
    for (int level : opt.levels) {
        if (level < 1) return invalid_argument("concurrency levels must be >= 1 (got {})", level);
        const int n = opt.requests_for(level);
        const int n_warm = opt.warmup >= 0 ? opt.warmup : level;
        std::vector<std::vector<IterationMetrics>> per_target(targets.size());
        for (const Target& t : targets) {
            if (n_warm == 0) continue;
            auto jobs = build_jobs(prompts, t.model, opt, mix_seed(opt.seed, level, kWarmupStream), n_warm);
            const std::string label =
                fmt::format("{}conc {} warm-up", t.name.empty() ? "" : "[" + t.name + "] ", level);
            DSV4_RETURN_IF_ERROR(run_batch(opt, t, std::move(jobs), level, label, hooks.progress,
                                           mix_seed(opt.seed, level, kWarmupStream))
                                     .status());
        }
        const bool ab = targets.size() == 2;
        for (int it = 0; it < opt.iterations; ++it) {
            for (size_t slot = 0; slot < targets.size(); ++slot) {
                // The ABBA swap is its own inverse: slot k of a pair runs the target whose
                // position is k.
                const size_t ti = ab ? static_cast<size_t>(abba_position(it, static_cast<int>(slot))) : slot;
                const Target& t = targets[ti];
                auto jobs = build_jobs(prompts, t.model, opt, mix_seed(opt.seed, level, it), n);
                const std::string label =
                    opt.request_rate > 0
                        ? fmt::format("{}rate {}/s cap {} iter {}/{}", t.name.empty() ? "" : "[" + t.name + "] ",
                                      opt.request_rate, level, it + 1, opt.iterations)
                        : fmt::format("{}conc {} iter {}/{}", t.name.empty() ? "" : "[" + t.name + "] ", level, it + 1,
                                      opt.iterations);
                DSV4_ASSIGN_OR_RETURN(auto records, run_batch(opt, t, std::move(jobs), level, label, hooks.progress,
                                                              mix_seed(opt.seed, level, it)));
                IterationMetrics m = compute_iteration(records);
                m.config = t.name;
                m.level = level;
                m.iteration = it;
                if (ab) {
                    m.pair = it;
                    m.pair_position = static_cast<int>(slot);
                }
                if (hooks.on_iteration) hooks.on_iteration(m);
                all.push_back(m);
                per_target[ti].push_back(m);
                if (m.n_ok == 0) {
                    return error(StatusCode::kUnavailable, "{}: all {} requests failed: {}", label, m.n_requests,
                                 m.error_samples.empty() ? "?" : m.error_samples.front());
                }
            }
        }
        if (hooks.on_level) {
            std::vector<LevelSummary> sums;
            for (const auto& v : per_target) sums.push_back(summarize_level(v));
            hooks.on_level(sums);
        }
    }
    return all;
}

}  // namespace dsv4::bench
