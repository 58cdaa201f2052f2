// LoadProgress (load_progress.h).
#include "runtime/load_progress.h"

#include <algorithm>
#include <cmath>

namespace dsv4 {

std::string load_progress_line(uint64_t done, uint64_t total, double seconds, int bar_width) {
    const double gb = double(done) / 1e9, total_gb = double(total) / 1e9;
    const double frac = total > 0 ? std::min(1.0, double(done) / double(total)) : 1.0;
    char rate[32] = "- GB/s", eta[32] = "ETA -";
    if (seconds > 0 && done > 0) {
        const double gbs = gb / seconds;
        std::snprintf(rate, sizeof rate, "%.2f GB/s", gbs);
        const double left = done >= total ? 0.0 : (total_gb - gb) / gbs;
        std::snprintf(eta, sizeof eta, "ETA %.0f s", std::ceil(left));
    }
    std::string bar(size_t(std::max(bar_width, 0)), '.');
    std::fill(bar.begin(), bar.begin() + std::lround(frac * double(bar.size())), '#');
    char line[160];
    std::snprintf(line, sizeof line, "[load] %.2f / %.2f GB  %s  %s  [%s]", gb, total_gb, rate, eta, bar.c_str());
    return line;
}

LoadProgress::LoadProgress(uint64_t total, bool enabled, std::FILE* out, double interval_s)
    : total_(total),
      enabled_(enabled),
      out_(out),
      interval_s_(interval_s),
      t0_(std::chrono::steady_clock::now()),
      last_(t0_) {}

void LoadProgress::update(uint64_t done) {
    done_ = done;
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && std::chrono::duration<double>(now - last_).count() < interval_s_) return;
    last_ = now;
    draw();
}

void LoadProgress::finish() {
    if (!enabled_) return;
    draw();
    std::fputc('\n', out_);
    std::fflush(out_);
    enabled_ = false;
}

void LoadProgress::draw() {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    // Trailing spaces clear what a longer previous line left.
    std::fprintf(out_, "\r%s   ", load_progress_line(done_, total_, s).c_str());
    std::fflush(out_);
    drawn_ = true;
}

}  // namespace dsv4
