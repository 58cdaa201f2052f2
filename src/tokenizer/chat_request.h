// A chat rendering request as a JSON document: either a bare messages array, or an object with
// "messages" and the ChatOptions fields ("thinking", "reasoning_effort", "tools",
// "response_format", "add_generation_prompt", "drop_thinking"). Other keys of an OpenAI request
// body (model, temperature, ...) are ignored, so a saved request can be rendered as it is.
// Used by `dsv4 tokenize --chat` and by the chat golden tests.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/chat_encoding.h"

namespace dsv4 {

struct ChatRequest {
    nlohmann::ordered_json messages;
    ChatOptions options;
};

Result<ChatRequest> parse_chat_request(const nlohmann::ordered_json& doc);

}  // namespace dsv4
