// The serving loop (server/serve_loop.h) after an unrecoverable device error (issue 21 item 5): it
// ends by itself, without a signal, within a bounded time, with exit status kExitEngineFailed and
// one error line that carries the engine's error; the failed request's reply was written first. The
// HttpServer is not started (no sockets): the loop only needs its wait and stop.
#include "server/serve_loop.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sched/engine.h"
#include "sched/fake_runner.h"
#include "server/app.h"
#include "server/http_server.h"
#include "tests/server/fault_test_util.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

struct Lines {
    std::mutex mu;
    std::vector<std::string> info, error;
};

ServeLoopOptions capture(Lines& lines) {
    ServeLoopOptions o;
    o.info = [&lines](const std::string& s) {
        std::lock_guard lk(lines.mu);
        lines.info.push_back(s);
    };
    o.error = [&lines](const std::string& s) {
        std::lock_guard lk(lines.mu);
        lines.error.push_back(s);
    };
    o.fatal_exit_deadline_s = 120;  // a hung shutdown ends the test binary rather than hanging it
    return o;
}

// Runs the loop on another thread; a loop that does not end within `limit` is a failure (then woken
// so the test can finish).
int run_bounded(HttpServer& server, App& app, Engine& engine, const ServeLoopOptions& o, std::chrono::seconds limit) {
    auto f = std::async(std::launch::async, [&] { return run_serve_loop(server, app, engine, o); });
    if (f.wait_for(limit) != std::future_status::ready) {
        ADD_FAILURE() << "run_serve_loop did not end within " << limit.count() << " s of the engine failure";
        server.wake();
    }
    return f.get();
}

HttpRequest completion() { return test::completion_request({5, 6, 7}, 30, false); }

TEST(ServeLoop, EngineFailureEndsTheLoopWithExit3AndOneLineNamingTheError) {
    Engine engine(std::make_unique<FakeRunner>(test::faulty_fake_model(2, 5000)), EngineConfig{});
    App app(engine, test::byte_tokenizer(), AppOptions{});
    HttpServer server(app, HttpServerOptions{});
    auto w = std::make_shared<test::RecordingWriter>();
    w->post([&] { app.handle(completion(), w); });
    engine.start();
    Lines lines;
    const int code = run_bounded(server, app, engine, capture(lines), 60s);
    EXPECT_EQ(code, kExitEngineFailed);
    ASSERT_EQ(lines.error.size(), 1u);
    const std::string& line = lines.error[0];
    EXPECT_NE(line.find("fatal"), std::string::npos) << line;
    EXPECT_NE(line.find("injected device fault at step 2"), std::string::npos) << line;
    EXPECT_NE(line.find("status 3"), std::string::npos) << line;
    EXPECT_TRUE(lines.info.empty());  // no drain: nothing could finish
    ASSERT_TRUE(w->wait_done(1s));    // answered before the loop returned
    EXPECT_EQ(w->status, 500);
}

// The engine fails before the loop waits: the loop must not miss it and wait for a signal forever.
TEST(ServeLoop, FailureBeforeTheLoopStartsStillEndsIt) {
    Engine engine(std::make_unique<FakeRunner>(test::faulty_fake_model(1)), EngineConfig{});
    App app(engine, test::byte_tokenizer(), AppOptions{});
    HttpServer server(app, HttpServerOptions{});
    auto w = std::make_shared<test::RecordingWriter>();
    w->post([&] { app.handle(completion(), w); });
    std::promise<void> failed;
    engine.on_fatal([&failed](const Status&) { failed.set_value(); });
    engine.start();
    ASSERT_EQ(failed.get_future().wait_for(60s), std::future_status::ready);
    Lines lines;
    EXPECT_EQ(run_bounded(server, app, engine, capture(lines), 60s), kExitEngineFailed);
    EXPECT_EQ(lines.error.size(), 1u);
}

}  // namespace
}  // namespace dsv4
