// Parsing and validation of OpenAI request bodies (/v1/chat/completions, /v1/completions)
// into plain structs. Every wrong type, missing field or out-of-range value becomes an
// ApiError naming the parameter; nothing here throws past its boundary (B27).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "sample/sampling_params.h"
#include "server/api_error.h"
#include "tokenizer/chat_encoding.h"

namespace dsv4 {

struct ParsedRequest {
    bool chat = false;
    std::string model;  // as sent ("" = not given)
    bool stream = false;
    bool include_usage = false;
    int n = 1;
    SamplingParams params;
    bool max_tokens_given = false;
    std::vector<std::string> stop;  // stop strings
    bool skip_special_tokens = true;
    std::string cache_salt;         // "" = the shared prefix-cache namespace
    bool return_token_ids = false;  // vLLM's extension: each choice's generated token ids
    // Structured output (response_format, guided_json, structured_outputs): a JSON schema the
    // output must match, or any JSON object; null / false: unconstrained.
    nlohmann::ordered_json json_schema;
    bool json_object = false;
    // /v1/completions prompt: text, or token ids when prompt_is_ids.
    std::string prompt_text;
    std::vector<int32_t> prompt_ids;
    bool prompt_is_ids = false;
    bool echo = false;
    // /v1/chat/completions
    nlohmann::ordered_json messages;
    nlohmann::ordered_json tools;            // null or array
    nlohmann::ordered_json response_format;  // null or object
    bool thinking = false;
    std::string reasoning_effort;
    bool tools_enabled = true;         // false for tool_choice "none"
    std::string tool_choice = "auto";  // auto | none | required | function (tool_choice_name)
    std::string tool_choice_name;
    bool parallel_tool_calls = true;
};

// `body`: the raw request body. Returns the parsed request or the error to send.
// The chat renderer's options for a parsed chat request: thinking mode, reasoning effort, the
// request's tools (unless tool_choice is "none") and response_format.
ChatOptions chat_options(const ParsedRequest& r);

// defaults (optional): the sampling values of the fields the body omits (generation_defaults.h);
// null: SamplingParams' own.
std::variant<ParsedRequest, ApiError> parse_openai_request(std::string_view body, bool chat,
                                                           const SamplingParams* defaults = nullptr);

}  // namespace dsv4
