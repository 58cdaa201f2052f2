// The machine-written experiment ledger of `dsv4 tune` (issue 16 item 3): every candidate of a run
// as one JSON line (hypothesis, command, every measurement, interval, verdict, whether it was kept),
// and a generated Markdown section in the style of docs/perf/ledger.md.
#pragma once

#include <string>

#include "core/status.h"
#include "tune/calibrate.h"
#include "tune/tuner.h"

namespace dsv4::tune {

// What identifies a run.
struct TuneRunInfo {
    std::string date;         // ISO 8601, UTC
    std::string git_sha;      // of the build
    TuningKey key;            // GPU, driver, CUDA, model shape
    std::string command;      // as typed
    std::string tuning_file;  // where the chosen rules were written ("" = not written)
};

// One JSON object per outcome (schema "dsv4.tune.ledger.v1"). Errors: the file cannot be appended to.
Status append_ledger_jsonl(const std::string& path, const TuneRunInfo& info, const TuneReport& rep);
// "## <date> · dsv4 tune · <ops>" with the command, the family's error rate, and one table row per
// outcome: class, candidate, stage, op times, step times (mean of the pairs), ratio [CI], Holm p,
// verdict, kept.
std::string ledger_markdown(const TuneRunInfo& info, const TuneReport& rep);
// A calibration as one JSON line (schema "dsv4.tune.calibration.v1": counts, Wilson intervals, every
// comparison's ratio, interval and verdict) and its Markdown section.
Status append_calibration_jsonl(const std::string& path, const TuneRunInfo& info, const CalibrationReport& rep);
std::string calibration_markdown(const TuneRunInfo& info, const CalibrationReport& rep);
// Appends `text` to `path` (created when missing). Errors: it cannot be written.
Status append_text_file(const std::string& path, const std::string& text);

}  // namespace dsv4::tune
