// The concurrency sweep: for each level, warm-up requests, then `iterations` measured
// batches of n requests with `level` in flight. With two targets (A/B mode) each iteration is
// a pair of batches, one per side, with identical prompts, and the pairs alternate their order
// (ABBA): A B, B A, A B, B A, ... within each level. A pair's B/A then differences out the
// machine's state at that time, and over each block of two pairs a linear drift (thermal,
// other tenants) adds as much to A as to B, so it cancels from the mean of the pair ratios
// instead of favouring the side that always runs second (use an even --iterations).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/http_client.h"
#include "bench/metrics.h"
#include "bench/prompts.h"
#include "bench/report.h"

namespace dsv4::bench {

struct Target {
    std::string name;  // "A", "B", or "" for a plain run
    Url url;
    std::string model;  // sent in every request
};

struct SweepOptions {
    std::vector<int> levels = {1, 8, 32, 64, 128, 256, 512};
    int n = 0;  // requests per measured batch; 0: max(n_min, n_mult * level)
    int n_mult = 4;
    int n_min = 8;
    int warmup = -1;  // warm-up requests per level and target; -1: one wave (= level)
    int iterations = 4;
    bool chat = true;  // /v1/chat/completions, else /v1/completions
    int max_tokens = 256;
    bool ignore_eos = false;
    double temperature = 0;
    uint64_t seed = 0;
    double timeout_s = 600;
    // > 0: open loop at this many requests/s (Poisson arrivals), the level capping requests in
    // flight (BatchOptions::request_rate); 0: closed loop at the level's concurrency.
    double request_rate = 0;

    int requests_for(int level) const { return n > 0 ? n : std::max(n_min, n_mult * level); }
};

// JSON body of one streaming request (exposed for tests).
std::string build_request_body(const Prompt& p, const std::string& model, const SweepOptions& opt);
// Builds the jobs of one batch from a seeded draw.
std::vector<StreamJob> build_jobs(const PromptSource& prompts, const std::string& model, const SweepOptions& opt,
                                  uint64_t draw_seed, int n);

// The first model id listed by GET /v1/models.
Result<std::string> discover_model(const Url& url, double timeout_s = 10);

struct SweepHooks {
    std::function<void(const IterationMetrics&)> on_iteration;       // after each measured batch
    std::function<void(const std::vector<LevelSummary>&)> on_level;  // one summary per target
    ProgressBar* progress = nullptr;
};

// The position of target `target` (0 = A, 1 = B) within pair `pair` in ABBA order: A runs
// first in even pairs, B in odd ones.
int abba_position(int pair, int target);

// Runs the sweep; returns every measured iteration (A/B runs: with pair and pair_position set). Stops with an error
// when every request of a measured batch failed (a wrong URL or model should not take the whole sweep's time).
Result<std::vector<IterationMetrics>> run_sweep(const SweepOptions& opt, const PromptSource& prompts,
                                                const std::vector<Target>& targets, const SweepHooks& hooks);

}  // namespace dsv4::bench
