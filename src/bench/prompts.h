// Prompt sources for the load generator: real prompt files (ShareGPT JSON, MT-Bench /
// HumanEval-style JSONL, optionally gzip-compressed) and synthetic prompts (random token ids
// for /v1/completions, random words for either endpoint). Draws are seeded per
// (level, iteration) so that a run is repeatable and A and B see the same prompts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dsv4::bench {

struct Prompt {
    std::string text;           // used unless ids is non-empty
    std::vector<int32_t> ids;   // token-id prompt (completions endpoint only)
    int64_t known_tokens = -1;  // exact prompt length when known (token ids), else -1
};

enum class PromptKind { kFile, kRandomIds, kRandomWords };

struct PromptSourceOptions {
    PromptKind kind = PromptKind::kRandomWords;
    std::string path;            // kFile
    int input_len = 128;         // kRandomIds: tokens; kRandomWords: words
    int32_t token_id_min = 100;  // kRandomIds draws uniformly from [min, max)
    int32_t token_id_max = 32000;
};

class PromptSource {
public:
    static Result<PromptSource> create(const PromptSourceOptions& opt);

    // n prompts for one batch. Files: a seeded permutation of the pool (repeating the
    // permutation only when n exceeds the pool). Synthetic: fresh prompts from the seed.
    std::vector<Prompt> draw(uint64_t seed, int n) const;
    std::string describe() const;  // "sharegpt_v3_filtered_500.json (500 prompts)"
    size_t pool_size() const { return pool_.size(); }

private:
    PromptSourceOptions opt_;
    std::vector<std::string> pool_;
};

// File loaders, exposed for tests. A ShareGPT file is a JSON array of
// {"conversations":[{"from":"human","value":...},...]}; the first human turn is the prompt.
// JSONL lines give the prompt in "turns"[0] (MT-Bench), "prompt" (HumanEval) or "text".
Result<std::vector<std::string>> load_sharegpt(const std::string& json_text);
Result<std::vector<std::string>> load_jsonl_prompts(const std::string& jsonl_text);
Result<std::vector<std::string>> load_prompt_file(const std::string& path);

}  // namespace dsv4::bench
