// A series of A/B comparisons of the same kind (e.g. 100 A/A runs of `bench --ab`, each a
// family of levels): how many families claimed any difference, how many levels said faster or
// slower, each share with its Wilson interval. This is how the comparison's error rates are
// measured on real hardware rather than assumed: an A/A series should show about the
// family-wise error rate (1 - confidence) or less, a series with a known slowdown on B its
// power. Used by `dsv4 bench series`.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bench/compare.h"
#include "bench/stats.h"

namespace dsv4::bench {

struct SeriesTally {
    int families = 0;
    int families_any_verdict = 0;  // some level said faster or slower
    int families_any_faster = 0, families_any_slower = 0;
    int families_all_faster = 0, families_all_slower = 0;  // every tested level did
    int families_paired = 0;
    int rows = 0;  // levels tested over all families (insufficient data not counted)
    int rows_faster = 0, rows_slower = 0;
};

// Adds one comparison (family) to the tally.
void add_family(SeriesTally& t, const Comparison& c);

// Text summary: the counts, each share as a percentage with its Wilson interval at `level`.
std::string format_series(const SeriesTally& t, double level = 0.95);
// The same as JSON (counts, rates, [lo, hi] intervals) for the record.
nlohmann::json series_json(const SeriesTally& t, double level = 0.95);

}  // namespace dsv4::bench
