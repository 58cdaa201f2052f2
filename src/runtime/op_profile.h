// OpProfile: where a decode step (captured) or a prefill step (eager, CudaBenchRunner::profile_step)
// spends its device time, op class by op class. Marks
// record CUDA events on the step's stream (inside graph capture they become event-record nodes),
// so one replay of the profiled graph gives the time between consecutive marks; the span after a
// mark is charged to that mark's label and summed over layers. Bench-only (DSV4_OP_PROFILE=1 in
// `dsv4 proxy-bench`): the event nodes serialise the graph slightly, so the step it measures is a
// little slower than the unprofiled one it explains. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dsv4 {

class OpProfile {
public:
    OpProfile() = default;
    OpProfile(const OpProfile&) = delete;
    OpProfile& operator=(const OpProfile&) = delete;
    ~OpProfile();

    // Creates the event pool (before capture: event creation is kept out of the captured region).
    cudaError_t reserve(size_t n);
    // Records a mark (label: a string literal) on `st`; marks beyond the event pool are dropped.
    void mark(const char* label, cudaStream_t st);
    // Forgets the marks of the previous capture (the events are reused).
    void reset() { n_used_ = 0; }
    // After a replay has completed: adds the spans between consecutive marks to the totals.
    cudaError_t accumulate();
    // Table of label, microseconds per step, marks per step, share; `steps` replays accumulated.
    std::string table(int steps) const;
    // Microseconds per step by label; `steps` replays accumulated.
    std::map<std::string, double> per_step_us(int steps) const;

private:
    std::vector<cudaEvent_t> events_;
    std::vector<const char*> labels_;
    size_t n_used_ = 0;
    std::map<std::string, std::pair<double, int>> totals_;  // label -> (us, count)
};

}  // namespace dsv4
