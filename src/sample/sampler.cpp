// Sampler implementation. Order of operations (as in vLLM): penalties on raw logits, stop
// masking, then greedy argmax, or temperature -> min_p -> top_k -> top_p -> one Philox draw
// walked over the kept tokens in a fixed order (probability desc, id asc; or id order when no
// filter is active, which avoids sorting 129k entries on the common path).
#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/philox.h"

namespace dsv4 {
namespace {

constexpr float kMinLogprob = -1.0e30f;  // finite stand-in for log(0)

float finite_logprob(double lp) {
    if (!std::isfinite(lp)) return kMinLogprob;
    return std::max(float(lp), kMinLogprob);
}

bool better(float a, int32_t ia, float b, int32_t ib) { return a > b || (a == b && ia < ib); }

// log-sum-exp of the finite entries; -inf when there are none.
double log_sum_exp(std::span<const float> x) {
    float m = -std::numeric_limits<float>::infinity();
    for (float v : x)
        if (v > m) m = v;  // NaN compares false: skipped
    if (!std::isfinite(m)) return m;
    double s = 0.0;
    for (float v : x)
        if (v > -std::numeric_limits<float>::infinity()) s += std::exp(double(v) - m);
    return m + std::log(s);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> raw, int k, double lse) {
    std::vector<TokenLogprob> out;
    if (k <= 0) return out;
    std::vector<int32_t> idx;
    idx.reserve(size_t(k) + 1);
    // Keep a small sorted list: k is at most 20, the vocab is large.
    for (int32_t i = 0; i < int32_t(raw.size()); ++i) {
        const float v = raw[size_t(i)];
        if (std::isnan(v)) continue;
        if (int(idx.size()) == k && !better(v, i, raw[size_t(idx.back())], idx.back())) continue;
        auto pos = std::upper_bound(idx.begin(), idx.end(), i,
                                    [&](int32_t a, int32_t b) { return better(raw[size_t(a)], a, raw[size_t(b)], b); });
        idx.insert(pos, i);
        if (int(idx.size()) > k) idx.pop_back();
    }
    for (int32_t i : idx) out.push_back({i, finite_logprob(double(raw[size_t(i)]) - lse)});
    return out;
}

int32_t argmax(std::span<const float> x) {
    int32_t best = 0;
    float bv = -std::numeric_limits<float>::infinity();
    bool found = false;
    for (int32_t i = 0; i < int32_t(x.size()); ++i) {
        const float v = x[size_t(i)];
        if (std::isnan(v)) continue;
        if (!found || v > bv) {  // strict: the lowest id wins ties
            best = i;
            bv = v;
            found = true;
        }
    }
    return best;
}

// The tokens a non-greedy draw may pick after temperature -> min_p -> top_k -> top_p, with their
// weights relative to the best logit (so the best has weight exactly 1), in the fixed walk order:
// id order when no filter is active (no sort of the whole vocabulary), else probability desc, id asc.
struct Kept {
    std::vector<float> w;       // [vocab]
    std::vector<int32_t> cand;  // with a filter: the kept ids in walk order
    bool filtered = false;
};

Kept kept_tokens(std::span<const float> logits, const SamplingParams& params) {
    Kept k;
    const int32_t vocab = int32_t(logits.size());
    const float inv_t = 1.0f / params.temperature;
    float m = -std::numeric_limits<float>::infinity();
    for (float v : logits)
        if (v > m) m = v;
    k.w.assign(size_t(vocab), 0.0f);
    if (std::isfinite(m)) {
        for (int32_t i = 0; i < vocab; ++i) {
            const float v = logits[size_t(i)];
            k.w[size_t(i)] =
                (v > -std::numeric_limits<float>::infinity() && !std::isnan(v)) ? std::exp((v - m) * inv_t) : 0.0f;
        }
    }
    k.filtered = params.top_k > 0 || params.top_p < 1.0f || params.min_p > 0.0f;
    if (!k.filtered) return k;
    const std::vector<float>& w = k.w;
    std::vector<int32_t>& cand = k.cand;
    for (int32_t i = 0; i < vocab; ++i)
        if (w[size_t(i)] > 0.0f && w[size_t(i)] >= params.min_p) cand.push_back(i);
    auto order = [&](int32_t a, int32_t b) { return better(w[size_t(a)], a, w[size_t(b)], b); };
    if (params.top_k > 0 && int64_t(cand.size()) > params.top_k) {
        std::partial_sort(cand.begin(), cand.begin() + params.top_k, cand.end(), order);
        cand.resize(size_t(params.top_k));
    }
    if (params.top_p < 1.0f) {
        double total = 0.0;
        for (int32_t i : cand) total += w[size_t(i)];
        const double goal = double(params.top_p) * total;
        // The nucleus is usually tiny: sort a growing head instead of the whole vocab.
        size_t sorted = 0, keep = 0;
        double cum = 0.0;
        for (size_t head = 256;; head *= 8) {
            const size_t h = std::min(head, cand.size());
            std::partial_sort(cand.begin() + long(sorted), cand.begin() + long(h), cand.end(), order);
            sorted = h;
            while (keep < sorted && cum < goal) cum += w[size_t(cand[keep++])];
            if (cum >= goal || sorted == cand.size()) break;
        }
        cand.resize(std::max<size_t>(keep, 1));
    } else {
        std::sort(cand.begin(), cand.end(), order);
    }
    return k;
}

// Calls fn(id, weight) over the kept tokens in walk order until it returns false.
template <typename Fn>
void for_each_kept(const Kept& k, Fn&& fn) {
    if (!k.filtered) {
        for (int32_t i = 0; i < int32_t(k.w.size()); ++i)
            if (k.w[size_t(i)] > 0.0f && !fn(i, k.w[size_t(i)])) return;
    } else {
        for (int32_t i : k.cand)
            if (!fn(i, k.w[size_t(i)])) return;
    }
}

// The kept token a draw u in (0, 1] lands on (cumulative weights); -1: none kept.
int32_t walk(const Kept& k, double u) {
    double total = 0.0;
    for_each_kept(k, [&](int32_t, float w) {
        total += w;
        return true;
    });
    const double target = u * total;
    double cum = 0.0;
    int32_t chosen = -1;
    for_each_kept(k, [&](int32_t i, float w) {
        cum += w;
        chosen = i;
        return cum < target;
    });
    return chosen;
}

}  // namespace

void PenaltyState::reset(std::span<const int32_t> prompt, std::span<const int32_t> output) {
    prompt_counts_.clear();
    output_counts_.clear();
    for (int32_t t : prompt) ++prompt_counts_[t];
    for (int32_t t : output) ++output_counts_[t];
}

bool sample_is_plain_argmax(const SamplingParams& params, const SampleContext& ctx) {
    if (!params.greedy() || params.has_penalties() || params.logprobs >= 0 || !params.logit_bias.empty()) return false;
    // Stop masking changes the argmax only if there is something to mask.
    const bool masks =
        ctx.suppress_stops && ((!params.ignore_eos && ctx.eos_token >= 0) || !params.stop_token_ids.empty());
    return !masks;
}

SampleResult sample_token(std::span<float> logits, const SamplingParams& params, const PenaltyState& penalties,
                          const SampleContext& ctx) {
    SampleResult res;
    const int32_t vocab = int32_t(logits.size());
    double lse = 0.0;
    // Logprobs describe the model's own distribution (before penalties and filters).
    std::vector<std::pair<int32_t, float>> saved;
    if (params.logprobs >= 0) {
        lse = log_sum_exp(logits);
        res.top = top_logprobs(logits, params.logprobs, lse);
    }
    auto modify = [&](int32_t t, float v) {
        if (t < 0 || t >= vocab) return;
        if (params.logprobs >= 0) saved.emplace_back(t, logits[size_t(t)]);
        logits[size_t(t)] = v;
    };
    for (const auto& [t, b] : params.logit_bias)
        if (t >= 0 && t < vocab) modify(t, logits[size_t(t)] + b);
    if (params.repetition_penalty != 1.0f) {
        auto apply = [&](int32_t t) {
            if (t < 0 || t >= vocab) return;
            const float l = logits[size_t(t)];
            modify(t, l > 0 ? l / params.repetition_penalty : l * params.repetition_penalty);
        };
        for (const auto& [t, c] : penalties.prompt_counts()) apply(t);
        for (const auto& [t, c] : penalties.output_counts())
            if (!penalties.prompt_counts().count(t)) apply(t);
    }
    if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
        for (const auto& [t, c] : penalties.output_counts()) {
            if (t < 0 || t >= vocab) continue;
            modify(t, logits[size_t(t)] - params.frequency_penalty * float(c) - params.presence_penalty);
        }
    }
    if (ctx.suppress_stops) {
        const float ninf = -std::numeric_limits<float>::infinity();
        if (!params.ignore_eos) modify(ctx.eos_token, ninf);
        for (int32_t t : params.stop_token_ids) modify(t, ninf);
    }

    if (params.greedy()) {
        res.token = argmax(logits);
    } else {
        const int32_t chosen =
            walk(kept_tokens(logits, params), philox_uniform(ctx.seed, ctx.stream, uint64_t(ctx.position)));
        res.token = chosen >= 0 ? chosen : argmax(logits);
    }
    if (params.logprobs >= 0) {
        // Chosen-token logprob uses the raw logit: restore the modified entries first.
        for (auto it = saved.rbegin(); it != saved.rend(); ++it) logits[size_t(it->first)] = it->second;
        res.logprob = finite_logprob(double(logits[size_t(res.token)]) - lse);
    }
    return res;
}

DraftVerdict sample_token_with_draft(std::span<float> logits, const SamplingParams& params,
                                     const PenaltyState& penalties, const SampleContext& ctx, int32_t draft) {
    DraftVerdict v;
    v.sample = sample_token(logits, params, penalties, ctx);
    v.accepted = draft >= 0 && v.sample.token == draft;
    return v;
}

}  // namespace dsv4
