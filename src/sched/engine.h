// Engine: runs an EngineCore on one dedicated thread. Other threads only submit requests and
// aborts through a mutex-guarded inbox; the scheduler, runner and cache have this one owner,
// so the hot path takes no locks. Every submitted request ends with exactly one finishing
// event per choice (stop, length, abort or error), including on shutdown.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "runtime/model_runner.h"
#include "sched/engine_core.h"
#include "sched/engine_stats.h"

namespace dsv4 {

class Engine {
public:
    Engine(std::unique_ptr<ModelRunner> runner, EngineConfig cfg);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    void start();
    void stop();  // fails whatever is still queued or running, then joins

    // Thread-safe. kResourceExhausted when the waiting queue is full (answer 429),
    // kUnavailable when stopping or failed (503), validation errors otherwise (400).
    Status submit(GenRequest req);
    void abort(uint64_t request_id);
    // Thread-safe: the engine thread drops every cached prefix block before its next step.
    void flush_prefix_cache();
    uint64_t next_request_id();

    // Thread-safe. True once the engine failed for good (EngineCore::fatal: the runner lost its
    // device); every request it held has its error event, submit() answers kUnavailable, and only a
    // new process can serve again. fatal_error(): that error (kDeviceLost), ok while healthy.
    bool failed() const { return failed_.load(); }
    Status fatal_error() const;
    // `fn` runs once when the engine fails for good: on the engine thread, or at once on the calling
    // thread when it already has (so registering late misses nothing). Null clears it. `fn` must not
    // call back into the engine's submit / on_fatal.
    void on_fatal(std::function<void(const Status&)> fn);

    const EngineStats& stats() const { return stats_; }
    const ModelConfig& model_config() const { return runner_->config(); }
    int64_t max_context() const { return core_.max_context(); }
    int64_t vocab_size() const { return runner_->config().vocab_size; }
    const EngineConfig& config() const { return cfg_; }

private:
    void loop();
    void note_fatal();  // engine thread: publishes core_.fatal() and runs the on_fatal callback

    std::unique_ptr<ModelRunner> runner_;
    EngineConfig cfg_;
    EngineStats stats_;
    EngineCore core_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<GenRequest> inbox_;
    std::vector<uint64_t> aborts_;
    bool flush_prefix_ = false;
    bool stopping_ = false;
    std::atomic<bool> failed_{false};
    Status fatal_;                                 // guarded by mu_
    std::function<void(const Status&)> on_fatal_;  // guarded by mu_
    uint64_t next_id_ = 1;
    std::thread thread_;
};

}  // namespace dsv4
