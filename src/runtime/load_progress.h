// Progress of a checkpoint load on a terminal (issue 14 item 2): one line redrawn in place with
// bytes done / total, the rate so far, the time left at that rate, and a bar. Off a terminal the
// loader prints a plain line per shard instead (checkpoint_loader.cpp). Host-only, no CUDA.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dsv4 {

// The progress text for `done` of `total` bytes after `seconds`, e.g.
// "[load] 12.40 / 160.00 GB  7.41 GB/s  ETA 20 s  [###.................]" (bar of `bar_width`
// cells; rate and ETA "-" before any time has passed). No trailing newline.
std::string load_progress_line(uint64_t done, uint64_t total, double seconds, int bar_width = 20);

// Redraws load_progress_line on `out` ("\r" + line) at most every `interval_s`, and once more
// with a newline at finish(). Does nothing when disabled.
class LoadProgress {
public:
    LoadProgress(uint64_t total, bool enabled, std::FILE* out = stderr, double interval_s = 0.25);
    void update(uint64_t done);
    void finish();

private:
    uint64_t total_;
    bool enabled_;
    std::FILE* out_;
    double interval_s_;
    uint64_t done_ = 0;
    std::chrono::steady_clock::time_point t0_, last_;
    bool drawn_ = false;
    void draw();
};

}  // namespace dsv4
