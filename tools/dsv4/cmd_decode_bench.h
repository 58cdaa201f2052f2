// `dsv4 decode-bench`: kernel-level decode benchmarks on the DeepSeek-V4-Flash shapes (decode
// attention, MoE expert path, dense GEMVs) against the copy bandwidth and bf16 GEMM peak measured
// in the same run (docs/perf/ledger.md, ../shared/docs/perf-method.md).
#pragma once

#include <string>
#include <vector>

namespace dsv4::cli {

struct DecodeBenchOptions {
    std::string out = "decode_bench.json";
    std::vector<int> batches{1, 8, 32, 64, 128, 256};
    std::vector<int> contexts{1024, 8192, 32768};
    std::vector<std::string> sections{"attn", "moe", "gemv", "attn_sweep", "moe_sweep", "gemv_sweep"};
    int reps = 30;   // graph replays per point
    int rounds = 3;  // A/B rounds (ABAB...) in the sweeps
    bool skewed = false;
};

// Runs the benchmark; returns a process exit code. Without CUDA it prints why and returns 2.
int run_decode_bench(const DecodeBenchOptions& o);

}  // namespace dsv4::cli
