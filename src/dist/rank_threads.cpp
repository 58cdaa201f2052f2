#include "dist/rank_threads.h"

#include <algorithm>

namespace dsv4::dist {

RankThreads::RankThreads(int n, std::function<Status(int)> init)
    : init_(std::move(init)), results_(size_t(std::max(n, 1)), Status::ok()) {
    for (int r = 0; r < std::max(n, 1); ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
    {
        std::lock_guard<std::mutex> lk(m_);
        quit_ = true;
    }
    job_cv_.notify_all();
    for (auto& t : threads_) t.join();
}

Status RankThreads::run(const std::function<Status(int)>& f) {
    std::unique_lock<std::mutex> lk(m_);
    job_ = &f;
    pending_ = size();
    std::fill(results_.begin(), results_.end(), Status::ok());
    ++gen_;
    job_cv_.notify_all();
    done_cv_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
    for (int r = 0; r < size(); ++r)
        if (!results_[size_t(r)].is_ok())
            return error(results_[size_t(r)].code(), "rank {}: {}", r, results_[size_t(r)].message());
    return Status::ok();
}

void RankThreads::loop(int r) {
    const Status ready = init_ ? init_(r) : Status::ok();
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
        job_cv_.wait(lk, [&] { return quit_ || gen_ != seen; });
        if (quit_) return;
        seen = gen_;
        const std::function<Status(int)>* f = job_;
        lk.unlock();
        Status s = ready.is_ok() ? (*f)(r) : ready;
        lk.lock();
        results_[size_t(r)] = std::move(s);
        if (--pending_ == 0) done_cv_.notify_all();
    }
}

}  // namespace dsv4::dist
