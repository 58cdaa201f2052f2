// OpenAI request parsing (see openai_request.h). Field ranges follow the OpenAI API where it
// defines them, vLLM's extensions otherwise (top_k, min_p, repetition_penalty, ignore_eos,
// stop_token_ids, min_tokens, skip_special_tokens).
#include "server/openai_request.h"

#include <charconv>
#include <climits>

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>

namespace dsv4 {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxNesting = 128;
constexpr int kMaxN = 16;
constexpr int kMaxTopLogprobs = 20;
constexpr size_t kMaxStops = 16;
constexpr size_t kMaxLogitBias = 1024;  // OpenAI documents no limit; this bounds the per-row device list

// nlohmann's parser recurses per nesting level; refuse deep bodies before parsing so a body
// of a million '[' cannot overflow the stack.
bool nesting_ok(std::string_view s) {
    int depth = 0;
    bool in_str = false, esc = false;
    for (char c : s) {
        if (in_str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"')
            in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > kMaxNesting) return false;
        } else if (c == ']' || c == '}')
            --depth;
    }
    return true;
}

class Reader {
public:
    explicit Reader(const ojson& j) : j_(j) {}
    std::optional<ApiError> err;

    const ojson* get(const char* key) const {
        auto it = j_.find(key);
        if (it == j_.end() || it->is_null()) return nullptr;
        return &*it;
    }
    void fail(std::string msg, const char* param) {
        if (!err) err = bad_request(std::move(msg), param);
    }
    bool boolean(const char* key, bool& out) {
        const ojson* v = get(key);
        if (!v) return false;
        if (!v->is_boolean()) return fail(fmt::format("'{}' must be a boolean", key), key), false;
        out = v->get<bool>();
        return true;
    }
    bool number(const char* key, float& out, double lo, double hi, bool lo_open = false) {
        const ojson* v = get(key);
        if (!v) return false;
        if (!v->is_number()) return fail(fmt::format("'{}' must be a number", key), key), false;
        const double x = v->get<double>();
        if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
            return fail(fmt::format("'{}' must be in {}{}, {}]", key, lo_open ? "(" : "[", lo, hi), key), false;
        out = float(x);
        return true;
    }
    bool integer(const char* key, int64_t& out, int64_t lo, int64_t hi) {
        const ojson* v = get(key);
        if (!v) return false;
        if (!v->is_number_integer()) return fail(fmt::format("'{}' must be an integer", key), key), false;
        if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(hi))
            return fail(fmt::format("'{}' must be at most {}", key, hi), key), false;
        const int64_t x = v->is_number_unsigned() ? int64_t(v->get<uint64_t>()) : v->get<int64_t>();
        if (x < lo || x > hi) return fail(fmt::format("'{}' must be in [{}, {}]", key, lo, hi), key), false;
        out = x;
        return true;
    }

private:
    const ojson& j_;
};

// response_format (OpenAI), and vLLM's guided_json / structured_outputs {"json": ...}: the schema
// constrained decoding enforces (checked in detail when compiled, by the server).
std::optional<ApiError> parse_structured_output(Reader& rd, ParsedRequest& r) {
    if (const ojson* rf = rd.get("response_format")) {
        if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
            return bad_request("'response_format' must be an object with a 'type'", "response_format");
        const auto type = (*rf)["type"].get<std::string>();
        if (type == "json_schema") {
            if (!rf->contains("json_schema") || !(*rf)["json_schema"].is_object())
                return bad_request("response_format type json_schema needs a 'json_schema' object", "response_format");
            const ojson& js = (*rf)["json_schema"];
            if (js.contains("schema") && !js["schema"].is_object() && !js["schema"].is_boolean())
                return bad_request("response_format.json_schema.schema must be a JSON schema object",
                                   "response_format");
            r.json_schema = js.value("schema", ojson::object());
        } else if (type == "json_object") {
            r.json_object = true;
        } else if (type != "text") {
            return bad_request("response_format.type must be text, json_object or json_schema", "response_format");
        }
        if (type != "text") r.response_format = *rf;
    }
    auto schema_field = [&](const ojson& v, const char* field) -> std::optional<ApiError> {
        if (v.is_string()) {
            ojson parsed = ojson::parse(v.get<std::string>(), nullptr, false);
            if (parsed.is_discarded()) return bad_request(std::string("'") + field + "' is not valid JSON", field);
            r.json_schema = parsed;
        } else if (v.is_object()) {
            r.json_schema = v;
        } else {
            return bad_request(std::string("'") + field + "' must be a JSON schema", field);
        }
        return std::nullopt;
    };
    if (const ojson* g = rd.get("guided_json"))
        if (auto e = schema_field(*g, "guided_json")) return e;
    if (const ojson* so = rd.get("structured_outputs")) {
        if (!so->is_object()) return bad_request("'structured_outputs' must be an object", "structured_outputs");
        if (so->contains("json")) {
            if (auto e = schema_field((*so)["json"], "structured_outputs")) return e;
        } else if (so->contains("json_object") && (*so)["json_object"] == true) {
            r.json_object = true;
        } else if (!so->empty()) {
            return bad_request("'structured_outputs' supports 'json' (a schema) and 'json_object' only",
                               "structured_outputs");
        }
    }
    if (r.json_object && !r.json_schema.is_null())
        return bad_request("give either a JSON schema or json_object, not both", "response_format");
    return std::nullopt;
}

std::optional<ApiError> parse_token_ids(const ojson& arr, std::vector<int32_t>& out, const char* param) {
    for (const auto& t : arr) {
        if (!t.is_number_integer()) return bad_request(fmt::format("'{}' must hold integer token ids", param), param);
        if (t.is_number_unsigned() ? t.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max())
                                   : (t.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
                                      t.get<int64_t>() > std::numeric_limits<int32_t>::max()))
            return bad_request(fmt::format("token id in '{}' is out of range", param), param);
        out.push_back(int32_t(t.get<int64_t>()));
    }
    return std::nullopt;
}

std::optional<ApiError> parse_messages(const ojson& m) {
    if (!m.is_array()) return bad_request("'messages' must be an array", "messages");
    if (m.empty()) return bad_request("'messages' must not be empty", "messages");
    static const char* kRoles[] = {"system", "user", "assistant", "tool", "developer", "latest_reminder"};
    for (size_t i = 0; i < m.size(); ++i) {
        const auto& msg = m[i];
        const std::string where = fmt::format("messages[{}]", i);
        if (!msg.is_object()) return bad_request(where + " must be an object", "messages");
        auto role = msg.find("role");
        if (role == msg.end() || !role->is_string()) return bad_request(where + ".role must be a string", "messages");
        bool known = false;
        for (const char* r : kRoles) known |= *role == r;
        if (!known)
            return bad_request(where + ".role must be one of system, user, assistant, tool, developer", "messages");
        auto content = msg.find("content");
        if (content != msg.end() && !content->is_null() && !content->is_string() && !content->is_array())
            return bad_request(where + ".content must be a string or an array of parts", "messages");
        if (content != msg.end() && content->is_array()) {
            for (const auto& part : *content) {
                if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
                    return bad_request(where + ".content parts must be objects with a type", "messages");
                if (part["type"] == "text" && (!part.contains("text") || !part["text"].is_string()))
                    return bad_request(where + ".content text parts need a string 'text'", "messages");
            }
        }
        if (*role != "assistant" && (content == msg.end() || content->is_null()))
            return bad_request(where + ".content is required", "messages");
        if (auto tc = msg.find("tool_calls"); tc != msg.end() && !tc->is_null() && !tc->is_array())
            return bad_request(where + ".tool_calls must be an array", "messages");
    }
    return std::nullopt;
}

std::optional<ApiError> parse_tools(const ojson& t) {
    if (!t.is_array()) return bad_request("'tools' must be an array", "tools");
    for (size_t i = 0; i < t.size(); ++i) {
        const auto& tool = t[i];
        if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object() ||
            !tool["function"].contains("name") || !tool["function"]["name"].is_string())
            return bad_request(fmt::format("tools[{}] must be {{\"type\": \"function\", "
                                           "\"function\": {{\"name\": ...}}}}",
                                           i),
                               "tools");
        if (tool.contains("type") && tool["type"] != "function")
            return bad_request(fmt::format("tools[{}].type must be \"function\"", i), "tools");
    }
    return std::nullopt;
}

}  // namespace

ChatOptions chat_options(const ParsedRequest& r) {
    ChatOptions co;
    co.thinking = r.thinking;
    co.reasoning_effort = r.reasoning_effort;
    if (r.tools_enabled && !r.tools.is_null()) co.tools = r.tools;
    if (!r.response_format.is_null()) co.response_format = r.response_format;
    return co;
}

std::variant<ParsedRequest, ApiError> parse_openai_request(std::string_view body, bool chat,
                                                           const SamplingParams* defaults) {
    if (body.empty()) return bad_request("the request body is empty; send a JSON object");
    if (!nesting_ok(body)) return bad_request("the JSON body is nested too deeply");
    ojson j = ojson::parse(body.begin(), body.end(), nullptr, false);
    if (j.is_discarded()) return bad_request("the request body is not valid JSON (UTF-8)");
    if (!j.is_object()) return bad_request("the request body must be a JSON object");

    ParsedRequest r;
    r.chat = chat;
    if (defaults) r.params = *defaults;
    Reader rd(j);
    try {
        if (const ojson* m = rd.get("model")) {
            if (!m->is_string()) return bad_request("'model' must be a string", "model");
            r.model = m->get<std::string>();
        }
        rd.boolean("stream", r.stream);
        if (const ojson* so = rd.get("stream_options")) {
            if (!so->is_object()) return bad_request("'stream_options' must be an object", "stream_options");
            Reader sr(*so);
            sr.boolean("include_usage", r.include_usage);
            if (sr.err) return *sr.err;
        }
        rd.number("temperature", r.params.temperature, 0.0, 2.0);
        rd.number("top_p", r.params.top_p, 0.0, 1.0, /*lo_open=*/true);
        int64_t v = 0;
        if (rd.integer("top_k", v, -1, 1 << 30)) r.params.top_k = v < 0 ? 0 : int(v);
        rd.number("min_p", r.params.min_p, 0.0, 1.0);
        rd.number("presence_penalty", r.params.presence_penalty, -2.0, 2.0);
        rd.number("frequency_penalty", r.params.frequency_penalty, -2.0, 2.0);
        rd.number("repetition_penalty", r.params.repetition_penalty, 0.0, 2.0, true);
        const char* mt_key = chat && rd.get("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
        if (rd.integer(mt_key, v, 1, 1 << 30)) {
            r.params.max_tokens = v;
            r.max_tokens_given = true;
        }
        if (rd.integer("min_tokens", v, 0, 1 << 30)) r.params.min_tokens = v;
        if (rd.integer("n", v, 1, kMaxN)) r.n = int(v);
        if (const ojson* s = rd.get("seed")) {
            if (!s->is_number_integer()) return bad_request("'seed' must be an integer", "seed");
            r.params.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
        }
        rd.boolean("ignore_eos", r.params.ignore_eos);
        rd.boolean("skip_special_tokens", r.skip_special_tokens);
        rd.boolean("return_token_ids", r.return_token_ids);
        if (auto e = parse_structured_output(rd, r)) return *e;
        if (const ojson* cs = rd.get("cache_salt")) {  // vLLM's field: tenants share no cached prefix
            if (!cs->is_string() || cs->get<std::string>().empty() || cs->get<std::string>().size() > 4096)
                return bad_request("'cache_salt' must be a non-empty string of at most 4096 bytes", "cache_salt");
            r.cache_salt = cs->get<std::string>();
        }
        if (const ojson* s = rd.get("stop")) {
            if (s->is_string()) {
                r.stop.push_back(s->get<std::string>());
            } else if (s->is_array() && s->size() <= kMaxStops) {
                for (const auto& x : *s) {
                    if (!x.is_string()) return bad_request("'stop' must hold strings", "stop");
                    r.stop.push_back(x.get<std::string>());
                }
            } else {
                return bad_request(fmt::format("'stop' must be a string or an array of at most "
                                               "{} strings",
                                               kMaxStops),
                                   "stop");
            }
        }
        if (const ojson* lb = rd.get("logit_bias"); lb && !lb->is_null()) {
            // OpenAI: {"token id": bias in [-100, 100]}; keys are decimal token ids.
            if (!lb->is_object() || lb->size() > kMaxLogitBias)
                return bad_request(fmt::format("'logit_bias' must be an object of at most {} token ids", kMaxLogitBias),
                                   "logit_bias");
            r.params.logit_bias.clear();
            for (const auto& [k, b] : lb->items()) {
                int64_t id = -1;
                const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), id);
                if (ec != std::errc() || end != k.data() + k.size() || id < 0 || id > INT32_MAX)
                    return bad_request(fmt::format("'logit_bias' keys must be token ids, got '{}'", k.substr(0, 40)),
                                       "logit_bias");
                if (!b.is_number() || !(b.get<double>() >= -100.0 && b.get<double>() <= 100.0))
                    return bad_request("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
                r.params.logit_bias.emplace_back(int32_t(id), float(b.get<double>()));
            }
        }
        if (const ojson* s = rd.get("stop_token_ids")) {
            if (!s->is_array()) return bad_request("'stop_token_ids' must be an array", "stop_token_ids");
            if (auto e = parse_token_ids(*s, r.params.stop_token_ids, "stop_token_ids")) return *e;
        }
        if (chat) {
            bool lp = false;
            rd.boolean("logprobs", lp);
            if (rd.integer("top_logprobs", v, 0, kMaxTopLogprobs)) {
                if (!lp) return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
                r.params.logprobs = int(v);
            } else if (lp) {
                r.params.logprobs = 0;
            }
        } else if (rd.integer("logprobs", v, 0, kMaxTopLogprobs)) {
            r.params.logprobs = int(v);
        }
        if (rd.err) return *rd.err;

        if (chat) {
            const ojson* m = rd.get("messages");
            if (!m) return bad_request("'messages' is required", "messages");
            if (auto e = parse_messages(*m)) return *e;
            r.messages = *m;
            if (const ojson* t = rd.get("tools")) {
                if (auto e = parse_tools(*t)) return *e;
                r.tools = *t;
            }
            if (const ojson* tc = rd.get("tool_choice")) {
                if (tc->is_string()) {
                    if (*tc != "none" && *tc != "auto" && *tc != "required")
                        return bad_request(
                            "'tool_choice' must be none, auto, required or an "
                            "object",
                            "tool_choice");
                    r.tools_enabled = *tc != "none";
                    r.tool_choice = tc->get<std::string>();
                } else if (!tc->is_object() || !tc->contains("function") || !(*tc)["function"].is_object() ||
                           !(*tc)["function"].contains("name") || !(*tc)["function"]["name"].is_string()) {
                    return bad_request(
                        "'tool_choice' must be none, auto, required or "
                        "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                        "tool_choice");
                } else {
                    r.tool_choice = "function";
                    r.tool_choice_name = (*tc)["function"]["name"].get<std::string>();
                }
            }
            rd.boolean("parallel_tool_calls", r.parallel_tool_calls);
            if (const ojson* e = rd.get("reasoning_effort")) {
                if (!e->is_string()) return bad_request("'reasoning_effort' must be a string", "reasoning_effort");
                r.reasoning_effort = e->get<std::string>();
                r.thinking = r.reasoning_effort != "none";
            }
            // DeepSeek's {"thinking": {"type": "enabled"}}, a plain boolean, or vLLM's
            // chat_template_kwargs {"thinking": true} / {"enable_thinking": true}.
            if (const ojson* t = rd.get("thinking")) {
                if (t->is_boolean())
                    r.thinking = t->get<bool>();
                else if (t->is_object() && t->contains("type") && (*t)["type"].is_string())
                    r.thinking = (*t)["type"] == "enabled";
                else
                    return bad_request(
                        "'thinking' must be a boolean or {\"type\": "
                        "\"enabled\"|\"disabled\"}",
                        "thinking");
            }
            if (const ojson* k = rd.get("chat_template_kwargs")) {
                if (!k->is_object())
                    return bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
                for (const char* key : {"thinking", "enable_thinking"})
                    if (k->contains(key) && (*k)[key].is_boolean()) r.thinking = (*k)[key].get<bool>();
            }
        } else {
            const ojson* p = rd.get("prompt");
            if (!p) return bad_request("'prompt' is required", "prompt");
            const ojson* one = p;
            if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
                if (p->size() != 1)
                    return bad_request(
                        "batched prompts are not supported; send one prompt per "
                        "request",
                        "prompt");
                one = &p->front();
            }
            if (one->is_string()) {
                r.prompt_text = one->get<std::string>();
            } else if (one->is_array()) {
                if (auto e = parse_token_ids(*one, r.prompt_ids, "prompt")) return *e;
                r.prompt_is_ids = true;
            } else {
                return bad_request("'prompt' must be a string or an array of token ids", "prompt");
            }
            rd.boolean("echo", r.echo);
            if (r.echo) return bad_request("'echo' is not supported", "echo");
            if (rd.err) return *rd.err;
        }
    } catch (const nlohmann::json::exception& e) {
        // Defensive: every access above is type-checked first.
        return bad_request(std::string("malformed request: ") + e.what());
    }
    if (rd.err) return *rd.err;
    return r;
}

}  // namespace dsv4
