// DeepSeek-V4 chat encoding: renders an OpenAI-style conversation into the prompt text the model
// was trained on, byte-identical to the official encoder (encoding_dsv4.py, spec §5) driven the
// way OpenAI-compatible servers drive it. Tokenize the result without adding special tokens: the
// BOS is already part of the text.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsv4 {

struct ChatOptions {
    // Thinking mode: the prompt ends with "<think>" and the model answers "reasoning</think>...".
    bool thinking = false;
    // "max" prepends the Think-Max paragraph in thinking mode; every other value (high, low,
    // empty, ...) renders the same prompt, as in the reference.
    std::string reasoning_effort;
    // OpenAI tools array (the request's). When non-empty it is attached to the first message if
    // that is a system or developer message, rendered after its text and replacing tools that
    // message carried; otherwise a system message carrying only the tools is placed first. This
    // is vLLM's placement for DeepSeek-V4. Keep key order by passing ordered_json: the schemas
    // are printed in the order they are stored.
    nlohmann::ordered_json tools;
    // Rendered verbatim as JSON ("## Response Format") in the same message as the tools, after
    // them.
    nlohmann::ordered_json response_format;
    // False leaves off the "<｜Assistant｜>" + think marker after a final user turn.
    bool add_generation_prompt = true;
    // Reference default: in thinking mode, reasoning of turns before the last user turn is not
    // shown (unless any turn carries tools, which keeps all reasoning).
    bool drop_thinking = true;
};

// Renders `messages` (a JSON array of {"role", "content", ...} objects; roles system, user,
// assistant, tool, developer, latest_reminder). Assistant turns may carry "reasoning_content"
// (or "reasoning") and OpenAI "tool_calls"; tool turns are folded into the following user turn
// as <tool_result> blocks. Errors name the message and field that is wrong.
Result<std::string> render_chat(const nlohmann::ordered_json& messages, const ChatOptions& opts);
Result<std::string> render_chat(const nlohmann::json& messages, const ChatOptions& opts);

}  // namespace dsv4
