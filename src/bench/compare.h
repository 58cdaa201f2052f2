// A/B comparison of benchmark results per concurrency level, all levels of one comparison
// judged as one family (bench/family.h): per level the B/A ratio of a metric with its interval
// and p-value, paired when the records say which A and B batches ran together (an --ab run,
// ABBA order) and unpaired (Welch) otherwise; verdicts by Holm-Bonferroni at a family-wise
// error rate of 1 - confidence. Used by `dsv4 bench compare` and at the end of an --ab run.
#pragma once

#include <string>
#include <vector>

#include "bench/family.h"
#include "bench/metrics.h"
#include "bench/stats.h"
#include "core/status.h"

namespace dsv4::bench {

struct LevelComparison {
    int level = 0;
    double mean_a = 0, mean_b = 0;  // arithmetic means of the values compared
    RatioTest test;                 // interval at the family's ci_level; verdict from Holm
    double p_adjusted = 1;          // Holm-adjusted p-value
};

struct Comparison {
    std::vector<LevelComparison> rows;  // ascending level
    bool paired = false;
    double alpha = 0.05;     // family-wise error rate controlled
    double ci_level = 0.95;  // per-level interval level (Bonferroni, 1 - alpha / m)
    int m = 0;               // levels tested (those with enough data)
};

enum class Pairing {
    kAuto,      // paired when every record carries a pair index (an --ab run), else unpaired
    kUnpaired,  // Welch, whatever the records say (runs made at different times)
};

// Levels on one side only are skipped. Paired: A and B records are matched by (level, pair);
// a pair missing one side (a run stopped midway) is left out; records without a pair index,
// or a pair index seen twice on one side, make the whole comparison unpaired.
Result<Comparison> compare_levels(const std::vector<IterationMetrics>& a, const std::vector<IterationMetrics>& b,
                                  const std::string& metric, double confidence = 0.95,
                                  Pairing pairing = Pairing::kAuto);

// Human-readable table, one row per level, and closing lines that state the test, the
// interval level, and the family-wise error rate controlled over how many levels.
std::string format_comparison(const Comparison& c, const std::string& metric, const std::string& name_a,
                              const std::string& name_b);

}  // namespace dsv4::bench
