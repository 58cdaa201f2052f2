// Sampler: logits row -> next token for one sequence. Deterministic and batch-independent:
// the only randomness is one Philox draw keyed by (seed, stream, output position), so a
// sequence samples the same tokens whether it runs alone, in a full batch, or after being
// preempted and recomputed. Greedy is the exact argmax (lowest token id on ties).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "sample/sampling_params.h"

namespace dsv4 {

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0.0f;  // always finite (clamped), so it serialises as a JSON number
};

struct SampleResult {
    int32_t token = 0;
    float logprob = 0.0f;           // of the chosen token under the model's distribution
    std::vector<TokenLogprob> top;  // params.logprobs most likely, best first
};

// Per-sequence token history needed by the penalties. Rebuilt from tokens on recompute.
class PenaltyState {
public:
    void reset(std::span<const int32_t> prompt, std::span<const int32_t> output);
    void add_output(int32_t token) { ++output_counts_[token]; }
    const std::unordered_map<int32_t, int>& output_counts() const { return output_counts_; }
    const std::unordered_map<int32_t, int>& prompt_counts() const { return prompt_counts_; }

private:
    std::unordered_map<int32_t, int> prompt_counts_;
    std::unordered_map<int32_t, int> output_counts_;
};

struct SampleContext {
    uint64_t seed = 0;            // the request's seed (or one drawn at admission)
    uint64_t stream = 0;          // distinguishes the n choices of one request
    int64_t position = 0;         // index of the token being sampled within the output
    bool suppress_stops = false;  // min_tokens not reached: EOS and stop ids are masked
    int32_t eos_token = -1;
};

// True when sample_token(logits, params, penalties, ctx) is exactly the argmax of the unmodified
// logits (lowest id on ties, NaN skipped) and needs nothing else from them: greedy, no penalties,
// no logprobs, no stop masking in effect. Such a token may be picked wherever the logits are
// (ModelRunner device sampling, DeviceSample::kGreedy) with the same result.
bool sample_is_plain_argmax(const SamplingParams& params, const SampleContext& ctx);

// `logits` is modified in place (penalties, masking) to avoid a copy per step.
SampleResult sample_token(std::span<float> logits, const SamplingParams& params, const PenaltyState& penalties,
                          const SampleContext& ctx);

// Speculative decoding (issue 24): the verdict on a draft token proposed for this position by a
// greedy draft model (its proposal distribution q is one-hot at `draft`). The token is sample_token's
// (the same draw at the same (seed, stream, position)) and the draft is accepted iff it is that
// token. Its law is p exactly, and the draft is accepted with probability p(draft): the law and
// the acceptance rate of the rejection rule of Leviathan et al. 2023 and Chen et al. 2023 ("accept
// with min(1, p/q), else sample from max(0, p - q)") when q is one-hot. Drawing with sample_token's
// stream rather than one of its own makes a seeded request's output the same with speculation on
// or off, whatever the batch it runs in (up to rounding differences between the verify and the
// one-token step's logits).
struct DraftVerdict {
    SampleResult sample;  // the token (the draft when accepted) and its logprobs, as sample_token's
    bool accepted = false;
};
DraftVerdict sample_token_with_draft(std::span<float> logits, const SamplingParams& params,
                                     const PenaltyState& penalties, const SampleContext& ctx, int32_t draft);

}  // namespace dsv4
