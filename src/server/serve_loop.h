// The life of `dsv4 serve` after start-up: wait for SIGINT/SIGTERM or for the engine to fail for
// good, then shut down within a bounded time and give the process's exit status. A signal drains
// gracefully (exit 0); a lost GPU (a sticky CUDA error poisons the context, so nothing in this
// process can compute again) fails every request, says so in one log line and exits non-zero so
// that the supervisor (systemd, Kubernetes, ...) starts a fresh process.
#pragma once

#include <functional>
#include <string>

#include "sched/engine.h"
#include "server/app.h"
#include "server/http_server.h"

namespace dsv4 {

// Exit status of `dsv4 serve` after the engine failed for good (2 is a start-up error).
inline constexpr int kExitEngineFailed = 3;

struct ServeLoopOptions {
    // SIGTERM: admitted requests may run this long, then are cancelled.
    double drain_timeout_s = 30.0;
    // Then replies still being written (errors included) get this long.
    double flush_timeout_s = 2.0;
    // After an engine failure the whole shutdown must end within this many seconds; past it the
    // process exits at once (std::_Exit) with kExitEngineFailed, so a wedged call never keeps a
    // dead server alive. 0: no deadline (tests that must not exit).
    double fatal_exit_deadline_s = 10.0;
    // One line each, without the newline. Defaults: stdout (progress) and stderr (the fatal line).
    std::function<void(const std::string&)> info, error;
};

// Runs until a signal or an engine failure, then stops `server` (started or not) and `engine`.
// Returns 0 after a signal and a drain; kExitEngineFailed when the engine failed (before or
// during the drain), after logging one error line that carries the engine's error (for a CUDA
// fault: the CUDA error's name and text) and giving the replies of the failed requests (a 500, or
// an error event ending the stream) up to flush_timeout_s to be written.
int run_serve_loop(HttpServer& server, App& app, Engine& engine, const ServeLoopOptions& opt);

}  // namespace dsv4
