// Terminal table and progress bar (see report.h). Columns show the across-iteration mean,
// the 95% CI half-width in percent and the coefficient of variation for throughput, and
// the mean over iterations of per-iteration latency percentiles.
#include "bench/report.h"

#include <fmt/format.h>

namespace dsv4::bench {
namespace {
std::string with_ci(const MeanCi& c) {
    const double half_pct = c.mean != 0 ? 100 * (c.hi - c.mean) / c.mean : 0;
    return fmt::format("{:.1f} ±{:.1f}% cv{:.1f}%", c.mean, half_pct, 100 * c.cv);
}
}  // namespace

std::string format_summary_header() {
    return fmt::format(
        "{:>3} {:>5} {:>5} {:>4} {:>27} {:>10} {:>8} {:>9} {:>9} {:>9} {:>8} "
        "{:>8} {:>9}\n",
        "cfg", "conc", "n", "err", "output tok/s (95% CI, CV)", "total tok/s", "req/s", "tok/s/usr", "TTFT med",
        "TTFT p99", "TPOT med", "ITL p99", "E2E med");
}

std::string format_summary_row(const LevelSummary& s) {
    return fmt::format(
        "{:>3} {:>5} {:>5} {:>4} {:>27} {:>10.1f} {:>8.2f} {:>9.1f} {:>9.1f} "
        "{:>9.1f} {:>8.2f} {:>8.2f} {:>9.1f}\n",
        s.config.empty() ? "-" : s.config, s.level, fmt::format("{}x{}", s.iterations, s.n_requests), s.n_errors,
        with_ci(s.output_tok_s), s.total_tok_s.mean, s.req_s.mean, s.tok_s_per_user.mean, s.ttft_median_ms.mean,
        s.ttft_p99_ms.mean, s.tpot_median_ms.mean, s.itl_p99_ms.mean, s.e2e_median_ms.mean);
}

std::string format_summary_legend() {
    return "n = iterations x requests; latencies in ms (mean over iterations of each "
           "iteration's median/p99); ±: 95% CI half-width of the mean (Student t); cv: "
           "iteration-to-iteration coefficient of variation.\n";
}

std::string format_iteration_line(const IterationMetrics& m) {
    std::string s = fmt::format(
        "{}conc {:>4} iter {}: {:>9.1f} out tok/s {:>8.2f} req/s TTFT med {:>8.1f} ms TPOT med "
        "{:>7.2f} ms  {} ok {} err in {:.2f} s",
        m.config.empty() ? "" : "[" + m.config + "] ", m.level, m.iteration, m.output_tok_s, m.req_s, m.ttft_ms.median,
        m.tpot_ms.median, m.n_ok, m.n_errors, m.duration_s);
    if (!m.error_samples.empty()) s += "  first error: " + m.error_samples.front();
    return s + "\n";
}

void ProgressBar::update(std::string_view label, int done, int total, int errors) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
    // Logs (not a terminal) get the per-iteration summary lines instead of a bar.
    if (!interactive_) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = total > 0 ? done * kWidth / total : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::string line = fmt::format("{} [{}] {}/{}", label, bar, done, total);
    if (errors > 0) line += fmt::format(" ({} errors)", errors);
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    drawn_ = true;
    std::fflush(out_);
}

void ProgressBar::clear() {
    if (interactive_ && drawn_) {
        std::fprintf(out_, "\r\033[K");
        std::fflush(out_);
    }
    drawn_ = false;
}

}  // namespace dsv4::bench
