// EngineCore: one engine step, single-threaded: schedule, build the ForwardBatch, launch, collect,
// sample, commit, notify; with overlap (EngineConfig::overlap) the next step is launched before
// the previous one is collected. Tests drive it directly (explicit chunk sizes, page layouts, batch
// composition); Engine (engine.h) runs it on its own thread behind a queue.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
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
    // Overlapped scheduling: plan and launch step N+1 while step N runs, so that scheduling, batch
    // building and the previous step's outputs (events, finishes) leave the step's critical path.
    // kAuto: when the runner's launch() is asynchronous (ModelRunner::launch_is_async); kAlways
    // also with a synchronous runner (tests of the overlapped bookkeeping); kOff: launch, then
    // collect, each step. Outputs are the same in every mode.
    enum class Overlap { kOff, kAuto, kAlways };
    Overlap overlap = Overlap::kAuto;
    // SchedulerConfig::prefix_cache (off here; `dsv4 serve` turns it on unless --no-prefix-cache).
};

struct GenRequest {
    uint64_t id = 0;
    std::vector<int32_t> prompt;
    SamplingParams params;
    int n = 1;  // independent choices
    std::shared_ptr<RequestSink> sink;
    Clock::time_point arrival = Clock::now();
    uint64_t cache_salt = 0;  // prefix-cache namespace (hash of the request's cache_salt; 0: shared)
    // Constrained decoding: each choice gets a clone; active from the start, or once
    // constraint_after is sampled (>= 0). Constrained rows are sampled on the host.
    std::shared_ptr<const TokenConstraint> constraint{};
    int32_t constraint_after = -1;
};

// One call of EngineCore::step(): the step it launched (n_seqs .. n_preempted) and the step(s) it
// collected (n_collected, n_device_sampled). Without overlap both are the same step.
struct StepStats {
    int64_t n_seqs = 0;
    int64_t n_prefill_tokens = 0;
    int64_t n_decode_tokens = 0;
    int64_t n_preempted = 0;
    int64_t n_collected = 0;       // launched steps whose output this call took in
    int64_t n_device_sampled = 0;  // tokens the runner sampled itself (no logits row came back)
    int64_t schedule_us = 0;       // planning and batch building
    int64_t launch_us = 0;         // ModelRunner::launch (the whole step for a synchronous runner)
    int64_t wait_us = 0;           // blocked in ModelRunner::collect (the device still running)
    int64_t sample_us = 0;         // host sampling, token commit and events of the collected rows
};

class EngineCore {
public:
    EngineCore(ModelRunner& runner, EngineConfig cfg, EngineStats& stats);

    // Checks a request against the model and the pool; safe to call from any thread.
    Status validate(const GenRequest& req) const;
    // Queues the request's choices. Errors: those of validate(); kUnavailable once fatal().
    Status add(GenRequest req);
    void abort(uint64_t request_id);
    void abort_all(const std::string& why);
    // Drops every cached prefix block (blocks running sequences use stay theirs until they end).
    void flush_prefix_cache();
    // Schedules and launches one step; collects the previous one (overlap) or this one (else).
    StepStats step();
    bool has_work() const { return fatal_.is_ok() && (sched_.has_work() || !inflight_.empty()); }
    bool overlapping() const { return overlap_; }
    // Non-ok (kDeviceLost) once the runner reported an unrecoverable device error: the failed step's
    // sequences got "model step failed: ..." and every other running, waiting or in-flight one an
    // error naming the fault; add() refuses new requests and step() does nothing. For good: the
    // device context cannot be reused, so the process must restart (issue 21).
    const Status& fatal() const { return fatal_; }
    // Runs on the stepping thread the moment fatal() turns non-ok, before any error event is sent.
    void set_fatal_hook(std::function<void()> fn) { fatal_hook_ = std::move(fn); }
    void publish_stats();

    int64_t max_context() const { return max_context_; }
    const ModelConfig& model_config() const { return runner_.config(); }
    const Scheduler& scheduler() const { return sched_; }
    const PageAllocator& pages() const { return pages_; }

private:
    // A launched step not collected yet. Chunks' Sequence pointers are checked with
    // Scheduler::alive before use (a sequence may finish or be aborted meanwhile).
    struct InFlight {
        StepPlan plan;
        std::vector<int64_t> seq_id;     // per chunk
        std::vector<DeviceSample> mode;  // per chunk (want_logits rows)
        std::vector<int64_t> out_at;     // per chunk: index in seq->tokens of its pending output, or -1
        std::vector<int> drafts;         // per chunk: ScheduledChunk::draft_tokens
        int64_t n_host_rows = 0, n_dev_rows = 0;
    };
    DeviceSample row_mode(const Sequence* seq, const SampleContext& ctx) const;
    SampleContext sample_context(const Sequence* seq, int64_t position) const;
    void launch_plan(StepPlan plan, StepStats& st);
    void collect_oldest(StepStats& st);
    void drain_inflight();
    // Commits one sampled token at seq->tokens[at] (appended when at is the end) and sends it;
    // false when the sequence finished with it (seq is gone then).
    bool emit(Sequence* seq, int64_t at, SampleResult res);
    void finish(Sequence* seq, FinishReason why, SeqEvent ev);
    void fail(Sequence* seq, const std::string& why);
    // A step's error: kDeviceLost makes the engine fail for good (fatal(); true, once), anything
    // else only the step. Then on_fatal_error ends every other sequence.
    bool mark_fatal(const Status& s);
    void on_fatal_error(const Status& s);

    ModelRunner& runner_;
    EngineConfig cfg_;
    EngineStats& stats_;
    int64_t max_context_;
    PageAllocator pages_;
    Scheduler sched_;
    int64_t next_seq_id_ = 1;
    uint64_t seed_base_;
    uint64_t n_seeded_ = 0;
    bool overlap_ = false;
    std::deque<InFlight> inflight_;
    Status fatal_;
    std::function<void()> fatal_hook_;
};

}  // namespace dsv4
