// A/B comparison of benchmark results per concurrency level: B/A ratio of a metric's
// iteration values with a Welch confidence interval on the logs, and a verdict (faster,
// slower, or no detectable difference at the measured noise). Used by `dsv4 bench compare`
// and at the end of an --ab run.
#pragma once

#include <string>
#include <vector>

#include "bench/metrics.h"
#include "bench/stats.h"
#include "core/status.h"

namespace dsv4::bench {

struct LevelComparison {
    int level = 0;
    double mean_a = 0, mean_b = 0;
    RatioTest test;
};

// Pairs levels present on both sides; levels on one side only are skipped.
Result<std::vector<LevelComparison>> compare_levels(const std::vector<IterationMetrics>& a,
                                                    const std::vector<IterationMetrics>& b,
                                                    const std::string& metric,
                                                    double confidence = 0.95);

// Human-readable table, one row per level, with a closing line that explains the verdict.
std::string format_comparison(const std::vector<LevelComparison>& rows, const std::string& metric,
                              const std::string& name_a, const std::string& name_b,
                              double confidence = 0.95);

}  // namespace dsv4::bench
