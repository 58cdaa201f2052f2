// The conversation model of the DeepSeek-V4 chat encoder: OpenAI-style messages are checked and
// turned into ChatMessage values, then reshaped the way the official encoder does before it
// renders anything (tool results folded into user turns, sorted by call order, old reasoning
// and old developer turns dropped in thinking mode).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsv4::chat {

// A piece of a user turn. Tool results become pieces of the user turn they are folded into.
struct ContentBlock {
    bool is_tool_result = false;
    std::string text;         // text, or the tool result already flattened to text
    std::string tool_use_id;  // tool results only
};

struct ToolCallIn {
    std::string id;
    std::string name;
    nlohmann::ordered_json arguments;  // always an object, keys in the caller's order
};

struct ChatMessage {
    std::string role;  // system, user, developer, assistant, tool, latest_reminder
    std::string content;
    std::vector<ContentBlock> blocks;  // user turns after fold_tool_results()
    std::string reasoning;
    std::vector<ToolCallIn> tool_calls;
    std::vector<nlohmann::ordered_json> tools;  // the "function" objects of OpenAI tool specs
    nlohmann::ordered_json response_format;     // null when absent or empty
    std::string tool_call_id;                   // tool messages only
    std::optional<std::string> task;            // quick-instruction task name
    bool wo_eos = false;                        // assistant turn left open (no EOS)
};

// Checks and converts an OpenAI-style messages array. Errors name the offending message.
Result<std::vector<ChatMessage>> parse_messages(const nlohmann::ordered_json& messages);

// Converts an OpenAI tools array ([{"type":"function","function":{...}}, ...]) to the list of
// function objects the prompt shows. `where` prefixes error messages.
Result<std::vector<nlohmann::ordered_json>> parse_tools(const nlohmann::ordered_json& tools, const std::string& where);

// Folds "tool" messages into user turns as tool-result blocks; consecutive user turns are
// joined into one turn as well, as the reference does.
std::vector<ChatMessage> fold_tool_results(std::vector<ChatMessage> messages);

// Reorders the tool results of each user turn to match the order of the calls that asked for
// them (by id), as the reference does.
void sort_tool_results(std::vector<ChatMessage>& messages);

// Index of the last user or developer turn, or -1.
int last_user_index(const std::vector<ChatMessage>& messages);

// Thinking-mode history pruning: before the last user turn, assistant reasoning is removed and
// developer turns are dropped.
std::vector<ChatMessage> drop_old_thinking(std::vector<ChatMessage> messages);

}  // namespace dsv4::chat
