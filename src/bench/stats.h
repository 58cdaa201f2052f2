// Small statistics toolkit for the benchmark: percentiles of latency samples, the mean of a
// few iterations with a Student-t confidence interval, the B/A ratio tests behind the A/B
// verdict (paired and unpaired), and the Wilson interval of a proportion. Pure functions over
// plain vectors; no I/O, no global state; they depend on nothing but the standard library and
// fmt, so any tool comparing two configurations (bench --ab, bench compare, a kernel tuner
// comparing step times of variants) uses the same tests. Corrections across several such
// comparisons at once: bench/family.h.
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
// Two-sided p-value P(|T| >= |t|) for T ~ Student t with df degrees of freedom.
double student_t_two_sided_p(double t, double df);

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
// tested on log values: the ratio is symmetric (A/B is the inverse) and multiplicative
// run-to-run noise becomes additive. `ratio` is always B/A of the metric itself; only the
// verdict's direction depends on higher_is_better (a latency ratio above 1 is "slower").
// p is the two-sided p-value of "the ratio is 1"; lo/hi the interval at `level`.
struct RatioTest {
    bool paired = false;
    int n_a = 0, n_b = 0;              // values used (paired: n_a == n_b == the pairs used)
    double ratio = 1, lo = 1, hi = 1;  // B/A with its confidence interval
    double level = 0.95;               // of [lo, hi]
    double df = 0;
    double p = 1;               // two-sided, for B/A == 1; 1 when insufficient
    double cv_a = 0, cv_b = 0;  // measured noise of each side
    Verdict verdict = Verdict::kInsufficientData;
    std::string describe() const;  // "B/A 1.052 [1.010, 1.096] ... -> B faster"
};

// Unpaired (the runs of A and B are not matched): estimate exp(mean log B - mean log A), CI
// and p from Welch's t test on the logs with the Welch-Satterthwaite degrees of freedom
// (B. L. Welch, Biometrika 34, 1947; any textbook's "unequal variances t-test"). Values <= 0
// are dropped. Needs >= 2 values a side for an interval.
RatioTest compare_ratio(std::span<const double> a, std::span<const double> b, bool higher_is_better = true,
                        double level = 0.95);

// Paired (a[k] and b[k] were measured next to each other, e.g. one ABBA pair of batches):
// d_k = log b[k] - log a[k], ratio exp(mean d), CI exp(mean d +- t(level, n-1) sd(d)/sqrt(n))
// and p from the one-sample t test on the d_k: the textbook paired-samples t test (Student,
// Biometrika 6, 1908; e.g. Montgomery, Design and Analysis of Experiments, "paired comparison
// designs") on log values. Pairs where either value is <= 0 are dropped; values past the
// shorter side are ignored. Needs >= 2 pairs. Each d_k differences out what its pair shares
// (the machine's state at that time), so drift between pairs does not enter the estimate;
// running the pairs in ABBA order cancels a linear drift within the pairs as well.
RatioTest compare_ratio_paired(std::span<const double> a, std::span<const double> b, bool higher_is_better = true,
                               double level = 0.95);

// The verdict of a two-sided test on B/A: faster/slower by the sign of log(ratio) and the
// metric's direction when `significant`, else no detectable difference.
Verdict ratio_verdict(double ratio, bool significant, bool higher_is_better);

// A proportion k/n with its Wilson score interval (E. B. Wilson, JASA 22, 1927; recommended
// over the normal "Wald" interval by Brown, Cai & DasGupta, Statistical Science 16, 2001):
// center (p + z^2/2n) / (1 + z^2/n), half-width z / (1 + z^2/n) sqrt(p(1-p)/n + z^2/4n^2),
// z the two-sided normal quantile of `level`. Stays inside [0, 1] and is usable at k = 0 or n.
struct Proportion {
    int k = 0, n = 0;
    double p = 0, lo = 0, hi = 1;  // n == 0: p 0, interval [0, 1]
};
Proportion wilson_interval(int k, int n, double level = 0.95);

// Deterministic 64-bit generator (splitmix64) so that seeded prompt draws and the statistics
// tests give the same answer with any standard library.
class SplitMix64 {
public:
    explicit SplitMix64(uint64_t seed) : state_(seed) {}
    uint64_t next();
    double uniform01();          // [0, 1)
    uint64_t below(uint64_t n);  // [0, n), n > 0
    double normal();             // standard normal (Box-Muller)

private:
    uint64_t state_;
};

// Mixes several values into one seed (for per-level, per-iteration prompt streams).
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

}  // namespace dsv4::bench
