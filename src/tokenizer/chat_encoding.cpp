// DeepSeek-V4 prompt rendering (see chat_encoding.h). Message checking and the reshaping that
// precedes rendering live in chat_messages.cpp; this file only lays out text.
#include "tokenizer/chat_encoding.h"

#include "tokenizer/chat_markers.h"
#include "tokenizer/chat_messages.h"
#include "tokenizer/py_json.h"

namespace dsv4 {

using nlohmann::ordered_json;
using namespace chat;

namespace {

// The format's own instruction texts. They are part of what the model was trained on, so they
// must stay byte-identical to the official encoder.
constexpr std::string_view kThinkMaxParagraph =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

constexpr std::string_view kToolsHeader =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";

constexpr std::string_view kToolsFooter =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

constexpr std::string_view kResponseFormatHeader =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

std::string render_tools(const std::vector<ordered_json>& tools) {
    std::string out(kToolsHeader);
    for (size_t i = 0; i < tools.size(); ++i) {
        if (i > 0) out += '\n';
        out += py_json_dumps(tools[i]);
    }
    out += kToolsFooter;
    return out;
}

// Tools and response format trail the text of system and developer turns.
void append_instructions(std::string& out, const ChatMessage& m) {
    if (!m.tools.empty()) {
        out += "\n\n";
        out += render_tools(m.tools);
    }
    if (!m.response_format.is_null()) {
        out += "\n\n";
        out += kResponseFormatHeader;
        out += py_json_dumps(m.response_format);
    }
}

std::string render_tool_calls(const std::vector<ToolCallIn>& calls) {
    std::string out = "\n\n";
    out += kToolCallsOpen;
    out += '\n';
    for (size_t i = 0; i < calls.size(); ++i) {
        if (i > 0) out += '\n';
        out += kInvokeHead;
        out += " name=\"" + calls[i].name + "\">\n";
        bool first = true;
        for (auto it = calls[i].arguments.begin(); it != calls[i].arguments.end(); ++it) {
            if (!first) out += '\n';
            first = false;
            const bool is_str = it.value().is_string();
            out += kParamHead;
            out += " name=\"" + it.key() + "\" string=\"" + (is_str ? "true" : "false") + "\">";
            out += is_str ? it.value().get<std::string>() : py_json_dumps(it.value());
            out += kParamClose;
        }
        out += '\n';
        out += kInvokeClose;
    }
    out += '\n';
    out += kToolCallsClose;
    return out;
}

std::string_view task_marker(const std::string& task) {
    if (task == "action") return "<｜action｜>";
    if (task == "query") return "<｜query｜>";
    if (task == "authority") return "<｜authority｜>";
    if (task == "domain") return "<｜domain｜>";
    if (task == "title") return "<｜title｜>";
    return "<｜read_url｜>";
}

struct RenderState {
    const std::vector<ChatMessage>& msgs;
    bool thinking;
    bool drop_thinking;
    bool max_effort;
    bool add_generation_prompt;
    int last_user;
};

void render_message(std::string& out, const RenderState& st, int index) {
    const ChatMessage& m = st.msgs[index];
    if (index == 0 && st.thinking && st.max_effort) out += kThinkMaxParagraph;

    if (m.role == "system") {
        out += m.content;
        append_instructions(out, m);
    } else if (m.role == "developer") {
        out += kUser;
        out += m.content;
        append_instructions(out, m);
    } else if (m.role == "user") {
        out += kUser;
        for (size_t i = 0; i < m.blocks.size(); ++i) {
            if (i > 0) out += "\n\n";
            const auto& b = m.blocks[i];
            if (b.is_tool_result) {
                out += "<tool_result>" + b.text + "</tool_result>";
            } else {
                out += b.text;
            }
        }
    } else if (m.role == "latest_reminder") {
        out += kLatestReminder;
        out += m.content;
    } else if (m.role == "assistant") {
        // A turn that answers a quick-instruction task never has a thinking part.
        const bool after_task = index > 0 && st.msgs[index - 1].task.has_value();
        if (st.thinking && !after_task && (!st.drop_thinking || index > st.last_user)) {
            out += m.reasoning;
            out += kThinkClose;
        }
        out += m.content;
        if (!m.tool_calls.empty()) out += render_tool_calls(m.tool_calls);
        if (!m.wo_eos) out += kEos;
    }

    // What follows a turn depends on the next one: only before an assistant turn, a reminder,
    // or at the end does a user turn hand over to the assistant.
    const int n = static_cast<int>(st.msgs.size());
    if (index + 1 < n) {
        const std::string& next = st.msgs[index + 1].role;
        if (next != "assistant" && next != "latest_reminder") return;
    }
    if (m.task) {
        if (*m.task != "action") {
            out += task_marker(*m.task);
        } else {
            out += kAssistant;
            out += st.thinking ? kThinkOpen : kThinkClose;
            out += task_marker(*m.task);
        }
    } else if (m.role == "user" || m.role == "developer") {
        if (index + 1 == n && !st.add_generation_prompt) return;
        out += kAssistant;
        const bool open_thinking = st.thinking && (!st.drop_thinking || index >= st.last_user);
        out += open_thinking ? kThinkOpen : kThinkClose;
    }
}

}  // namespace

Result<std::string> render_chat(const ordered_json& messages, const ChatOptions& opts) {
    auto parsed = parse_messages(messages);
    if (!parsed) return parsed.status();
    std::vector<ChatMessage> msgs = std::move(*parsed);

    // Request-level tools and response format are the server's to place; the encoder renders a
    // message's tools block after that message's text. As vLLM's DeepSeek-V4 adapter does, they
    // join a leading system or developer message (so the prompt reads "{content}\n\n## Tools"),
    // replacing tools that message carried itself (one tools block, the request's); without
    // such a message, a system message carrying only them is inserted.
    std::vector<ordered_json> req_tools;
    if (!opts.tools.is_null() && !opts.tools.empty()) {
        auto tools = parse_tools(opts.tools, "tools");
        if (!tools) return tools.status();
        req_tools = std::move(*tools);
    }
    const bool has_format = !opts.response_format.is_null() && !opts.response_format.empty();
    if (!req_tools.empty() || has_format) {
        const bool has_head = !msgs.empty() && (msgs.front().role == "system" || msgs.front().role == "developer");
        if (!has_head) {
            ChatMessage lead;
            lead.role = "system";
            msgs.insert(msgs.begin(), std::move(lead));
        }
        ChatMessage& head = msgs.front();
        if (!req_tools.empty()) head.tools = std::move(req_tools);
        if (has_format) head.response_format = opts.response_format;
    }

    msgs = fold_tool_results(std::move(msgs));
    sort_tool_results(msgs);

    bool drop = opts.drop_thinking;
    for (const auto& m : msgs)
        if (!m.tools.empty()) drop = false;  // tool use keeps all reasoning visible
    if (opts.thinking && drop) msgs = drop_old_thinking(std::move(msgs));

    RenderState st{
        msgs, opts.thinking, drop, opts.reasoning_effort == "max", opts.add_generation_prompt, last_user_index(msgs)};
    std::string out(kBos);
    for (int i = 0; i < static_cast<int>(msgs.size()); ++i) render_message(out, st, i);
    return out;
}

Result<std::string> render_chat(const nlohmann::json& messages, const ChatOptions& opts) {
    return render_chat(ordered_json(messages), opts);
}

}  // namespace dsv4
