// Median and p10 / p90 of repeated timings, for `dsv4 proxy-bench`'s tables (the nearest-rank
// convention: element n/2, n/10 and min(n-1, 9n/10) of the sorted values; zeros when empty).
#pragma once

#include <algorithm>
#include <vector>

namespace dsv4::cli {

struct Spread {
    double med = 0, p10 = 0, p90 = 0;
};

inline Spread spread(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    if (v.empty()) return {};
    const size_t n = v.size();
    return {v[n / 2], v[n / 10], v[std::min(n - 1, n * 9 / 10)]};
}

}  // namespace dsv4::cli
