// The engine's side of DeviceSample::kFull: a sequence's SamplingParams, SampleContext and
// PenaltyState turned into the plain data a runner's device sampler takes (forward_batch.h), so
// that the runner reproduces sample_token (the reference) where the logits are.
#pragma once

#include <span>
#include <vector>

#include "runtime/forward_batch.h"
#include "sample/sampler.h"

namespace dsv4 {

// The token ids sample_token's penalties and stop masking touch for this row, unique, with what
// each needs (seen: repetition penalty; output_count: presence / frequency; masked: -inf).
std::vector<PenaltyToken> penalty_tokens(const SamplingParams& p, const PenaltyState& pen, const SampleContext& ctx);

// The row's parameters; `tokens` (from penalty_tokens) must outlive the forward call.
DeviceSampleParams device_sample_params(const SamplingParams& p, const SampleContext& ctx,
                                        std::span<const PenaltyToken> tokens);

}  // namespace dsv4
