// Checking, converting and reshaping of chat messages (see chat_messages.h).
#include "tokenizer/chat_messages.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace dsv4::chat {

using nlohmann::ordered_json;

namespace {

// Python truthiness of a JSON value, which decides whether the reference renders a field.
bool truthy(const ordered_json& v) {
    switch (v.type()) {
        case ordered_json::value_t::null:
            return false;
        case ordered_json::value_t::boolean:
            return v.get<bool>();
        case ordered_json::value_t::string:
        case ordered_json::value_t::array:
        case ordered_json::value_t::object:
            return !v.empty();
        case ordered_json::value_t::number_integer:
            return v.get<int64_t>() != 0;
        case ordered_json::value_t::number_unsigned:
            return v.get<uint64_t>() != 0;
        case ordered_json::value_t::number_float:
            return v.get<double>() != 0.0;
        default:
            return true;
    }
}

bool is_known_task(const std::string& t) {
    return t == "action" || t == "query" || t == "authority" || t == "domain" || t == "title" || t == "read_url";
}

// Content of system/user/assistant/developer/reminder turns: a string, null, or an array of
// text parts (joined with "\n", as OpenAI-compatible servers flatten them).
Result<std::string> text_content(const ordered_json& c, const std::string& where) {
    if (c.is_null()) return std::string();
    if (c.is_string()) return c.get<std::string>();
    if (!c.is_array()) return invalid_argument("{}.content must be a string, null or an array of text parts", where);
    std::string out;
    for (size_t j = 0; j < c.size(); ++j) {
        const auto& part = c[j];
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
            return invalid_argument("{}.content[{}] must be an object with a \"type\"", where, j);
        const std::string type = part["type"].get<std::string>();
        if (type != "text")
            return invalid_argument("{}.content[{}]: unsupported content part type '{}' (only text)", where, j, type);
        if (!part.contains("text") || !part["text"].is_string())
            return invalid_argument("{}.content[{}]: text part without a string \"text\"", where, j);
        if (j > 0) out += '\n';
        out += part["text"].get<std::string>();
    }
    return out;
}

// Tool results flatten arrays the reference's way: parts joined by a blank line, non-text
// parts shown as a placeholder.
Result<std::string> tool_result_content(const ordered_json& c, const std::string& where) {
    if (c.is_null()) return std::string();
    if (c.is_string()) return c.get<std::string>();
    if (!c.is_array()) return invalid_argument("{}.content must be a string, null or an array of parts", where);
    std::string out;
    for (size_t j = 0; j < c.size(); ++j) {
        const auto& part = c[j];
        if (!part.is_object()) return invalid_argument("{}.content[{}] must be an object", where, j);
        if (j > 0) out += "\n\n";
        std::string type = part.contains("type") && part["type"].is_string() ? part["type"].get<std::string>() : "None";
        if (type == "text") {
            if (part.contains("text") && !part["text"].is_string())
                return invalid_argument("{}.content[{}].text must be a string", where, j);
            out += part.value("text", std::string());
        } else {
            out += fmt::format("[Unsupported {}]", type);
        }
    }
    return out;
}

Result<ordered_json> call_arguments(const ordered_json& fn, const std::string& where) {
    if (!fn.contains("arguments") || fn["arguments"].is_null()) return ordered_json::object();
    const auto& a = fn["arguments"];
    ordered_json args;
    if (a.is_string()) {
        const std::string& s = a.get_ref<const std::string&>();
        if (s.find_first_not_of(" \t\r\n") == std::string::npos) return ordered_json::object();
        args = ordered_json::parse(s, nullptr, /*allow_exceptions=*/false);
        if (args.is_discarded()) return invalid_argument("{}.function.arguments is not valid JSON", where);
    } else {
        args = a;
    }
    if (!args.is_object()) return invalid_argument("{}.function.arguments must be a JSON object", where);
    return args;
}

Result<std::vector<ToolCallIn>> parse_tool_calls(const ordered_json& tcs, const std::string& where) {
    std::vector<ToolCallIn> out;
    if (tcs.is_null()) return out;
    if (!tcs.is_array()) return invalid_argument("{}.tool_calls must be an array", where);
    for (size_t j = 0; j < tcs.size(); ++j) {
        const std::string w = fmt::format("{}.tool_calls[{}]", where, j);
        const auto& tc = tcs[j];
        if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object())
            return invalid_argument("{}: tool call without a \"function\" object", w);
        const auto& fn = tc["function"];
        if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
            return invalid_argument("{}: tool call without a function name", w);
        ToolCallIn call;
        call.name = fn["name"].get<std::string>();
        // The reference matches results to calls by the call id, which may sit on either level.
        if (tc.contains("id") && tc["id"].is_string() && !tc["id"].get<std::string>().empty())
            call.id = tc["id"].get<std::string>();
        else if (fn.contains("id") && fn["id"].is_string())
            call.id = fn["id"].get<std::string>();
        auto args = call_arguments(fn, w);
        if (!args) return args.status();
        call.arguments = std::move(*args);
        out.push_back(std::move(call));
    }
    return out;
}

Result<ChatMessage> parse_message(const ordered_json& m, size_t i) {
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return invalid_argument("{} must be an object", where);
    if (!m.contains("role") || !m["role"].is_string())
        return invalid_argument("{}: missing or non-string \"role\"", where);
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    const std::string& role = msg.role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer" &&
        role != "latest_reminder")
        return invalid_argument(
            "{}: unknown role '{}' (expected system, user, assistant, tool, developer or "
            "latest_reminder)",
            where, role);
    const ordered_json null_json;
    const ordered_json& content = m.contains("content") ? m["content"] : null_json;

    if (role == "tool") {
        auto c = tool_result_content(content, where);
        if (!c) return c.status();
        msg.content = std::move(*c);
        if (m.contains("tool_call_id") && m["tool_call_id"].is_string())
            msg.tool_call_id = m["tool_call_id"].get<std::string>();
    } else {
        auto c = text_content(content, where);
        if (!c) return c.status();
        msg.content = std::move(*c);
    }
    if (role == "developer" && msg.content.empty())
        return invalid_argument("{}: a developer message needs non-empty content", where);
    if (role == "latest_reminder" && !content.is_string())
        return invalid_argument("{}: a latest_reminder message needs string content", where);

    // "reasoning" is the reference's field; "reasoning_content" is the OpenAI-compatible name.
    for (const char* key : {"reasoning_content", "reasoning"}) {
        if (!m.contains(key) || m[key].is_null()) continue;
        if (!m[key].is_string()) return invalid_argument("{}.{} must be a string", where, key);
        msg.reasoning = m[key].get<std::string>();
    }
    if (m.contains("tool_calls")) {
        if (role != "assistant" && !m["tool_calls"].is_null() && !m["tool_calls"].empty())
            return invalid_argument("{}: only assistant messages may carry tool_calls", where);
        auto tcs = parse_tool_calls(m["tool_calls"], where);
        if (!tcs) return tcs.status();
        msg.tool_calls = std::move(*tcs);
    }
    if (m.contains("tools") && truthy(m["tools"])) {
        auto tools = parse_tools(m["tools"], where + ".tools");
        if (!tools) return tools.status();
        msg.tools = std::move(*tools);
    }
    if (m.contains("response_format") && truthy(m["response_format"])) msg.response_format = m["response_format"];
    if (m.contains("task") && !m["task"].is_null()) {
        if (!m["task"].is_string() || !is_known_task(m["task"].get<std::string>()))
            return invalid_argument(
                "{}: unknown task {} (expected action, query, authority, domain, title or read_url)", where,
                m["task"].dump());
        msg.task = m["task"].get<std::string>();
    }
    if (m.contains("wo_eos")) msg.wo_eos = truthy(m["wo_eos"]);
    return msg;
}

}  // namespace

Result<std::vector<ordered_json>> parse_tools(const ordered_json& tools, const std::string& where) {
    std::vector<ordered_json> out;
    if (tools.is_null()) return out;
    if (!tools.is_array()) return invalid_argument("{} must be an array", where);
    for (size_t k = 0; k < tools.size(); ++k) {
        const auto& t = tools[k];
        if (!t.is_object() || !t.contains("function") || !t["function"].is_object())
            return invalid_argument("{}[{}]: expected {{\"type\": \"function\", \"function\": {{...}}}}", where, k);
        const auto& fn = t["function"];
        if (!fn.contains("name") || !fn["name"].is_string())
            return invalid_argument("{}[{}]: function without a name", where, k);
        out.push_back(fn);
    }
    return out;
}

Result<std::vector<ChatMessage>> parse_messages(const ordered_json& messages) {
    if (!messages.is_array()) return invalid_argument("messages must be a JSON array");
    std::vector<ChatMessage> out;
    out.reserve(messages.size());
    for (size_t i = 0; i < messages.size(); ++i) {
        auto m = parse_message(messages[i], i);
        if (!m) return m.status();
        out.push_back(std::move(*m));
    }
    return out;
}

std::vector<ChatMessage> fold_tool_results(std::vector<ChatMessage> messages) {
    std::vector<ChatMessage> out;
    // Only user turns made here carry blocks, so "has blocks" marks a turn that may grow.
    auto open_user = [&]() -> ChatMessage* {
        if (out.empty() || out.back().role != "user" || out.back().blocks.empty()) return nullptr;
        return &out.back();
    };
    for (auto& m : messages) {
        if (m.role == "tool") {
            ContentBlock b{true, std::move(m.content), std::move(m.tool_call_id)};
            if (ChatMessage* u = open_user()) {
                u->blocks.push_back(std::move(b));
            } else {
                ChatMessage u2;
                u2.role = "user";
                u2.blocks.push_back(std::move(b));
                out.push_back(std::move(u2));
            }
        } else if (m.role == "user") {
            ChatMessage* u = open_user();
            if (u && !u->task) {
                u->blocks.push_back(ContentBlock{false, std::move(m.content), {}});
            } else {
                // The reference keeps only content, task and wo_eos of a user turn.
                ChatMessage u2;
                u2.role = "user";
                u2.blocks.push_back(ContentBlock{false, m.content, {}});
                u2.content = std::move(m.content);
                u2.task = m.task;
                u2.wo_eos = m.wo_eos;
                out.push_back(std::move(u2));
            }
        } else {
            out.push_back(std::move(m));
        }
    }
    return out;
}

void sort_tool_results(std::vector<ChatMessage>& messages) {
    std::map<std::string, int> order;  // call id -> position in the latest assistant tool_calls
    for (auto& m : messages) {
        if (m.role == "assistant" && !m.tool_calls.empty()) {
            order.clear();
            for (size_t i = 0; i < m.tool_calls.size(); ++i)
                if (!m.tool_calls[i].id.empty()) order[m.tool_calls[i].id] = static_cast<int>(i);
        } else if (m.role == "user" && !m.blocks.empty()) {
            std::vector<ContentBlock> results;
            for (const auto& b : m.blocks)
                if (b.is_tool_result) results.push_back(b);
            if (results.size() < 2 || order.empty()) continue;
            auto key = [&](const ContentBlock& b) {
                auto it = order.find(b.tool_use_id);
                return it == order.end() ? 0 : it->second;
            };
            std::stable_sort(results.begin(), results.end(),
                             [&](const auto& a, const auto& b) { return key(a) < key(b); });
            size_t next = 0;
            for (auto& b : m.blocks)
                if (b.is_tool_result) b = results[next++];
        }
    }
}

int last_user_index(const std::vector<ChatMessage>& messages) {
    for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i)
        if (messages[i].role == "user" || messages[i].role == "developer") return i;
    return -1;
}

std::vector<ChatMessage> drop_old_thinking(std::vector<ChatMessage> messages) {
    const int last_user = last_user_index(messages);
    std::vector<ChatMessage> out;
    for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
        auto& m = messages[i];
        if (i >= last_user || m.role == "user" || m.role == "system" || m.role == "tool" ||
            m.role == "latest_reminder") {
            out.push_back(std::move(m));
        } else if (m.role == "assistant") {
            m.reasoning.clear();
            out.push_back(std::move(m));
        }
        // Developer turns before the last user turn are dropped.
    }
    return out;
}

}  // namespace dsv4::chat
