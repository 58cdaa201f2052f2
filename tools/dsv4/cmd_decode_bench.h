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
    // What the sweeps run, to spend less device time on them (lists comma-separated, names
    // canonical; --moe-sweep-batches etc.).
    std::vector<int> moe_sweep_batches{1, 8, 64, 256};  // batch sizes of moe_sweep
    std::string moe_sweep_variants;                     // MoE expert GEMV variants of moe_sweep; empty: every variant
    // gemv_sweep's shapes (kGemvShapes names, run in the order given). Set: those shapes at
    // `batches` with f32 x (the runtime's form), plus the columns "old" (pre-K-chunk heuristic)
    // and "new" (the heuristic now). Empty: wq_b, wo_b, wkv at batches 1, 8, 32, 128 with bf16 x.
    std::string gemv_sweep_shapes;
    // Dense GEMV variants of gemv_sweep's explicit columns; empty: every variant legal for the shape.
    std::string gemv_sweep_variants;
    bool gemv_sweep_x_bf16 = false;  // gemv_sweep's named shapes take bf16 x instead of f32
};

// Runs the benchmark; returns a process exit code. Without CUDA it prints why and returns 2.
int run_decode_bench(const DecodeBenchOptions& o);

}  // namespace dsv4::cli
