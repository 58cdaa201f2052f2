// RankThreads: one host thread per rank of a one-process multi-GPU group (the expert-parallel CUDA
// runner, runtime/multi_gpu_runner.h). Thread r runs `init(r)` once when it starts (e.g. making
// GPU r current for the thread's life), then every job: run(f) calls f(r) on all threads at once
// and returns when all have finished. Collectives between ranks need exactly this: every rank's
// call in flight at the same time, each from the thread that owns its device. CPU-only.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"

namespace dsv4::dist {

class RankThreads {
public:
    // n >= 1 threads. init may be empty; its error is returned by every later run() on that rank.
    RankThreads(int n, std::function<Status(int)> init);
    ~RankThreads();  // joins (after the running job, if any)
    RankThreads(const RankThreads&) = delete;
    RankThreads& operator=(const RankThreads&) = delete;

    int size() const { return int(threads_.size()); }

    // Calls f(r) on thread r for every rank concurrently; waits for all. Returns the first error
    // in rank order, prefixed "rank r: ". One run at a time (callers serialise).
    Status run(const std::function<Status(int)>& f);

private:
    void loop(int r);

    std::function<Status(int)> init_;
    std::mutex m_;
    std::condition_variable job_cv_, done_cv_;
    const std::function<Status(int)>* job_ = nullptr;
    uint64_t gen_ = 0;
    int pending_ = 0;
    bool quit_ = false;
    std::vector<Status> results_;
    std::vector<std::thread> threads_;
};

}  // namespace dsv4::dist
