// ModelRunner: the engine's view of a model on some backend. The serving engine (one thread)
// calls forward() once per step; state of each sequence lives in the pages named by its page
// table, so the runner itself keeps no per-sequence state that the scheduler does not know of.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "runtime/forward_batch.h"
#include "model/kv_layout.h"

namespace dsv4 {

// Result of ModelRunner::forward_sampled: per want_logits sequence, in batch order, either one
// logits row (SeqChunk::sample == kNone) or one sampled token id (any other mode).
struct StepOutput {
    std::vector<std::vector<float>> logits;  // [n rows with sample kNone][vocab_size] f32
    std::vector<int32_t> tokens;             // [n rows with sample != kNone] ids in [0, vocab)
    // Aligned with tokens; filled for kFull rows with params.logprobs >= 0 (else 0 / empty): the
    // chosen token's logprob and the params.logprobs most likely (token, logprob), best first.
    std::vector<float> logprobs;
    std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
    // Per verify chunk (SeqChunk::draft_tokens > 0), in batch order: its k draft tokens. Its k + 1
    // rows are in `logits` (or, sampled kGreedy, in `tokens`), in position order, where its one row
    // would be.
    std::vector<std::vector<int32_t>> drafts;
};

class ModelRunner {
public:
    virtual ~ModelRunner() = default;
    virtual const ModelConfig& config() const = 0;
    virtual const KvLayout& kv_layout() const = 0;
    virtual int64_t n_pages() const = 0;  // pages in the pool
    // Positions one sequence may reach (prompt + output); the engine rejects longer requests at
    // admission. Runners with no limit of their own beyond the page pool keep the default.
    virtual int64_t max_positions() const { return INT64_MAX; }

    // Runs one step. For every seq with want_logits, appends one row of vocab_size f32 logits
    // (for its last token) to `logits`, in batch order. Errors: a token id outside the vocabulary,
    // a page table too short for start_pos + n_tokens.
    // SeqChunk::sample is ignored here: every want_logits sequence gets logits.
    virtual Status forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) = 0;

    // The most draft tokens a verify chunk may carry (SeqChunk::draft_tokens; 0: no speculative
    // decoding), fixed when the runner is built (its state layout holds that many).
    virtual int max_draft_tokens() const { return 0; }

    // Device-side sampling modes this runner honours in forward_sampled (kNone always).
    virtual bool supports_device_sample(DeviceSample mode) const { return mode == DeviceSample::kNone; }

    // Runs one step like forward(), but a want_logits sequence whose `sample` is not kNone gets a
    // token id in out.tokens instead of a logits row in out.logits (both in batch order; `out` is
    // cleared first). Default (host-path runners): forward(), rejecting any device request.
    // Errors: those of forward(); a mode that supports_device_sample() denies (kInvalidArgument).
    virtual Status forward_sampled(const ForwardBatch& batch, StepOutput& out) {
        out.logits.clear();
        out.tokens.clear();
        out.logprobs.clear();
        out.top_logprobs.clear();
        out.drafts.clear();
        for (const auto& c : batch.seqs) {
            if (c.want_logits && c.sample != DeviceSample::kNone)
                return invalid_argument("sequence {}: this runner does not sample on the device", c.seq_id);
            if (c.draft_tokens > 0 || c.mtp)
                return invalid_argument("sequence {}: this runner has no speculative decoding", c.seq_id);
        }
        return forward(batch, out.logits);
    }

    // Overlapped stepping (the engine's overlap scheduler, EngineConfig::overlap): launch() submits
    // a step and returns, collect() waits for the oldest launched step and returns its output as
    // forward_sampled() would. At most two steps are launched and not collected, so the host can
    // plan and launch step N+1 while step N runs. A chunk token kPendingToken stands for the token
    // sampled for the same seq_id as a device-sampled row (sample != kNone) of the step launched
    // just before (forward_batch.h). `batch` is read during launch() only.
    // Default: runs forward_sampled() inside launch() (no overlap, same results), substituting
    // pending tokens from that step's output (and counting them in kFull rows' penalty lists, as
    // the CUDA runner's sampler does on the device). Errors of launch() (the step is then not in flight):
    // a pending token without such a row (kFailedPrecondition), a third step in flight, invalid
    // input found before the device work is queued. The step's own errors come from collect(),
    // which also fails with nothing launched (kFailedPrecondition).
    virtual Status launch(const ForwardBatch& batch);
    virtual Status collect(StepOutput& out);
    // True when launch() returns before the step has run on the device, so host work between
    // launch() and collect() overlaps the step (the engine only overlaps such runners).
    virtual bool launch_is_async() const { return false; }

private:
    // The default launch()/collect(): finished steps not collected yet, and the tokens the last
    // launched step sampled per seq_id (its device-sampled rows).
    struct DoneStep {
        Status status;
        StepOutput out;
    };
    std::deque<DoneStep> done_;
    std::unordered_map<int64_t, int32_t> last_sampled_;
};

// Fills `resolved` with `batch` where every kPendingToken of a chunk is replaced by sampled[seq_id]
// (the chunks' token spans then point into `storage`). Errors: a pending token of a sequence that
// `sampled` lacks (kFailedPrecondition, naming the sequence).
Status resolve_pending_tokens(const ForwardBatch& batch, const std::unordered_map<int64_t, int32_t>& sampled,
                              ForwardBatch& resolved, std::vector<int32_t>& storage);

// A kFull row whose input token was pending: its penalty list (built on the host before that token
// was known) gets the token counted as the host sampler would count it (seen for the repetition
// penalty, one more occurrence for presence / frequency), in its entry or as a new one. The list
// is copied into `storage`, which p.penalty_tokens then views. No-op without those penalties.
void count_pending_token(DeviceSampleParams& p, int32_t token, std::vector<PenaltyToken>& storage);

}  // namespace dsv4
