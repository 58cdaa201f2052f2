// Terminal output of the benchmark: the per-level summary table (stdout) and a progress
// bar (stderr, redrawn in place on a terminal, one line per batch otherwise).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "bench/metrics.h"

namespace dsv4::bench {

std::string format_summary_header();
std::string format_summary_row(const LevelSummary& s);
std::string format_summary_legend();
// One line per finished iteration, for the log while the sweep runs.
std::string format_iteration_line(const IterationMetrics& m);

class ProgressBar {
public:
    ProgressBar(std::FILE* out, bool interactive) : out_(out), interactive_(interactive) {}
    // Redraws at most every 100 ms (always on done == total).
    void update(std::string_view label, int done, int total, int errors);
    void clear();  // erases the bar so that ordinary lines can follow

private:
    std::FILE* out_;
    bool interactive_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point last_{};
};

}  // namespace dsv4::bench
