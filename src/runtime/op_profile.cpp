// OpProfile (see op_profile.h).
#include "runtime/op_profile.h"

#include <algorithm>
#include <cstdio>

namespace dsv4 {

OpProfile::~OpProfile() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaError_t OpProfile::reserve(size_t n) {
    while (events_.size() < n) {
        cudaEvent_t e = nullptr;
        const cudaError_t err = cudaEventCreate(&e);
        if (err != cudaSuccess) return err;
        events_.push_back(e);
        labels_.push_back("");
    }
    return cudaSuccess;
}

void OpProfile::mark(const char* label, cudaStream_t st) {
    if (n_used_ >= events_.size()) return;
    labels_[n_used_] = label;
    // External: inside stream capture a plain record only expresses a dependency; this flag makes it
    // an event-record node that really records (and times) when the graph replays. Outside capture
    // (an eagerly profiled step) the flag is illegal and a plain record times the stream.
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess) cs = cudaStreamCaptureStatusNone;
    const cudaError_t e = cs == cudaStreamCaptureStatusActive
                              ? cudaEventRecordWithFlags(events_[n_used_], st, cudaEventRecordExternal)
                              : cudaEventRecord(events_[n_used_], st);
    if (e == cudaSuccess)
        ++n_used_;
    else
        (void)cudaGetLastError();  // a dropped mark must not fail the next launch's check
}

cudaError_t OpProfile::accumulate() {
    for (size_t i = 0; i + 1 < n_used_; ++i) {
        float ms = 0;
        const cudaError_t e = cudaEventElapsedTime(&ms, events_[i], events_[i + 1]);
        if (e != cudaSuccess) return e;
        auto& t = totals_[labels_[i]];
        t.first += 1000.0 * ms;
        t.second += 1;
    }
    return cudaSuccess;
}

std::string OpProfile::table(int steps) const {
    std::vector<std::pair<std::string, std::pair<double, int>>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    double all = 0;
    for (const auto& r : rows) all += r.second.first;
    std::string out = "op profile (event marks in the captured step; us per step, summed over layers):\n";
    char line[160];
    std::snprintf(line, sizeof line, "  %-22s %10s %8s %7s\n", "op", "us/step", "spans", "share");
    out += line;
    const double n = steps > 0 ? steps : 1;
    for (const auto& [label, v] : rows) {
        std::snprintf(line, sizeof line, "  %-22s %10.1f %8.0f %6.1f%%\n", label.c_str(), v.first / n, v.second / n,
                      all > 0 ? 100.0 * v.first / all : 0.0);
        out += line;
    }
    std::snprintf(line, sizeof line, "  %-22s %10.1f\n", "total", all / n);
    out += line;
    return out;
}

std::map<std::string, double> OpProfile::per_step_us(int steps) const {
    std::map<std::string, double> out;
    const double n = steps > 0 ? steps : 1;
    for (const auto& [label, v] : totals_) out[label] = v.first / n;
    return out;
}

}  // namespace dsv4
