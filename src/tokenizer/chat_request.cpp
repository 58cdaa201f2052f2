// Reading a chat request document (see chat_request.h).
#include "tokenizer/chat_request.h"

namespace dsv4 {

namespace {

Status read_bool(const nlohmann::ordered_json& obj, const char* key, bool& out) {
    if (!obj.contains(key) || obj[key].is_null()) return Status::ok();
    if (!obj[key].is_boolean()) return invalid_argument("\"{}\" must be true or false", key);
    out = obj[key].get<bool>();
    return Status::ok();
}

}  // namespace

Result<ChatRequest> parse_chat_request(const nlohmann::ordered_json& doc) {
    ChatRequest req;
    if (doc.is_array()) {
        req.messages = doc;
        return req;
    }
    if (!doc.is_object() || !doc.contains("messages"))
        return invalid_argument("a chat request is a messages array or an object with \"messages\"");
    req.messages = doc["messages"];
    ChatOptions& o = req.options;
    // vLLM-style requests switch thinking through chat_template_kwargs.
    if (doc.contains("chat_template_kwargs") && doc["chat_template_kwargs"].is_object()) {
        const auto& kw = doc["chat_template_kwargs"];
        if (Status s = read_bool(kw, "thinking", o.thinking); !s) return s;
        if (Status s = read_bool(kw, "enable_thinking", o.thinking); !s) return s;
    }
    if (Status s = read_bool(doc, "thinking", o.thinking); !s) return s;
    if (Status s = read_bool(doc, "enable_thinking", o.thinking); !s) return s;
    if (Status s = read_bool(doc, "add_generation_prompt", o.add_generation_prompt); !s) return s;
    if (Status s = read_bool(doc, "drop_thinking", o.drop_thinking); !s) return s;
    if (doc.contains("reasoning_effort") && !doc["reasoning_effort"].is_null()) {
        if (!doc["reasoning_effort"].is_string()) return invalid_argument("\"reasoning_effort\" must be a string");
        o.reasoning_effort = doc["reasoning_effort"].get<std::string>();
    }
    if (doc.contains("tools")) o.tools = doc["tools"];
    if (doc.contains("response_format")) o.response_format = doc["response_format"];
    return req;
}

}  // namespace dsv4
