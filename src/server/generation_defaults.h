// Request defaults from a model directory's generation_config.json (issue 14 item 4): the sampling
// values a request gets for the fields it leaves out, as vLLM applies a model's generation config.
// Read keys: temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens (the default
// max_tokens, still capped by the context room). Others (do_sample, bos/eos ids, transformers
// bookkeeping) are ignored: the chat format and the tokenizer define the special tokens, and a
// request's explicit temperature decides greedy or sampled. Explicit request fields always win.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "sample/sampling_params.h"

namespace dsv4 {

struct GenerationDefaults {
    SamplingParams params;              // defaults of the fields a request omits
    std::optional<int64_t> max_tokens;  // max_new_tokens, when the file sets it
    std::string summary;                // what was applied, for the start-up log ("" = nothing)
};

// Reads `dir`/generation_config.json. No file: the built-in defaults, empty summary. Errors
// (kInvalidArgument, naming the file and the key): not a JSON object, or a read key of the wrong
// type or outside the API's range (temperature [0, 2], top_p (0, 1], top_k >= -1, min_p [0, 1],
// repetition_penalty (0, 2], max_new_tokens >= 1).
Result<GenerationDefaults> load_generation_defaults(const std::string& dir);

}  // namespace dsv4
