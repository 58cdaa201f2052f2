// Engine: runs an EngineCore on one dedicated thread. Other threads only submit requests and
// aborts through a mutex-guarded inbox; the scheduler, runner and cache have this one owner,
// so the hot path takes no locks. Every submitted request ends with exactly one finishing
// event per choice (stop, length, abort or error), including on shutdown.
#pragma once

#include <condition_variable>
#include <cstdint>
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
    // kUnavailable when stopping (503), validation errors otherwise (400).
    Status submit(GenRequest req);
    void abort(uint64_t request_id);
    // Thread-safe: the engine thread drops every cached prefix block before its next step.
    void flush_prefix_cache();
    uint64_t next_request_id();

    const EngineStats& stats() const { return stats_; }
    const ModelConfig& model_config() const { return runner_->config(); }
    int64_t max_context() const { return core_.max_context(); }
    int64_t vocab_size() const { return runner_->config().vocab_size; }
    const EngineConfig& config() const { return cfg_; }

private:
    void loop();

    std::unique_ptr<ModelRunner> runner_;
    EngineConfig cfg_;
    EngineStats stats_;
    EngineCore core_;

    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<GenRequest> inbox_;
    std::vector<uint64_t> aborts_;
    bool flush_prefix_ = false;
    bool stopping_ = false;
    uint64_t next_id_ = 1;
    std::thread thread_;
};

}  // namespace dsv4
