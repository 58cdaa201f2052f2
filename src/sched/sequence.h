// Sequence: one generation stream (one of a request's n choices) as the engine thread sees it.
// Owned by the Scheduler; only the engine thread touches it. `tokens` holds prompt + output,
// so preemption by recompute only has to reset `n_computed` and the pages.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/forward_batch.h"
#include "sample/sampler.h"
#include "sample/token_constraint.h"
#include "sample/sampling_params.h"

namespace dsv4 {

using Clock = std::chrono::steady_clock;

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

// What the engine tells the front end about one choice of a request. Delivered on the engine
// thread: implementations must only hand the event off (post to an I/O thread), never block.
struct SeqEvent {
    int choice = 0;
    std::vector<int32_t> tokens;         // new output tokens (EOS / stop ids not included)
    std::vector<SampleResult> logprobs;  // one per token in `tokens` when requested
    FinishReason finish = FinishReason::kNone;
    int32_t stop_token = -1;  // the stop id or EOS that finished it, if any
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;  // output so far, including a final EOS / stop id
    int64_t cached_tokens = 0;      // prompt tokens taken from the prefix cache
    std::string error;              // finish == kError
};

class RequestSink {
public:
    virtual ~RequestSink() = default;
    virtual void on_event(SeqEvent&& ev) = 0;
};

struct Sequence {
    int64_t seq_id = 0;
    uint64_t request_id = 0;
    int choice = 0;
    std::vector<int32_t> tokens;  // prompt followed by the output so far
    int64_t n_prompt = 0;
    int64_t n_computed = 0;      // leading tokens whose state is in the pages
    std::vector<int32_t> pages;  // KvLayout order: state pages, then token pages
    SamplingParams params;
    uint64_t seed = 0;
    PenaltyState penalties;
    std::shared_ptr<RequestSink> sink;
    int64_t n_preemptions = 0;
    Clock::time_point arrival{};
    Clock::time_point first_token{};
    bool admitted_once = false;
    // Overlapped scheduling: the output token of a launched step is appended as kPendingToken
    // (runtime/forward_batch.h) and filled in when that step is collected. await_output: the next
    // step may not include this sequence before then (its token is sampled on the host, or it may
    // finish with it); otherwise the next step can decode the pending token, which the runner fills in.
    bool await_output = false;
    // Prefix caching (sched/prefix_cache.h).
    uint64_t cache_salt = 0;        // blocks are shared only between requests with the same salt
    int64_t cached_tokens = 0;      // prompt tokens taken from the cache when first admitted
    std::vector<int32_t> snapshot;  // own copy of the state pages after snapshot_tokens (or empty)
    int64_t snapshot_tokens = 0;    // last block boundary a snapshot was taken or restored at
    bool prompt_cached = false;     // its prompt's blocks have been offered to the cache
    bool hold_for_prefix = false;   // choice > 0: admitted once choice 0 has cached the prompt
    // Constrained decoding (structured output): its rows are sampled on the host through
    // constraint->mask once active; it becomes active when constraint_after is sampled (-1: from
    // the start; e.g. the end of the reasoning in thinking mode).
    std::unique_ptr<TokenConstraint> constraint;
    int32_t constraint_after = -1;
    bool constraint_active = false;
    // Speculative decoding (SchedulerConfig::speculative_tokens): its decode steps are verify chunks
    // and every chunk keeps the runner's MTP state current. Fixed at admission: off for requests
    // with logprobs or a constraint.
    bool speculate = false;

    int64_t n_output() const { return int64_t(tokens.size()) - n_prompt; }
    // Output tokens known on the host (without trailing kPendingToken entries).
    int64_t n_resolved_output() const {
        int64_t n = int64_t(tokens.size());
        while (n > n_prompt && tokens[size_t(n - 1)] == kPendingToken) --n;
        return n - n_prompt;
    }
    int64_t n_pending() const { return int64_t(tokens.size()) - n_computed; }
};

}  // namespace dsv4
