// device_sample.h: SamplingParams -> DeviceSampleParams and the row's penalty token list.
#include "sched/device_sample.h"

#include <unordered_map>

namespace dsv4 {

// The token ids sample_token's penalties and stop masking would touch for this row (unique),
// with what each needs: the device sampler's input for a kFull row.
std::vector<PenaltyToken> penalty_tokens(const SamplingParams& p, const PenaltyState& pen, const SampleContext& ctx) {
    std::vector<PenaltyToken> out;
    std::unordered_map<int32_t, size_t> at;
    auto entry = [&](int32_t t) -> PenaltyToken& {
        auto [it, fresh] = at.try_emplace(t, out.size());
        if (fresh) out.push_back(PenaltyToken{.token = t});
        return out[it->second];
    };
    for (const auto& [t, b] : p.logit_bias) entry(t).bias = b;
    const bool rep = p.repetition_penalty != 1.0f;
    const bool pres_freq = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (rep)
        for (const auto& [t, c] : pen.prompt_counts()) entry(t).seen = true;
    if (rep || pres_freq)
        for (const auto& [t, c] : pen.output_counts()) {
            PenaltyToken& e = entry(t);
            e.seen = e.seen || rep;
            if (pres_freq) e.output_count = c;
        }
    if (ctx.suppress_stops) {
        if (!p.ignore_eos && ctx.eos_token >= 0) entry(ctx.eos_token).masked = true;
        for (int32_t t : p.stop_token_ids) entry(t).masked = true;
    }
    return out;
}

DeviceSampleParams device_sample_params(const SamplingParams& p, const SampleContext& ctx,
                                        std::span<const PenaltyToken> tokens) {
    return DeviceSampleParams{
        .temperature = p.temperature,
        .top_p = p.top_p,
        .min_p = p.min_p,
        .top_k = p.top_k,
        .repetition_penalty = p.repetition_penalty,
        .presence_penalty = p.presence_penalty,
        .frequency_penalty = p.frequency_penalty,
        .logprobs = p.logprobs,
        .seed = ctx.seed,
        .stream = ctx.stream,
        .position = ctx.position,
        .penalty_tokens = tokens,
    };
}

}  // namespace dsv4
