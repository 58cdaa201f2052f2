// Small statistics toolkit for the benchmark: percentiles of latency samples, the mean of a
// few iterations with a Student-t confidence interval, and the B/A throughput ratio test
// behind the A/B verdict. Pure functions over plain vectors; no I/O, no global state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dsv4::bench {

// Distribution summary of one latency sample set (all in the caller's unit).
struct Dist {
    int64_t count = 0;
    double mean = 0, median = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};

// Linear-interpolation percentile (q in [0,1]) of an already sorted, non-empty sample.
double percentile_sorted(std::span<const double> sorted, double q);
Dist summarize(std::vector<double> values);  // takes a copy: it sorts

double mean(std::span<const double> v);
double sample_stddev(std::span<const double> v);  // n-1 denominator; 0 when n < 2

// Student t distribution: CDF and two-sided critical value t such that P(|T| <= t) = level.
// df may be fractional (Welch); df = +inf is treated as the normal limit via a large df.
double student_t_cdf(double t, double df);
double student_t_critical(double level, double df);

// Mean of a handful of iteration results with a t-based CI and the coefficient of variation.
struct MeanCi {
    int n = 0;
    double mean = 0, lo = 0, hi = 0;  // lo == hi == mean when n < 2
    double stddev = 0;
    double cv = 0;  // stddev / mean (0 when mean is 0)
};
MeanCi mean_ci(std::span<const double> values, double level = 0.95);

enum class Verdict { kFaster, kSlower, kNoDifference, kInsufficientData };
const char* verdict_name(Verdict v);

// B/A ratio of a positive metric (throughput, or latency with higher_is_better = false),
// estimated as exp(mean log B - mean log A), CI from Welch's t on the logs. Working on logs
// makes the ratio symmetric (A/B is the inverse) and matches multiplicative run-to-run noise.
struct RatioTest {
    int n_a = 0, n_b = 0;
    double ratio = 1, lo = 1, hi = 1;  // B/A with its confidence interval
    double df = 0;
    double cv_a = 0, cv_b = 0;         // measured noise of each side
    Verdict verdict = Verdict::kInsufficientData;
    std::string describe() const;      // "B/A 1.052 [1.010, 1.096] -> B faster"
};
RatioTest compare_ratio(std::span<const double> a, std::span<const double> b,
                        bool higher_is_better = true, double level = 0.95);

// Deterministic 64-bit generator (splitmix64) so that seeded prompt draws and the statistics
// tests give the same answer with any standard library.
class SplitMix64 {
public:
    explicit SplitMix64(uint64_t seed) : state_(seed) {}
    uint64_t next();
    double uniform01();                     // [0, 1)
    uint64_t below(uint64_t n);             // [0, n), n > 0
    double normal();                        // standard normal (Box-Muller)

private:
    uint64_t state_;
};

// Mixes several values into one seed (for per-level, per-iteration prompt streams).
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

}  // namespace dsv4::bench
