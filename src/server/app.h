// App: the OpenAI-compatible HTTP API over an Engine and a Tokenizer: routing, validation,
// prompt building (chat template + tokenizer), admission errors, /health, /v1/models and
// /metrics. Transport-free: the HTTP server hands it requests and a ResponseWriter.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "sched/engine.h"
#include "server/api_error.h"
#include "server/response_writer.h"
#include "constrain/vocab_index.h"
#include "sample/token_constraint.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct HttpRequest {
    std::string method;        // "GET", "POST", ...
    std::string target;        // path and query
    std::string content_type;  // "" when absent
    std::string body;
    std::string authorization;  // the Authorization header, "" when absent
};

// Front-end counters for /metrics (the engine has its own).
struct ServerStats {
    std::atomic<int64_t> connections_open{0};
    std::atomic<int64_t> connections_total{0};
    std::atomic<int64_t> requests_total{0};
    std::atomic<int64_t> responses_2xx{0};
    std::atomic<int64_t> responses_4xx{0};
    std::atomic<int64_t> responses_429{0};
    std::atomic<int64_t> responses_5xx{0};
    std::atomic<int64_t> streams_open{0};
    std::atomic<int64_t> replies_pending{0};  // requests read whose reply is not yet all written
    std::atomic<int64_t> client_disconnects{0};
    std::atomic<int64_t> request_timeouts{0};  // requests not received within request_timeout_s
    std::atomic<int64_t> slow_readers{0};      // closed over the write-buffer cap or the write timeout
};

struct AppOptions {
    std::string model_name = "deepseek-v4";
    // Values of the sampling fields a request omits (the model's generation_config.json, see
    // server/generation_defaults.h); default_max_tokens replaces the context-room default.
    SamplingParams defaults;
    std::optional<int64_t> default_max_tokens;
    // Non-empty: every /v1 route and /tokenize, /detokenize need "Authorization: Bearer <api_key>"
    // (401 otherwise; compared in constant time); with guard_health_metrics also /health and /metrics.
    std::string api_key;
    bool guard_health_metrics = false;
    // GET /health answers 503 when requests are pending and the engine has shown no progress for
    // this many seconds (EngineStats::progress_us); 0: never.
    double health_stall_s = 60.0;
};

class App {
public:
    App(Engine& engine, Tokenizer tok, AppOptions opt);
    void handle(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& w);
    ServerStats& stats() { return stats_; }
    const std::string& model_name() const { return opt_.model_name; }
    std::string metrics_text() const;

    // Sends an error reply and counts it.
    void send_error(ResponseWriter& w, const ApiError& e, const HeaderList& extra = {});
    void count_status(int status);
    // Graceful shutdown: from now on generation and tokenize routes answer 503 (Retry-After) and
    // /health answers 503 "draining", while requests already admitted run to completion.
    void set_draining() { draining_ = true; }
    bool draining() const { return draining_; }

private:
    void generate(const HttpRequest& req, bool chat, const std::shared_ptr<ResponseWriter>& w);
    void tokenize(const HttpRequest& req, ResponseWriter& w);
    void detokenize(const HttpRequest& req, ResponseWriter& w);
    void health(ResponseWriter& w);
    void ready(ResponseWriter& w);
    bool authorized(const HttpRequest& req) const;
    // The request's structured-output constraint (null: none); an ApiError for a bad schema.
    std::variant<std::shared_ptr<const TokenConstraint>, ApiError> constraint_for(const ParsedRequest& req) const;
    // The request's enforced tool calls (null: none) and the token it starts after (-1: the first).
    std::variant<std::shared_ptr<const TokenConstraint>, ApiError> tool_constraint_for(const ParsedRequest& req,
                                                                                       int32_t* after) const;

    Engine& engine_;
    Tokenizer tok_;
    // The vocabulary as bytes for constrained decoding (special tokens left out), built once.
    std::shared_ptr<const constrain::VocabIndex> vocab_;
    AppOptions opt_;
    ServerStats stats_;
    std::atomic<bool> draining_{false};
};

}  // namespace dsv4
