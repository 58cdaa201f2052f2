// Multi-turn conversation workload (issue 17 item 5): C conversations, each a shared system
// prompt followed by T turns of a user message and the model's answer, every turn resending the
// whole history. Sent as token ids to /v1/completions (ids a synthetic model produces do not
// survive detokenise / retokenise), the answers' ids taken from the server (`return_token_ids`,
// as vLLM returns them). All conversations run turn k together, then turn k + 1. Per turn: TTFT,
// prompt tokens, the prompt tokens the server took from its prefix cache
// (`usage.prompt_tokens_details.cached_tokens`), hence the prefill tokens it computed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/http_client.h"
#include "bench/stats.h"
#include "core/status.h"

namespace dsv4::bench {

struct MultiTurnOptions {
    int conversations = 16;
    int turns = 8;
    int system_len = 2048;                   // token ids of the system prompt every conversation shares
    int user_len = 64;                       // token ids of each user message (different per conversation and turn)
    int answer_len = 128;                    // max_tokens of each answer (ignore_eos, greedy unless temperature)
    int32_t id_min = 1000, id_max = 100000;  // random ids drawn from [id_min, id_max)
    double temperature = 0;
    uint64_t seed = 0;
    double timeout_s = 600;
    std::string model;  // "" = ask the server
};

struct TurnMetrics {
    int turn = 0;  // 1-based
    int n_ok = 0, n_errors = 0;
    Dist ttft_ms;
    std::vector<double> ttft_values_ms;            // one per successful request
    int64_t prompt_tokens = 0, cached_tokens = 0;  // summed over the turn's requests
    int64_t computed_tokens() const { return prompt_tokens - cached_tokens; }
    double hit_rate() const { return prompt_tokens > 0 ? double(cached_tokens) / double(prompt_tokens) : 0; }
    double wall_s = 0;  // the turn's wall time (all conversations)
};

// The prompt of turn `turn` (1-based) of conversation `conv` given its answers so far (exposed
// for tests): system ids, then per earlier turn its user ids and its answer, then this turn's user ids.
std::vector<int32_t> multi_turn_prompt(const MultiTurnOptions& opt, int conv, int turn,
                                       const std::vector<std::vector<int32_t>>& answers);

// Runs the workload against url. Errors: the server unreachable, or every request of a turn failed.
Result<std::vector<TurnMetrics>> run_multi_turn(const Url& url, const MultiTurnOptions& opt);

}  // namespace dsv4::bench
