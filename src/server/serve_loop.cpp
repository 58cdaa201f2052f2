// The serving loop's shutdown paths (see serve_loop.h).
#include "server/serve_loop.h"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace dsv4 {
namespace {

// Polls `done` until it holds or `seconds` have passed.
void wait_up_to(double seconds, const std::function<bool()>& done) {
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
    while (!done() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// Ends the process if the shutdown after an engine failure outlives its deadline: the failed device
// may also wedge a call (a driver that never returns), and a dead server must not linger.
class ExitWatchdog {
public:
    ExitWatchdog(double seconds, std::function<void(const std::string&)> log) {
        if (seconds <= 0) return;
        thread_ = std::thread([this, seconds, log = std::move(log)] {
            std::unique_lock lk(mu_);
            if (cv_.wait_for(lk, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
            log(fmt::format("dsv4 serve: shutdown did not finish within {:.0f} s of the device error; exiting now",
                            seconds));
            std::fflush(stdout);
            std::fflush(stderr);
            std::_Exit(kExitEngineFailed);
        });
    }
    ~ExitWatchdog() {
        {
            std::lock_guard lk(mu_);
            done_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

// The engine failed: every request it held already has its error event. Refuse new connections,
// let those errors reach their clients, stop, and report.
int fail(HttpServer& server, App& app, Engine& engine, const ServeLoopOptions& opt,
         const std::function<void(const std::string&)>& err) {
    err(
        fmt::format("dsv4 serve: fatal: unrecoverable device error, every request failed; exiting with "
                    "status {} (the supervisor must restart the server): {}",
                    kExitEngineFailed, engine.fatal_error().message()));
    ExitWatchdog watchdog(opt.fatal_exit_deadline_s, err);
    server.stop_accepting();
    wait_up_to(opt.flush_timeout_s, [&] { return app.stats().replies_pending.load() == 0; });
    server.stop();
    engine.stop();
    return kExitEngineFailed;
}

}  // namespace

int run_serve_loop(HttpServer& server, App& app, Engine& engine, const ServeLoopOptions& opt) {
    std::function<void(const std::string&)> info = opt.info, err = opt.error;
    if (!info)
        info = [](const std::string& s) {
            std::printf("%s\n", s.c_str());
            std::fflush(stdout);
        };
    if (!err)
        err = [](const std::string& s) {
            std::fprintf(stderr, "%s\n", s.c_str());
            std::fflush(stderr);
        };
    engine.on_fatal([&server](const Status&) { server.wake(); });
    server.wait_for_signal();
    if (engine.failed()) {
        engine.on_fatal(nullptr);
        return fail(server, app, engine, opt, err);
    }
    // Graceful: stop accepting, refuse new work (503), let admitted requests finish for up to
    // drain_timeout_s, then stop (what is still running gets an error event).
    info(fmt::format("dsv4 serve: draining (up to {:.0f} s)", opt.drain_timeout_s));
    app.set_draining();
    server.stop_accepting();
    auto busy = [&] {
        const EngineStats& es = engine.stats();
        return es.running_requests.load() + es.waiting_requests.load() > 0 || app.stats().replies_pending.load() > 0;
    };
    wait_up_to(opt.drain_timeout_s, [&] { return !busy() || engine.failed(); });
    engine.on_fatal(nullptr);
    if (engine.failed()) return fail(server, app, engine, opt, err);
    const bool cancelling = busy();
    info(fmt::format("dsv4 serve: shutting down{}", cancelling ? " (drain timeout: cancelling what is left)" : ""));
    if (cancelling) {
        // The engine first, while the I/O threads still run: each request left gets its error (a
        // 500, or an error event ending its stream) instead of a connection cut mid-reply.
        engine.stop();
        wait_up_to(opt.flush_timeout_s, [&] { return app.stats().replies_pending.load() == 0; });
    }
    server.stop();
    engine.stop();
    return 0;
}

}  // namespace dsv4
