// App implementation (see app.h).
#include "server/app.h"

#include <algorithm>
#include <limits>

#include "constrain/json_constraint.h"
#include "constrain/json_schema.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "server/generation.h"
#include "server/openai_request.h"
#include "tokenizer/chat_encoding.h"

namespace dsv4 {
namespace {

using json = nlohmann::json;

bool is_json_type(const std::string& ct) {
    // "application/json", "application/json; charset=utf-8", "application/vnd.x+json"
    return ct.find("json") != std::string::npos;
}

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

ApiError status_to_error(const Status& s) {
    switch (s.code()) {
        case StatusCode::kResourceExhausted:
            return ApiError{429, s.message(), "rate_limit_error", {}, "server_busy"};
        case StatusCode::kUnavailable:
            return ApiError{503, s.message(), "server_error", {}, "unavailable"};
        case StatusCode::kOutOfRange:
            return ApiError{400, s.message(), "invalid_request_error", "prompt", "context_length_exceeded"};
        case StatusCode::kInvalidArgument:
            return ApiError{400, s.message(), "invalid_request_error", {}, {}};
        default:
            return ApiError{500, s.message(), "server_error", {}, {}};
    }
}

}  // namespace

namespace {

std::shared_ptr<const constrain::VocabIndex> vocab_bytes(const Tokenizer& tok, int64_t model_vocab) {
    std::vector<std::string> bytes(size_t(std::max<int64_t>(model_vocab, 0)));
    for (int64_t id = 0; id < model_vocab && id < tok.vocab_size(); ++id)
        if (!tok.is_special(int32_t(id))) bytes[size_t(id)] = std::string(tok.token_bytes(int32_t(id), false));
    return std::make_shared<const constrain::VocabIndex>(std::move(bytes));
}

}  // namespace

App::App(Engine& engine, Tokenizer tok, AppOptions opt)
    : engine_(engine), tok_(std::move(tok)), vocab_(vocab_bytes(tok_, engine.vocab_size())), opt_(std::move(opt)) {}

std::variant<std::shared_ptr<const TokenConstraint>, ApiError> App::constraint_for(const ParsedRequest& req) const {
    if (!req.json_object && req.json_schema.is_null()) return std::shared_ptr<const TokenConstraint>();
    constrain::CompiledSchema schema = constrain::any_json_object();
    if (!req.json_object) {
        auto compiled = constrain::compile_json_schema(nlohmann::json::parse(req.json_schema.dump()));
        if (!compiled.is_ok()) return bad_request(compiled.status().message(), "response_format");
        schema = std::move(compiled.value());
    }
    return std::shared_ptr<const TokenConstraint>(
        constrain::make_json_constraint(std::make_shared<const constrain::CompiledSchema>(std::move(schema)), vocab_));
}

// tool_choice required / a named function: the output is a DSML block of the allowed tools with
// arguments that match their schemas (from the start, or after </think>). auto with a strict tool
// or parallel_tool_calls false: the same rules once the model starts a block (after its DSML
// token). Parameter schemas constrained decoding cannot enforce are a 400 for a strict tool and
// any JSON value otherwise.
std::variant<std::shared_ptr<const TokenConstraint>, ApiError> App::tool_constraint_for(const ParsedRequest& req,
                                                                                        int32_t* after) const {
    using json = nlohmann::json;
    *after = -1;
    if (!req.chat || !req.tools.is_array() || req.tools.empty() || req.tool_choice == "none")
        return std::shared_ptr<const TokenConstraint>();
    const bool forced = req.tool_choice == "required" || req.tool_choice == "function";
    bool strict = false;
    for (const auto& t : req.tools) strict = strict || t["function"].value("strict", false) == true;
    if (!forced && !strict && req.parallel_tool_calls) return std::shared_ptr<const TokenConstraint>();
    auto g = std::make_shared<constrain::ToolGrammar>();
    g->max_calls = req.parallel_tool_calls ? -1 : 1;
    for (const auto& t : req.tools) {
        const auto& fn = t["function"];
        const std::string name = fn["name"].get<std::string>();
        if (req.tool_choice == "function" && name != req.tool_choice_name) continue;
        const bool tool_strict = fn.value("strict", false) == true;
        constrain::ToolSpec spec;
        spec.name = name;
        const json params = fn.contains("parameters") ? json::parse(fn["parameters"].dump()) : json::object();
        if (params.contains("properties") && params["properties"].is_object()) {
            std::vector<std::string> required;
            if (params.contains("required") && params["required"].is_array())
                for (const auto& r : params["required"])
                    if (r.is_string()) required.push_back(r.get<std::string>());
            for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it) {
                auto c = constrain::compile_json_schema(it.value());
                if (!c.is_ok()) {
                    if (tool_strict)
                        return bad_request(
                            fmt::format("tool '{}' parameter '{}': {}", name, it.key(), c.status().message()), "tools");
                    c = constrain::compile_json_schema(json(true));
                }
                const auto kind = c->nodes[size_t(c->root)].kind;
                spec.params.push_back(it.key());
                spec.flags.push_back(kind == constrain::SchemaNode::Kind::kString ? 1
                                     : kind == constrain::SchemaNode::Kind::kAny  ? 3
                                                                                  : 2);
                spec.schemas.push_back(std::make_shared<const constrain::CompiledSchema>(std::move(c.value())));
                spec.required.push_back(std::find(required.begin(), required.end(), it.key()) != required.end());
            }
            spec.open = !tool_strict && params.value("additionalProperties", json(true)) != json(false);
        }
        g->tools.push_back(std::move(spec));
    }
    if (g->tools.empty())
        return bad_request(
            fmt::format("tool_choice names '{}', which is not among the tools", req.tool_choice_name.substr(0, 200)),
            "tool_choice");
    const bool opened = !forced;
    if (forced) {
        if (req.thinking) *after = tok_.token_to_id("</think>").value_or(-1);
    } else {
        *after = tok_.token_to_id("｜DSML｜").value_or(-1);
        if (*after < 0) return std::shared_ptr<const TokenConstraint>();
    }
    return std::shared_ptr<const TokenConstraint>(
        std::make_shared<constrain::ToolCallConstraint>(constrain::DsmlMatcher(g, opened), vocab_));
}

void App::count_status(int status) {
    if (status < 300)
        ++stats_.responses_2xx;
    else if (status < 500)
        ++stats_.responses_4xx;
    else
        ++stats_.responses_5xx;
    if (status == 429) ++stats_.responses_429;
}

void App::send_error(ResponseWriter& w, const ApiError& e, const HeaderList& extra) {
    count_status(e.status);
    w.send(e.status, "application/json", e.body(), extra);
}

bool App::authorized(const HttpRequest& req) const {
    if (opt_.api_key.empty()) return true;
    const std::string want = "Bearer " + opt_.api_key;
    const std::string& got = req.authorization;
    // Constant time in the key: every byte of the expected value is compared, whatever matched.
    unsigned diff = got.size() == want.size() ? 0u : 1u;
    for (size_t i = 0; i < want.size(); ++i) diff |= unsigned(uint8_t(want[i]) ^ uint8_t(i < got.size() ? got[i] : 0));
    return diff == 0;
}

// Liveness: 503 "failed" once the engine failed for good (a lost GPU: the process is about to exit
// and must be restarted), 503 "draining" after SIGTERM, 503 "stalled" when requests wait and the
// engine made no progress for health_stall_s; else 200.
void App::health(ResponseWriter& w) {
    if (engine_.failed()) {
        count_status(503);
        w.send(503, "application/json", json{{"status", "failed"}, {"reason", engine_.fatal_error().message()}}.dump());
        return;
    }
    if (draining_) {
        count_status(503);
        w.send(503, "application/json", R"({"status":"draining"})");
        return;
    }
    const EngineStats& es = engine_.stats();
    const int64_t pending = es.running_requests.load() + es.waiting_requests.load();
    const double idle_s = double(steady_now_us() - es.progress_us.load()) / 1e6;
    if (opt_.health_stall_s > 0 && pending > 0 && idle_s > opt_.health_stall_s) {
        count_status(503);
        w.send(503, "application/json",
               json{{"status", "stalled"}, {"pending_requests", pending}, {"seconds_since_progress", idle_s}}.dump());
        return;
    }
    count_status(200);
    w.send(200, "application/json", R"({"status":"ok"})");
}

// Readiness (GET /ready), apart from liveness (/health): 503 while draining or while the waiting
// queue is full (a new request would get 429), so a load balancer routes elsewhere without the
// process being restarted; 503 "failed" (with the error) once the engine failed for good; 200 otherwise.
void App::ready(ResponseWriter& w) {
    const int64_t waiting = engine_.stats().waiting_requests.load();
    const int64_t cap = engine_.config().max_queued;
    const char* why = engine_.failed() ? "failed" : draining_ ? "draining" : waiting >= cap ? "queue full" : nullptr;
    if (why) {
        json body{{"status", "not ready"}, {"reason", why}, {"waiting_requests", waiting}};
        if (engine_.failed()) body["error"] = engine_.fatal_error().message();
        count_status(503);
        w.send(503, "application/json", body.dump(), {{"Retry-After", "1"}});
        return;
    }
    count_status(200);
    w.send(200, "application/json", json{{"status", "ready"}, {"waiting_requests", waiting}}.dump());
}

// vLLM's POST /tokenize: {"prompt": text} or {"messages": [...]} (the chat format, with the
// generation prompt) -> {"count", "max_model_len", "tokens"}.
void App::tokenize(const HttpRequest& req, ResponseWriter& w) {
    const json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return send_error(w, bad_request("the request body must be a JSON object"));
    std::string text;
    if (j.contains("messages")) {
        // The chat request parser validates the messages (and tools) as /v1/chat/completions does;
        // it ignores the keys it does not read (vLLM's add_generation_prompt, add_special_tokens).
        auto parsed = parse_openai_request(req.body, true, &opt_.defaults);
        if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(w, *e);
        const ParsedRequest& pr = std::get<ParsedRequest>(parsed);
        auto rendered = render_chat(pr.messages, chat_options(pr));
        if (!rendered.is_ok()) return send_error(w, bad_request(rendered.status().message(), "messages"));
        text = *rendered;
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
        text = j["prompt"].get<std::string>();
    } else {
        return send_error(w, bad_request("send 'prompt' (a string) or 'messages'", "prompt"));
    }
    auto ids = tok_.encode(text);
    if (!ids.is_ok())
        return send_error(w, ApiError{400, ids.status().message(), "invalid_request_error", "prompt", {}});
    count_status(200);
    w.send(200, "application/json",
           json{{"count", ids->size()}, {"max_model_len", engine_.max_context()}, {"tokens", *ids}}.dump());
}

// vLLM's POST /detokenize: {"tokens": [ids]} -> {"prompt": text} (special tokens kept).
void App::detokenize(const HttpRequest& req, ResponseWriter& w) {
    const json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
        return send_error(w, bad_request("the body must be {\"tokens\": [token ids]}", "tokens"));
    std::vector<int32_t> ids;
    for (const auto& t : j["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok_.vocab_size())
            return send_error(
                w, bad_request(fmt::format("'tokens' must hold token ids in [0, {})", tok_.vocab_size()), "tokens"));
        ids.push_back(int32_t(t.get<int64_t>()));
    }
    count_status(200);
    w.send(200, "application/json",
           json{{"prompt", tok_.decode(ids, false)}}.dump(-1, ' ', false, json::error_handler_t::replace));
}

void App::handle(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w) {
    ++stats_.requests_total;
    const std::string path = path_of(req.target);
    const bool get = req.method == "GET" || req.method == "HEAD";
    const bool post = req.method == "POST";
    const bool open_route = (path == "/health" || path == "/ready" || path == "/metrics") && !opt_.guard_health_metrics;
    if (!open_route && !authorized(req)) {
        send_error(*w,
                   ApiError{401,
                            "missing or invalid API key (send 'Authorization: Bearer <key>')",
                            "invalid_request_error",
                            {},
                            "invalid_api_key"},
                   {{"WWW-Authenticate", "Bearer"}});
        return;
    }
    if (path == "/ready" && get) {
        ready(*w);
        return;
    }
    if (path == "/health" && get) {
        health(*w);
        return;
    }
    if (draining_ && post && path != "/detokenize") {
        send_error(*w, ApiError{503, "the server is shutting down", "server_error", {}, "shutting_down"},
                   {{"Retry-After", "1"}});
        return;
    }
    if (path == "/tokenize" && post) {
        tokenize(req, *w);
    } else if (path == "/detokenize" && post) {
        detokenize(req, *w);
    } else if (path == "/metrics" && get) {
        count_status(200);
        w->send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_text());
    } else if (path == "/v1/models" && get) {
        json m = {{"object", "list"},
                  {"data", json::array({json{{"id", opt_.model_name},
                                             {"object", "model"},
                                             {"created", 0},
                                             {"owned_by", "dsv4"},
                                             {"max_model_len", engine_.max_context()}}})}};
        count_status(200);
        w->send(200, "application/json", m.dump());
    } else if ((path == "/flush_cache" || path == "/reset_prefix_cache") && post) {
        // SGLang's and vLLM's names: drop every cached prefix block (those in use stay with their requests).
        engine_.flush_prefix_cache();
        count_status(200);
        w->send(200, "application/json", R"({"status":"ok"})");
    } else if (path == "/v1/chat/completions" && post) {
        generate(req, true, w);
    } else if (path == "/v1/completions" && post) {
        generate(req, false, w);
    } else if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/health" || path == "/metrics" ||
               path == "/v1/models" || path == "/tokenize" || path == "/detokenize" || path == "/ready" ||
               path == "/flush_cache" || path == "/reset_prefix_cache") {
        send_error(*w, ApiError{405,
                                fmt::format("method {} is not allowed on {}", req.method.substr(0, 16), path),
                                "invalid_request_error",
                                {},
                                "method_not_allowed"});
    } else {
        send_error(*w, ApiError{404, "no such endpoint", "invalid_request_error", {}, "not_found"});
    }
}

void App::generate(const HttpRequest& hreq, bool chat, const std::shared_ptr<ResponseWriter>& w) {
    if (!is_json_type(hreq.content_type)) {
        send_error(
            *w,
            ApiError{
                415, "Content-Type must be application/json", "invalid_request_error", {}, "unsupported_media_type"});
        return;
    }
    auto parsed = parse_openai_request(hreq.body, chat, &opt_.defaults);
    if (auto* e = std::get_if<ApiError>(&parsed)) {
        send_error(*w, *e);
        return;
    }
    ParsedRequest req = std::move(std::get<ParsedRequest>(parsed));
    if (!req.model.empty() && req.model != opt_.model_name) {
        send_error(*w, ApiError{404,
                                fmt::format("the model '{}' does not exist; this server "
                                            "serves '{}'",
                                            req.model.substr(0, 200), opt_.model_name),
                                "invalid_request_error", "model", "model_not_found"});
        return;
    }

    std::vector<int32_t> prompt;
    if (chat) {
        auto text = render_chat(req.messages, chat_options(req));
        if (!text.is_ok()) {
            send_error(*w, bad_request(text.status().message(), "messages"));
            return;
        }
        auto ids = tok_.encode(*text);
        if (!ids.is_ok()) {
            send_error(*w, ApiError{500, ids.status().message(), "server_error", {}, {}});
            return;
        }
        prompt = std::move(ids.value());
    } else if (req.prompt_is_ids) {
        prompt = req.prompt_ids;
    } else {
        auto ids = tok_.encode(req.prompt_text);
        if (!ids.is_ok()) {
            send_error(*w, ApiError{500, ids.status().message(), "server_error", {}, {}});
            return;
        }
        prompt = std::move(ids.value());
    }
    if (prompt.empty()) {
        send_error(*w, bad_request("the prompt is empty", "prompt"));
        return;
    }
    const int64_t room = engine_.max_context() - int64_t(prompt.size());
    if (!req.max_tokens_given) {
        const int64_t want = opt_.default_max_tokens ? *opt_.default_max_tokens : chat ? room : 16;
        req.params.max_tokens = std::max<int64_t>(1, std::min(want, room));
    }

    auto constraint = constraint_for(req);
    if (auto* e = std::get_if<ApiError>(&constraint)) {
        send_error(*w, *e);
        return;
    }
    int32_t tool_after = -1;
    auto tool_constraint = tool_constraint_for(req, &tool_after);
    if (auto* e = std::get_if<ApiError>(&tool_constraint)) {
        send_error(*w, *e);
        return;
    }
    if (req.tool_choice == "none" && req.chat && req.tools.is_array()) {
        // No tool call: the DSML token that opens a block never comes.
        if (auto dsml = tok_.token_to_id("｜DSML｜")) {
            auto& lb = req.params.logit_bias;
            lb.erase(std::remove_if(lb.begin(), lb.end(), [&](const auto& e) { return e.first == *dsml; }), lb.end());
            lb.emplace_back(*dsml, -std::numeric_limits<float>::infinity());
        }
    }

    const uint64_t id = engine_.next_request_id();
    auto handler =
        std::make_shared<GenerationHandler>(engine_, tok_, opt_.model_name, req, id, int64_t(prompt.size()), w);
    GenRequest g{.id = id, .prompt = std::move(prompt), .params = req.params, .n = req.n, .sink = handler};
    if (!req.cache_salt.empty()) g.cache_salt = std::hash<std::string>{}(req.cache_salt) | 1;
    g.constraint = std::get<std::shared_ptr<const TokenConstraint>>(constraint);
    // In thinking mode the answer follows the reasoning: the constraint starts after </think>.
    if (g.constraint && chat && req.thinking) g.constraint_after = tok_.token_to_id("</think>").value_or(-1);
    // A forced tool call takes precedence over a response format (the output is the call).
    const auto& tc = std::get<std::shared_ptr<const TokenConstraint>>(tool_constraint);
    if (tc && (!g.constraint || req.tool_choice == "required" || req.tool_choice == "function")) {
        g.constraint = tc;
        g.constraint_after = tool_after;
    }
    if (Status s = engine_.submit(std::move(g)); !s.is_ok()) {
        const ApiError e = status_to_error(s);
        HeaderList extra;
        if (e.status == 429 || e.status == 503) extra.emplace_back("Retry-After", "1");
        send_error(*w, e, extra);
        return;
    }
    std::weak_ptr<GenerationHandler> weak = handler;
    ServerStats* st = &stats_;
    w->on_disconnect([weak, st] {
        ++st->client_disconnects;
        if (auto h = weak.lock()) h->cancel();
    });
    count_status(200);
    handler->begin();
}

}  // namespace dsv4
