// gnuplot script generation (see plot.h). Data travel as inline datablocks ($s0 << EOD) so
// that the .gp file alone reproduces the figure.
#include "bench/plot.h"

#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

namespace dsv4::bench {
namespace {

std::string quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out.push_back('\\');
        if (c == '\n') continue;
        out.push_back(c);
    }
    return out + "\"";
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string gnuplot_script(const std::string& image_path, const std::vector<PlotSeries>& series,
                           const std::string& title) {
    std::string s = "# dsv4 bench plot; run: gnuplot <this file>\n";
    if (ends_with(image_path, ".png")) {
        s += "set terminal png size 1400,560\n";
    } else {
        s += "set terminal svg size 1400,560 dynamic background rgb 'white'\n";
    }
    s += "set output " + quote(image_path) + "\n";
    for (size_t i = 0; i < series.size(); ++i) {
        s += fmt::format("$s{} << EOD\n", i);
        s += "# conc out_tok_s ci_lo ci_hi tok_s_per_user\n";
        for (const LevelSummary& l : series[i].levels) {
            s += fmt::format("{} {:.6g} {:.6g} {:.6g} {:.6g}\n", l.level, l.output_tok_s.mean, l.output_tok_s.lo,
                             l.output_tok_s.hi, l.tok_s_per_user.mean);
        }
        s += "EOD\n";
    }
    s += "set multiplot layout 1,2 title " + quote(title) + " noenhanced\n";
    s += "set grid\nset key top left noenhanced\n";
    s += "set logscale x 2\nset xlabel 'concurrency'\nset ylabel 'output tok/s'\n";
    s += "set title 'Output throughput vs concurrency (95% CI)'\n";
    s += "plot ";
    for (size_t i = 0; i < series.size(); ++i) {
        if (i) s += ", \\\n     ";
        // Explicit colours: the label plots below would otherwise shift the colour cycle.
        s += fmt::format("$s{} using 1:2:3:4 with yerrorlines lw 2 pt 7 lc {} title {}", i, i + 1,
                         quote(series[i].name));
    }
    s += "\nunset logscale x\nset xlabel 'output tok/s'\nset ylabel 'tok/s per user'\n";
    s += "set title 'Per-user speed vs total output throughput (labels: concurrency)'\n";
    s += "plot ";
    for (size_t i = 0; i < series.size(); ++i) {
        if (i) s += ", \\\n     ";
        s += fmt::format(
            "$s{} using 2:5 with linespoints lw 2 pt 7 lc {} title {}, \\\n     "
            "$s{} using 2:5:(sprintf('%d', $1)) with labels offset 0,1 notitle",
            i, i + 1, quote(series[i].name), i);
    }
    s += "\nunset multiplot\n";
    return s;
}

Result<PlotResult> write_plot(const std::string& image_path, const std::vector<PlotSeries>& series,
                              const std::string& title) {
    PlotResult r;
    const size_t dot = image_path.find_last_of('.');
    const size_t slash = image_path.find_last_of('/');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    r.script_path = (has_ext ? image_path.substr(0, dot) : image_path) + ".gp";
    {
        std::ofstream f(r.script_path);
        if (!f) return error(StatusCode::kUnavailable, "cannot write {}", r.script_path);
        f << gnuplot_script(image_path, series, title);
        if (!f) return error(StatusCode::kUnavailable, "write to {} failed", r.script_path);
    }
    if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
        r.note = "gnuplot not found (Debian: gnuplot-nox); plot skipped, script left at " + r.script_path;
        return r;
    }
    const std::string cmd = "gnuplot " + quote(r.script_path) + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
        return error(StatusCode::kInternal, "gnuplot failed on {}", r.script_path);
    }
    r.drawn = true;
    return r;
}

}  // namespace dsv4::bench
