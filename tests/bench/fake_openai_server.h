// A tiny OpenAI-compatible streaming server for the bench tests: GET /v1/models and
// streaming POST /v1/chat/completions and /v1/completions (chunked SSE, usage chunk when
// asked, then "data: [DONE]"). Token timing imitates a batching engine: each token takes
// per_token_ms plus per_active_ms for every other stream in flight, so throughput rises
// with concurrency while per-user speed falls. Runs its own io thread; port 0 picks a free
// port.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

namespace dsv4::bench::testing {

struct FakeServerOptions {
    std::string model = "fake-model";
    double ttft_ms = 2.0;  // before the first token
    double per_token_ms = 1.0;
    double per_active_ms = 0.05;  // extra per concurrently active stream
    bool send_usage = true;       // honour stream_options.include_usage
    int prompt_tokens = 7;        // reported in usage
};

class FakeOpenAiServer {
public:
    explicit FakeOpenAiServer(FakeServerOptions opt = {});
    ~FakeOpenAiServer();
    FakeOpenAiServer(const FakeOpenAiServer&) = delete;
    FakeOpenAiServer& operator=(const FakeOpenAiServer&) = delete;

    int port() const;
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
    int requests_served() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::bench::testing
