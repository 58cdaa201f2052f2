// Benchmark metrics: one IterationMetrics per (configuration, concurrency level, iteration)
// computed from the request records of that batch, and the across-iteration summary (mean,
// 95% CI, coefficient of variation) of any scalar metric.
//
// Definitions (all over successful requests; times from the client's clock):
//   duration      first request issued -> last request finished (the batch wall time)
//   output tok/s  sum of output tokens / duration; total tok/s adds prompt tokens
//   TTFT          request issued -> first chunk carrying text
//   TPOT          (E2E - TTFT) / (output tokens - 1), per request
//   ITL           gaps between consecutive text chunks (a chunk may carry several tokens)
//   tok/s per user  mean over requests of (output tokens - 1) / (E2E - TTFT): decode speed
//                   one user sees once the first token has arrived
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/sse.h"
#include "bench/stats.h"

namespace dsv4::bench {

struct IterationMetrics {
    std::string config;  // "A", "B", or "" for a single-configuration run
    int level = 0;       // concurrency
    int iteration = 0;
    // A/B runs: the pair this batch belongs to within its level (A and B batches of one
    // iteration form pair `iteration`, run back to back in ABBA order) and its position in the
    // pair (0: ran first, 1: second). -1 in single-target runs and in records written before
    // pairs were recorded; `bench compare` then falls back to the unpaired test.
    int pair = -1, pair_position = -1;
    int n_requests = 0, n_ok = 0, n_errors = 0;
    // Of the errors: answered 429 or 503 (the server refused work it had no room for), those of them
    // without a Retry-After header, and requests that got no HTTP answer at all (connection refused
    // or reset, timeout). An overload run wants n_ok + n_refused == n_requests.
    int n_refused = 0, n_refused_no_retry_after = 0, n_unanswered = 0;
    double duration_s = 0;
    int64_t input_tokens = 0, output_tokens = 0;
    bool input_tokens_known = true;  // false when some prompt length was not reported
    double output_tok_s = 0, total_tok_s = 0, req_s = 0, tok_s_per_user = 0;
    Dist ttft_ms, tpot_ms, itl_ms, e2e_ms;
    std::vector<std::string> error_samples;  // the first few distinct error messages
};

IterationMetrics compute_iteration(const std::vector<RequestRecord>& records);

// Scalar metric by name: "output_tok_s", "total_tok_s", "req_s", "tok_s_per_user",
// "duration_s", "n_errors", or "<dist>.<stat>" with dist in ttft_ms, tpot_ms, itl_ms, e2e_ms
// and stat in mean, median, p90, p99.
std::optional<double> metric_value(const IterationMetrics& m, std::string_view name);
bool metric_higher_is_better(std::string_view name);
const std::vector<std::string>& known_metric_names();

// Across-iteration summary of one level (one configuration).
struct LevelSummary {
    std::string config;
    int level = 0;
    int iterations = 0;
    int n_requests = 0;  // per iteration
    int n_errors = 0;    // summed over iterations
    MeanCi output_tok_s, total_tok_s, req_s, tok_s_per_user;
    MeanCi ttft_median_ms, ttft_p99_ms, tpot_median_ms, itl_median_ms, itl_p99_ms, e2e_median_ms;
};
LevelSummary summarize_level(const std::vector<IterationMetrics>& iterations);

}  // namespace dsv4::bench
