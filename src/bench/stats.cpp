// Statistics for the benchmark (see stats.h). The Student t quantile is computed from the
// regularized incomplete beta function (continued fraction, modified Lentz), so Welch's
// fractional degrees of freedom need no tables.
#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace dsv4::bench {

double percentile_sorted(std::span<const double> s, double q) {
    if (s.empty()) return 0;
    const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(s.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, s.size() - 1);
    const double frac = pos - static_cast<double>(lo);
    return s[lo] + (s[hi] - s[lo]) * frac;
}

Dist summarize(std::vector<double> v) {
    Dist d;
    if (v.empty()) return d;
    std::sort(v.begin(), v.end());
    d.count = static_cast<int64_t>(v.size());
    d.mean = mean(v);
    d.median = percentile_sorted(v, 0.5);
    d.p90 = percentile_sorted(v, 0.9);
    d.p99 = percentile_sorted(v, 0.99);
    d.min = v.front();
    d.max = v.back();
    return d;
}

double mean(std::span<const double> v) {
    if (v.empty()) return 0;
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double sample_stddev(std::span<const double> v) {
    if (v.size() < 2) return 0;
    const double m = mean(v);
    double ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

namespace {

// Continued fraction part of I_x(a, b); valid (fast) for x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double a, double b, double x) {
    constexpr double kTiny = 1e-300;
    constexpr double kEps = 1e-15;
    // Evaluates 1 + d1/(1 + d2/(1 + ...)) with the modified Lentz method.
    double f = 1.0, c = 1.0, d = 0.0;
    for (int j = 1; j < 10000; ++j) {
        const int m = j / 2;
        double dj;
        if (j % 2 == 1) {
            dj = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
        } else {
            dj = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
        }
        d = 1.0 + dj * d;
        if (std::fabs(d) < kTiny) d = kTiny;
        c = 1.0 + dj / c;
        if (std::fabs(c) < kTiny) c = kTiny;
        d = 1.0 / d;
        const double delta = c * d;
        f *= delta;
        if (std::fabs(delta - 1.0) < kEps) break;
    }
    return 1.0 / f;
}

double regularized_incomplete_beta(double a, double b, double x) {
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    const double log_front =
        std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
    if (x < (a + 1) / (a + b + 2)) {
        return std::exp(log_front) * beta_continued_fraction(a, b, x) / a;
    }
    // Symmetry I_x(a,b) = 1 - I_{1-x}(b,a) keeps the fraction in its convergent region.
    return 1.0 - std::exp(log_front) * beta_continued_fraction(b, a, 1.0 - x) / b;
}

}  // namespace

double student_t_cdf(double t, double df) {
    df = std::min(df, 1e7);
    const double x = df / (df + t * t);
    const double tail = 0.5 * regularized_incomplete_beta(df / 2, 0.5, x);
    return t > 0 ? 1.0 - tail : tail;
}

double student_t_two_sided_p(double t, double df) {
    // P(|T| >= |t|) = I_x(df/2, 1/2) with x = df / (df + t^2), without the 1 - cdf cancellation.
    df = std::min(df, 1e7);
    return regularized_incomplete_beta(df / 2, 0.5, df / (df + t * t));
}

double student_t_critical(double level, double df) {
    const double target_tail = (1.0 - level) / 2;  // upper tail probability
    double lo = 0, hi = 1e4;
    for (int i = 0; i < 200 && hi - lo > 1e-12; ++i) {
        const double mid = 0.5 * (lo + hi);
        if (1.0 - student_t_cdf(mid, df) > target_tail) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return 0.5 * (lo + hi);
}

MeanCi mean_ci(std::span<const double> values, double level) {
    MeanCi r;
    r.n = static_cast<int>(values.size());
    if (r.n == 0) return r;
    r.mean = mean(values);
    r.lo = r.hi = r.mean;
    r.stddev = sample_stddev(values);
    r.cv = r.mean != 0 ? r.stddev / std::fabs(r.mean) : 0;
    if (r.n >= 2) {
        const double half = student_t_critical(level, r.n - 1) * r.stddev / std::sqrt(static_cast<double>(r.n));
        r.lo = r.mean - half;
        r.hi = r.mean + half;
    }
    return r;
}

const char* verdict_name(Verdict v) {
    switch (v) {
        case Verdict::kFaster:
            return "faster";
        case Verdict::kSlower:
            return "slower";
        case Verdict::kNoDifference:
            return "no detectable difference";
        case Verdict::kInsufficientData:
            return "insufficient data";
    }
    return "?";
}

std::string RatioTest::describe() const {
    if (verdict == Verdict::kInsufficientData) {
        return fmt::format("B/A {:.3f} (need >= 2 {} with positive values)", ratio,
                           paired ? "pairs" : "iterations each");
    }
    return fmt::format(
        "B/A {:.3f} [{:.3f}, {:.3f}] ({:.1f}% CI, {}) p {:.3g} noise A {:.1f}% B "
        "{:.1f}% -> B {}",
        ratio, lo, hi, 100 * level, paired ? "paired" : "unpaired", p, 100 * cv_a, 100 * cv_b, verdict_name(verdict));
}

Verdict ratio_verdict(double ratio, bool significant, bool higher_is_better) {
    if (!significant || ratio == 1.0) return Verdict::kNoDifference;
    return (ratio > 1.0) == higher_is_better ? Verdict::kFaster : Verdict::kSlower;
}

namespace {

std::vector<double> positive_logs(std::span<const double> v) {
    std::vector<double> out;
    for (double x : v) {
        if (x > 0) out.push_back(std::log(x));
    }
    return out;
}

// Fills the interval, p and verdict of a t test whose estimate of log(B/A) is `diff` with
// standard error `se` and `df` degrees of freedom. se == 0 (every difference identical) is
// the limit of a vanishing standard error: any nonzero difference is significant.
void finish_t_test(RatioTest& r, double diff, double se, double df, bool higher_is_better) {
    r.ratio = std::exp(diff);
    r.df = df;
    double half = 0;
    if (se > 0) {
        half = student_t_critical(r.level, df) * se;
        r.p = student_t_two_sided_p(diff / se, df);
    } else {
        r.p = diff == 0 ? 1.0 : 0.0;
    }
    r.lo = std::exp(diff - half);
    r.hi = std::exp(diff + half);
    // The interval excludes 1 exactly when p < 1 - level; deciding from the interval keeps the
    // printed CI and verdict consistent at the edge.
    r.verdict = ratio_verdict(r.ratio, r.lo > 1.0 || r.hi < 1.0, higher_is_better);
}

}  // namespace

RatioTest compare_ratio(std::span<const double> a, std::span<const double> b, bool higher_is_better, double level) {
    RatioTest r;
    r.level = level;
    const std::vector<double> la = positive_logs(a), lb = positive_logs(b);
    r.n_a = static_cast<int>(la.size());
    r.n_b = static_cast<int>(lb.size());
    if (r.n_a == 0 || r.n_b == 0) return r;
    const double diff = mean(lb) - mean(la);
    r.ratio = r.lo = r.hi = std::exp(diff);
    r.cv_a = mean_ci(a).cv;
    r.cv_b = mean_ci(b).cv;
    if (r.n_a < 2 || r.n_b < 2) return r;
    const double va = std::pow(sample_stddev(la), 2) / r.n_a;
    const double vb = std::pow(sample_stddev(lb), 2) / r.n_b;
    const double se = std::sqrt(va + vb);
    // Welch-Satterthwaite degrees of freedom.
    const double df = se > 0 ? (va + vb) * (va + vb) / (va * va / (r.n_a - 1) + vb * vb / (r.n_b - 1))
                             : std::numeric_limits<double>::infinity();
    finish_t_test(r, diff, se, df, higher_is_better);
    return r;
}

RatioTest compare_ratio_paired(std::span<const double> a, std::span<const double> b, bool higher_is_better,
                               double level) {
    RatioTest r;
    r.paired = true;
    r.level = level;
    std::vector<double> used_a, used_b, d;
    for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
        if (a[k] <= 0 || b[k] <= 0) continue;
        used_a.push_back(a[k]);
        used_b.push_back(b[k]);
        d.push_back(std::log(b[k]) - std::log(a[k]));
    }
    r.n_a = r.n_b = static_cast<int>(d.size());
    if (d.empty()) return r;
    const double diff = mean(d);
    r.ratio = r.lo = r.hi = std::exp(diff);
    r.cv_a = mean_ci(used_a).cv;
    r.cv_b = mean_ci(used_b).cv;
    if (d.size() < 2) return r;
    const double se = sample_stddev(d) / std::sqrt(static_cast<double>(d.size()));
    finish_t_test(r, diff, se, static_cast<double>(d.size() - 1), higher_is_better);
    return r;
}

Proportion wilson_interval(int k, int n, double level) {
    Proportion r;
    r.k = k;
    r.n = n;
    if (n <= 0) return r;
    const double nn = static_cast<double>(n);
    r.p = static_cast<double>(k) / nn;
    // The normal quantile as the t quantile's large-df limit (student_t_cdf caps df at 1e7).
    const double z = student_t_critical(level, 1e9);
    const double z2 = z * z;
    const double denom = 1 + z2 / nn;
    const double center = (r.p + z2 / (2 * nn)) / denom;
    const double half = z / denom * std::sqrt(r.p * (1 - r.p) / nn + z2 / (4 * nn * nn));
    r.lo = std::max(0.0, center - half);
    r.hi = std::min(1.0, center + half);
    return r;
}

uint64_t SplitMix64::next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double SplitMix64::uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint64_t SplitMix64::below(uint64_t n) {
    // Rejection sampling removes the modulo bias.
    const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
    uint64_t x;
    do {
        x = next();
    } while (x >= limit);
    return x % n;
}

double SplitMix64::normal() {
    double u1 = uniform01();
    while (u1 <= 0) u1 = uniform01();
    const double u2 = uniform01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
    SplitMix64 g(a ^ 0x5851F42D4C957F2Dull);
    uint64_t s = g.next() ^ b;
    SplitMix64 h(s);
    s = h.next() ^ c;
    SplitMix64 k(s);
    return k.next();
}

}  // namespace dsv4::bench
