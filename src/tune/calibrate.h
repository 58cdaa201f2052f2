// `dsv4 tune --calibrate` (issue 16 item 4): do the tuner's verdicts hold on this machine? At one
// shape point, N A/A comparisons (the heuristics against themselves, with the same rule switches and
// ABBA pairs as a real candidate) count the false "faster"/"slower" verdicts, and N comparisons
// against a deliberately slowed step (TuneBench::set_slowdown) count the detections; each count with
// its Wilson interval. Each comparison is judged alone at 1 - confidence (no family), as one
// candidate of a run would be before the family correction, which only makes verdicts rarer, and
// with the tuner's minimum effect (TuneOptions::min_effect); the rates of the paired test alone are
// reported beside.
#pragma once

#include <functional>
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
    double min_effect = 0.005;  // as TuneOptions::min_effect
};

// One comparison: its verdict and the step times it was made from (ms; a[k], b[k] one ABBA pair).
struct CalibrationComparison {
    bench::RatioTest test;          // B/A step time; the verdict with the minimum effect applied
    bool below_min_effect = false;  // the paired test alone said faster/slower
    std::vector<double> a_ms, b_ms;
};

struct CalibrationReport {
    ShapePoint at;
    CalibrationOptions opt;
    std::vector<CalibrationComparison> aa, detect;                     // every comparison
    bench::Proportion false_verdicts;                                  // A/A comparisons that said faster or slower
    bench::Proportion detected;                                        // slowed comparisons that said slower
    bench::Proportion false_verdicts_test_alone, detected_test_alone;  // without the minimum effect
    double seconds = 0;
};

// Called after each comparison (slowed: false for the A/A ones; index from 0), e.g. to print progress
// that survives the process being stopped.
using CalibrationProgress = std::function<void(bool slowed, int index, const CalibrationComparison&)>;

// Errors: options out of range, a bench call failing (set_slowdown unimplemented included).
Result<CalibrationReport> calibrate(TuneBench& bench, const ShapePoint& at, const CalibrationOptions& opt,
                                    const CalibrationProgress& progress = {});

}  // namespace dsv4::tune
