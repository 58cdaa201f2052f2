// `dsv4 tune` (issue 16 item 3): each candidate kernel choice (a tuning-file rule: a variant and its
// parameters for one op) is judged against the heuristics, shape class by shape class, in three
// stages: correctness (TuneBench::correctness: the op against an fp64 CPU evaluation where the bench
// has one, else the step's logits against the heuristics'), the op's own time in the step (kernel by
// kernel: a candidate whose op is slower is dropped), then the end-to-end step time in ABBA-ordered
// pairs in one process. The verdicts of all end-to-end comparisons of one run are decided together
// (Holm, family-wise error rate 1 - confidence, bench/family.h), and a verdict also needs a change of
// at least TuneOptions::min_effect; a class keeps the candidate with the lowest step-time ratio among
// those found faster, and no rule where none is. What is measured and how is behind TuneBench, so
// that this logic is tested on the CPU with a simulated bench.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "core/status.h"
#include "runtime/tuning_file.h"

namespace dsv4::tune {

// A decode step of `batch` sequences, each with `context` tokens before the decoded one.
struct ShapePoint {
    int batch = 1;
    int64_t context = 8192;
};

// The shapes a rule covers and the point it is measured at (the class's largest batch and context).
struct ShapeClass {
    ShapePoint at;
    ShapeRange tokens;          // batch sizes (decode: tokens per step)
    ShapeRange context;         // any for ops without a context dimension
    std::string label() const;  // "batch 9-64, context 1025-8192"
};

// From ascending-sorted, de-duplicated lists: batch b_i covers (b_{i-1}, b_i] (the first from 1, the
// last with no upper bound), likewise contexts when `with_context` (else one open range at the largest
// context). One class per (batch, context) pair. Errors: an empty list or a value < 1.
Result<std::vector<ShapeClass>> shape_classes(std::vector<int> batches, std::vector<int64_t> contexts,
                                              bool with_context);

// A kernel choice to try: `rule` names the op, the variant and parameters (its ranges are set per
// class by the tuner); `label` says it in words ("warps 4, stages 3, split-KV 256").
struct Candidate {
    std::string label;
    TuningRule rule;
};

// What the tuner measures. Every call refers to the rules last installed with set_rules.
class TuneBench {
public:
    virtual ~TuneBench() = default;
    // Installs `rules` (empty: the heuristics). Errors: rules the runner refuses (an illegal
    // variant); the tuner records the message and skips the candidate.
    virtual Status set_rules(const std::vector<TuningRule>& rules) = 0;
    // The installed rules' correctness at p: `error` in units of the check's bound (<= 1 passes) and
    // what was compared (e.g. "sparse_decode vs fp64: rel L2 3.1e-3 (bound 1e-2), ...").
    struct Correctness {
        double error = 0;
        std::string check;
    };
    virtual Result<Correctness> correctness(const ShapePoint& p) = 0;
    // The op's own device time in one step at p, ms (kUnimplemented: no kernel stage for this op).
    virtual Result<double> op_ms(const ShapePoint& p, TunedOp op) = 0;
    // One end-to-end measurement at p: the step time, ms (e.g. the median of a few graph replays).
    virtual Result<double> step_ms(const ShapePoint& p) = 0;
    // Calibration only (calibrate.h): from now on every step is slowed by `fraction` of its time at p
    // under the heuristics (0: off). kUnimplemented where the bench cannot.
    virtual Status set_slowdown(const ShapePoint& p, double fraction) {
        (void)p;
        (void)fraction;
        return error(StatusCode::kUnimplemented, "this bench cannot slow its steps");
    }
};

struct TuneOptions {
    int pairs = 8;             // end-to-end ABBA pairs per candidate and class (>= 2)
    double confidence = 0.95;  // family-wise: 1 - the FWER over all comparisons of the run
    // A faster/slower verdict also needs |ratio - 1| >= min_effect: below about 0.5% the paired test
    // on real GPUs said "faster" or "slower" of a step against itself more often than its nominal
    // rate (ledger E40: 8 of 100 A/A comparisons, every one within 0.3%), and such gains are not
    // worth a rule.
    double min_effect = 0.005;
    // Kernel stage: keep a candidate whose op time <= this x the heuristics' (one profiled measurement
    // each: a margin above its noise, so that only clearly slower kernels skip the end-to-end stage).
    double kernel_keep = 1.05;
    double time_budget_s = 0;       // > 0: candidates not started by then are skipped ("time budget")
    std::function<double()> now_s;  // clock for the budget (seconds); null: steady_clock
    std::string date, git_sha;      // stamped into each kept rule's measurement
};

enum class Stage { kIllegal, kIncorrect, kKernelSlower, kOverBudget, kMeasured };
const char* stage_name(Stage s);

// One candidate at one class.
struct Outcome {
    ShapeClass cls;
    Candidate cand;  // rule ranges set to the class
    Stage stage = Stage::kMeasured;
    std::string detail;                                 // the refusal, or the numbers that stopped it
    double correctness_error = -1;                      // in units of the check's bound; -1: not checked
    std::string correctness_check;                      // what was compared (TuneBench::Correctness::check)
    bool below_min_effect = false;                      // the test alone said faster/slower, by less than min_effect
    double op_ms_heuristic = -1, op_ms_candidate = -1;  // -1: not measured
    std::vector<double> heuristic_ms, candidate_ms;     // end-to-end pairs, in pair order
    std::vector<bool> candidate_first;                  // per pair: the order it ran in (ABBA)
    bench::RatioTest test;  // candidate / heuristics step time, at the family's interval level
    double adjusted_p = 1;  // Holm over the run's measured comparisons
    bool kept = false;
};

struct TuneReport {
    std::vector<Outcome> outcomes;
    std::vector<TuningRule> chosen;  // the kept candidates' rules, measurement filled in
    double alpha = 0.05;             // family-wise error rate controlled
    int m = 0;                       // comparisons in the family
    double min_effect = 0;           // TuneOptions::min_effect of the run
    double seconds = 0;
};

// Candidates and the classes they are tried at (e.g. sparse_decode over batch x context, the other
// ops over batches alone).
struct CandidateSet {
    std::vector<ShapeClass> classes;
    std::vector<Candidate> candidates;
};

// A faster or slower verdict of a ratio within min_effect of 1 (|ratio - 1| < min_effect) becomes
// "no detectable difference"; *demoted (optional) says whether it did.
void apply_min_effect(bench::RatioTest& t, double min_effect, bool* demoted = nullptr);

// Runs the three stages for every set's class x candidate, then the verdicts of all end-to-end
// comparisons of all sets as one family. Errors: a bench call failing for the heuristics themselves
// (the run cannot go on), options out of range.
Result<TuneReport> run_tune(TuneBench& bench, const std::vector<CandidateSet>& sets, const TuneOptions& opt);
// One set.
Result<TuneReport> run_tune(TuneBench& bench, const std::vector<ShapeClass>& classes,
                            const std::vector<Candidate>& candidates, const TuneOptions& opt);

}  // namespace dsv4::tune
