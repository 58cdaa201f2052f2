// ModelRunner: the engine's view of a model on some backend. The serving engine (one thread)
// calls forward() once per step; state of each sequence lives in the pages named by its page
// table, so the runner itself keeps no per-sequence state that the scheduler does not know of.
#pragma once

#include <cstdint>
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
};

class ModelRunner {
public:
    virtual ~ModelRunner() = default;
    virtual const ModelConfig& config() const = 0;
    virtual const KvLayout& kv_layout() const = 0;
    virtual int64_t n_pages() const = 0;   // pages in the pool
    // Positions one sequence may reach (prompt + output); the engine rejects longer requests at
    // admission. Runners with no limit of their own beyond the page pool keep the default.
    virtual int64_t max_positions() const { return INT64_MAX; }

    // Runs one step. For every seq with want_logits, appends one row of vocab_size f32 logits
    // (for its last token) to `logits`, in batch order. Errors: a token id outside the vocabulary,
    // a page table too short for start_pos + n_tokens.
    // SeqChunk::sample is ignored here: every want_logits sequence gets logits.
    virtual Status forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) = 0;

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
        for (const auto& c : batch.seqs)
            if (c.want_logits && c.sample != DeviceSample::kNone)
                return invalid_argument("sequence {}: this runner does not sample on the device", c.seq_id);
        return forward(batch, out.logits);
    }
};

}  // namespace dsv4
