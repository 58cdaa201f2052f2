// SamplingParams: how one sequence turns logits into tokens. Plain data validated by the
// server before a request reaches the engine (ranges are documented next to each field);
// text-level stops (stop strings) live in the server, token-level ones here.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace dsv4 {

struct SamplingParams {
    float temperature = 1.0f;             // 0 = greedy (exact argmax, lowest id on ties); [0, 2]
    float top_p = 1.0f;                   // (0, 1]
    int top_k = 0;                        // 0 or -1 = off; else keep the k most likely
    float min_p = 0.0f;                   // [0, 1]: drop tokens with p < min_p * p_max
    float repetition_penalty = 1.0f;      // (0, 2]: >1 discourages tokens seen in prompt or output
    float presence_penalty = 0.0f;        // [-2, 2]: subtracted once per token present in the output
    float frequency_penalty = 0.0f;       // [-2, 2]: subtracted per occurrence in the output
    std::optional<uint64_t> seed;         // fixed seed: same tokens whatever the batch holds
    int64_t max_tokens = 16;              // >= 1 tokens to generate at most
    int64_t min_tokens = 0;               // EOS/stop ids suppressed before this many tokens
    std::vector<int32_t> stop_token_ids;  // finish (reason "stop") when one is sampled
    bool ignore_eos = false;              // keep generating past EOS (benchmarks)
    int logprobs = -1;                    // -1 = none; else also return this many top alternatives
    // OpenAI logit_bias: (token id, bias in [-100, 100]) added to the raw logits before the
    // penalties (vLLM's order); unique ids.
    std::vector<std::pair<int32_t, float>> logit_bias;

    bool greedy() const { return temperature <= 0.0f; }
    bool has_penalties() const {
        return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
    }
};

}  // namespace dsv4
