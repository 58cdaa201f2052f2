// `dsv4 tune` (issue 16 item 3, docs/tuning.md): kernel variants chosen by measurement on this GPU
// for the Flash proxy's decode steps; writes a tuning file and appends to the tuning ledger. The
// decisions are src/tune/tuner.h's; the GPU side is cmd_tune_cuda.cpp (cmd_tune_nocuda.cpp explains
// itself in CPU-only builds).
#pragma once

#include <string>
#include <vector>

namespace dsv4::cli {

struct TuneCliOptions {
    std::string op = "sparse_decode";  // sparse_decode | dense_gemv | moe_expert | moe_grouped | all
    // Candidate variants: "all" registered ones, "default-tile" (sparse_decode: the variants sharing the
    // heuristic's tile, i.e. its warps and stages vary), or a comma list of registry names.
    std::string variants = "all";
    std::vector<int> split_kv_targets{0};  // sparse_decode; 0 = the option's target (no parameter)
    std::vector<int> batches{1, 8, 64, 256};
    std::vector<int> contexts{8192};
    int layers = 20;
    int pairs = 8;  // end-to-end ABBA pairs per candidate and class
    int reps = 10;  // graph replays per end-to-end measurement (their median)
    int warmup = 2;
    double confidence = 0.95;
    double max_logit_error = 0.05;  // correctness gate of ops without an fp64 op check
    double min_effect = 0.005;      // tune/tuner.h TuneOptions::min_effect
    double kernel_keep = 1.05;
    double time_budget_s = 0;
    std::string out;  // tuning file ("": the default directory's file for this GPU and model shape)
    std::string ledger = "tune-ledger.jsonl";
    std::string ledger_md = "tune-ledger.md";
    std::string kv_rows;  // as proxy-bench
    std::vector<std::string> options;
    uint64_t seed = 1;
    double reserve_gb = 3.0;
    std::string command;  // the command line, for the ledger
    // > 0: instead of tuning, calibrate (src/tune/calibrate.h): this many A/A comparisons and as many
    // against a step slowed by `slowdown`, at the first batch and context.
    int calibrate = 0;
    double slowdown = 0.12;
};

// Returns a process exit code: 0 done (a tuning file written, even with no rule kept), 2 bad
// arguments or no GPU / CUDA build, 3 a failure while measuring.
int run_tune_cmd(const TuneCliOptions& o);

}  // namespace dsv4::cli
