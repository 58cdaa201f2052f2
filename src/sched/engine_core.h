// EngineCore: one engine step, single-threaded: schedule, build the ForwardBatch, forward,
// sample, commit, notify. Tests drive it directly (explicit chunk sizes, page layouts, batch
// composition); Engine (engine.h) runs it on its own thread behind a queue.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/model_runner.h"
#include "sample/sampling_params.h"
#include "sched/engine_stats.h"
#include "sched/page_allocator.h"
#include "sched/scheduler.h"
#include "sched/sequence.h"

namespace dsv4 {

struct EngineConfig {
    SchedulerConfig sched;
    int max_queued = 256;            // waiting requests before submit answers "busy"
    int64_t max_context = 0;         // prompt + output tokens; 0 = model max_position_embeddings
    uint64_t page_shuffle_seed = 0;  // != 0: permute physical pages (layout-invariance tests)
    uint64_t default_seed = 0;       // seeds requests without one (0 = from std::random_device)
    bool device_sampling = true;     // let a runner that can (ModelRunner::supports_device_sample)
                                     // pick plain-greedy tokens itself instead of returning logits
};

struct GenRequest {
    uint64_t id = 0;
    std::vector<int32_t> prompt;
    SamplingParams params;
    int n = 1;                        // independent choices
    std::shared_ptr<RequestSink> sink;
    Clock::time_point arrival = Clock::now();
};

struct StepStats {
    int64_t n_seqs = 0;
    int64_t n_prefill_tokens = 0;
    int64_t n_decode_tokens = 0;
    int64_t n_preempted = 0;
    int64_t n_device_sampled = 0;  // tokens the runner sampled itself (no logits row came back)
    int64_t schedule_us = 0;
    int64_t forward_us = 0;
    int64_t sample_us = 0;
};

class EngineCore {
public:
    EngineCore(ModelRunner& runner, EngineConfig cfg, EngineStats& stats);

    // Checks a request against the model and the pool; safe to call from any thread.
    Status validate(const GenRequest& req) const;
    Status add(GenRequest req);
    void abort(uint64_t request_id);
    void abort_all(const std::string& why);
    StepStats step();
    bool has_work() const { return sched_.has_work(); }
    void publish_stats();

    int64_t max_context() const { return max_context_; }
    const ModelConfig& model_config() const { return runner_.config(); }
    const Scheduler& scheduler() const { return sched_; }
    const PageAllocator& pages() const { return pages_; }

private:
    void finish(Sequence* seq, FinishReason why, SeqEvent ev);
    void fail(Sequence* seq, const std::string& why);

    ModelRunner& runner_;
    EngineConfig cfg_;
    EngineStats& stats_;
    int64_t max_context_;
    PageAllocator pages_;
    Scheduler sched_;
    int64_t next_seq_id_ = 1;
    uint64_t seed_base_;
    uint64_t n_seeded_ = 0;
};

}  // namespace dsv4
