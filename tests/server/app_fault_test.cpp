// The HTTP side of an unrecoverable device error (issue 21 item 5), on the FakeRunner's stand-in
// (FakeRunnerOptions::fault_inject_step): the generation replies of the failed requests are a 500
// or an SSE error event naming the fault, /health and /ready answer 503 "failed" with it, a new
// request gets 503 with Retry-After, and /metrics shows dsv4_engine_failed 1.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "sched/engine.h"
#include "sched/fake_runner.h"
#include "server/app.h"
#include "tests/server/fault_test_util.h"

namespace dsv4 {
namespace {

using test::RecordingWriter;
using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

HttpRequest get(const std::string& path) {
    HttpRequest r;
    r.method = "GET";
    r.target = path;
    return r;
}
HttpRequest completion(bool stream) { return test::completion_request({5, 6, 7, 8, 9}, 40, stream); }
std::shared_ptr<RecordingWriter> handle(App& app, const HttpRequest& r) {
    auto w = std::make_shared<RecordingWriter>();
    w->post([&] { app.handle(r, w); });
    return w;
}

// Two requests (one streaming) admitted before the engine starts, so both are in the step that
// faults.
TEST(AppFault, RepliesAre5xxAndHealthAndReadyAnswer503) {
    EngineConfig cfg;
    Engine engine(std::make_unique<FakeRunner>(test::faulty_fake_model(2)), cfg);
    App app(engine, test::byte_tokenizer(), AppOptions{});
    EXPECT_EQ(handle(app, get("/health"))->status, 200);
    auto plain = handle(app, completion(false));
    auto streamed = handle(app, completion(true));
    engine.start();
    ASSERT_TRUE(plain->wait_done(60s));
    ASSERT_TRUE(streamed->wait_done(60s));

    EXPECT_EQ(plain->status, 500);
    EXPECT_TRUE(contains(plain->body, "injected device fault")) << plain->body;
    EXPECT_TRUE(streamed->streamed);
    EXPECT_TRUE(contains(streamed->body, "\"error\"")) << streamed->body;
    EXPECT_TRUE(contains(streamed->body, "injected device fault")) << streamed->body;
    EXPECT_TRUE(contains(streamed->body, "data: [DONE]")) << streamed->body;

    auto health = handle(app, get("/health"));
    EXPECT_EQ(health->status, 503);
    const auto hj = nlohmann::json::parse(health->body);
    EXPECT_EQ(hj.value("status", ""), "failed");
    EXPECT_TRUE(contains(hj.value("reason", ""), "injected device fault")) << health->body;
    auto ready = handle(app, get("/ready"));
    EXPECT_EQ(ready->status, 503);
    EXPECT_EQ(nlohmann::json::parse(ready->body).value("reason", ""), "failed") << ready->body;
    EXPECT_TRUE(contains(ready->body, "injected device fault")) << ready->body;
    auto refused = handle(app, completion(false));
    EXPECT_EQ(refused->status, 503);
    EXPECT_EQ(refused->header("Retry-After"), "1");
    EXPECT_TRUE(contains(refused->body, "must be restarted")) << refused->body;
    EXPECT_TRUE(contains(handle(app, get("/metrics"))->body, "\ndsv4_engine_failed 1\n"));
    engine.stop();
}

}  // namespace
}  // namespace dsv4
