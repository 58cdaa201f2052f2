// `dsv4 tune --calibrate` (issue 16 item 4): do the tuner's verdicts hold on this machine? At one
// shape point, N A/A comparisons (the heuristics against themselves, with the same rule switches and
// ABBA pairs as a real candidate) count the false "faster"/"slower" verdicts, and N comparisons
// against a deliberately slowed step (TuneBench::set_slowdown) count the detections; each count with
// its Wilson interval. Each comparison is judged alone at 1 - confidence (no family), as one
// candidate of a run would be before the family correction, which only makes verdicts rarer.
#pragma once

#include <vector>

#include "bench/stats.h"
#include "core/status.h"
#include "tune/tuner.h"

namespace dsv4::tune {

struct CalibrationOptions {
    int aa = 100;            // A/A comparisons
    int detect = 100;        // comparisons against the slowed step
    double slowdown = 0.12;  // the slowed step takes (1 + slowdown) x the heuristics' time
    int pairs = 8;           // ABBA pairs per comparison
    double confidence = 0.95;
};

struct CalibrationReport {
    ShapePoint at;
    CalibrationOptions opt;
    std::vector<bench::RatioTest> aa, detect;  // every comparison (B/A step time)
    bench::Proportion false_verdicts;          // A/A comparisons that said faster or slower
    bench::Proportion detected;                // slowed comparisons that said slower
    double seconds = 0;
};

// Errors: options out of range, a bench call failing (set_slowdown unimplemented included).
Result<CalibrationReport> calibrate(TuneBench& bench, const ShapePoint& at, const CalibrationOptions& opt);

}  // namespace dsv4::tune
