// EngineStats: counters and histograms the engine thread publishes after every step and the
// HTTP threads read for /metrics and /health. Counters are atomics; histograms take a mutex
// (observed a few times per request, read once per scrape).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace dsv4 {

class Histogram {
public:
    explicit Histogram(std::vector<double> upper_bounds);
    void observe(double v);
    struct Snapshot {
        std::vector<double> bounds;    // upper bounds, ascending (+Inf implied)
        std::vector<uint64_t> counts;  // cumulative count per bound, then the +Inf count
        double sum = 0.0;
        uint64_t count = 0;
    };
    Snapshot snapshot() const;

private:
    mutable std::mutex mu_;
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket (not cumulative), last is +Inf
    double sum_ = 0.0;
    uint64_t count_ = 0;
};

// Steady-clock time in microseconds (EngineStats::progress_us).
inline int64_t steady_now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

struct EngineStats {
    std::atomic<int64_t> running_requests{0};
    std::atomic<int64_t> waiting_requests{0};
    std::atomic<int64_t> running_seqs{0};
    std::atomic<int64_t> waiting_seqs{0};
    std::atomic<int64_t> pages_total{0};
    std::atomic<int64_t> pages_used{0};
    std::atomic<int64_t> pages_free{0};
    std::atomic<int64_t> preemptions_total{0};
    std::atomic<int64_t> prompt_tokens_total{0};
    std::atomic<int64_t> generated_tokens_total{0};
    std::atomic<int64_t> requests_finished_total{0};
    std::atomic<int64_t> requests_aborted_total{0};
    std::atomic<int64_t> requests_rejected_total{0};
    std::atomic<int64_t> steps_total{0};
    std::atomic<int64_t> step_prefill_tokens_total{0};
    std::atomic<int64_t> step_decode_tokens_total{0};
    // Speculative decoding: verify chunks, their draft tokens, and of those the accepted ones (the
    // mean accept length, tokens out per verify chunk, is 1 + accepted / verify chunks).
    std::atomic<int64_t> spec_verify_chunks_total{0};
    std::atomic<int64_t> spec_draft_tokens_total{0};
    std::atomic<int64_t> spec_accepted_tokens_total{0};
    // Last step, for the benchmark and logs.
    std::atomic<int64_t> last_step_seqs{0};
    std::atomic<int64_t> last_step_prefill_tokens{0};
    std::atomic<int64_t> last_step_decode_tokens{0};
    std::atomic<int64_t> last_step_forward_us{0};
    std::atomic<int64_t> last_step_total_us{0};
    // Engine thread time blocked waiting for launched steps (the device busy, the host idle) and
    // the rest of its stepping time (scheduling, launching, sampling, events): with overlapped
    // scheduling the latter runs while the device works.
    std::atomic<int64_t> engine_wait_us_total{0};
    std::atomic<int64_t> engine_busy_us_total{0};
    std::atomic<int64_t> overlapped_steps_total{0};  // steps launched while the previous one ran
    // Prefix cache (sched/prefix_cache.h): prompt tokens looked up / found cached at admission,
    // blocks dropped for room, and what the cache holds now. Idle (no request), pages_used equals
    // prefix_cache_pages: every other page is back in the pool.
    std::atomic<int64_t> prefix_cache_queried_tokens_total{0};
    std::atomic<int64_t> prefix_cache_hit_tokens_total{0};
    std::atomic<int64_t> prefix_cache_evicted_blocks_total{0};
    std::atomic<int64_t> prefix_cache_blocks{0};
    std::atomic<int64_t> prefix_cache_pages{0};
    // Steady-clock microseconds of the engine's last sign of progress: the end of a step or of an
    // inbox pass, or a submit that found the engine idle (so an idle period is not a stall). With
    // requests pending and this far in the past, the engine is stalled (GET /health answers 503).
    std::atomic<int64_t> progress_us{0};
    // 1 once the engine failed for good (EngineCore::fatal: the device was lost); /health answers 503.
    std::atomic<int64_t> engine_failed{0};

    Histogram ttft_s{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
    Histogram tpot_s{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
    Histogram step_s{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
};

}  // namespace dsv4
