// Benchmark plot through gnuplot: writes a self-contained gnuplot script (data inline) next
// to the image and runs it. Left panel: output tok/s vs concurrency (with the 95% CI as
// error bars); right panel: tok/s per user vs output tok/s, the usual throughput/latency
// trade-off curve. SVG or PNG by the output file's extension.
#pragma once

#include <string>
#include <vector>

#include "bench/metrics.h"
#include "core/status.h"

namespace dsv4::bench {

struct PlotSeries {
    std::string name;                  // legend entry, e.g. "A http://..." or the model
    std::vector<LevelSummary> levels;  // ascending concurrency
};

// The gnuplot script for the given image path (exposed for tests).
std::string gnuplot_script(const std::string& image_path, const std::vector<PlotSeries>& series,
                           const std::string& title);

struct PlotResult {
    bool drawn = false;
    std::string script_path;
    std::string note;  // why it was skipped, when it was
};
// Writes <image_path minus extension>.gp and runs gnuplot on it. A missing gnuplot is not an
// error: the result says it was skipped (the script stays for later use).
Result<PlotResult> write_plot(const std::string& image_path, const std::vector<PlotSeries>& series,
                              const std::string& title);

}  // namespace dsv4::bench
