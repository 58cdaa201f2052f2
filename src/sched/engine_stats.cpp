// Histogram implementation (see engine_stats.h).
#include "sched/engine_stats.h"

#include <algorithm>

namespace dsv4 {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
    std::lock_guard lk(mu_);
    const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
    ++counts_[i];
    sum_ += v;
    ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
    std::lock_guard lk(mu_);
    Snapshot s;
    s.bounds = bounds_;
    uint64_t cum = 0;
    for (uint64_t c : counts_) {
        cum += c;
        s.counts.push_back(cum);
    }
    s.sum = sum_;
    s.count = count_;
    return s;
}

}  // namespace dsv4
