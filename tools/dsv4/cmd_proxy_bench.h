// `dsv4 proxy-bench`: decode throughput of the DeepSeek-V4-Flash proxy measured through the CUDA
// runner (what `dsv4 serve --backend cuda` runs): real Flash per-layer shapes at a chosen depth,
// synthetic weights generated on the GPU in checkpoint formats, sequences pre-filled to a context
// length, decode steps timed as CUDA-graph replays against the bytes-moved model and the copy
// bandwidth measured in the same run (../shared/docs/perf-method.md, docs/perf/proxy-bench.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::cli {

struct ProxyBenchOptions {
    std::string json = "proxy_bench.json";
    int layers = 20;
    std::string layer_types;  // "" = default schedule (2 sliding, then CSA/HCA alternating)
    int hash_layers = 3;
    std::vector<int> batches{1, 8, 32, 64, 128, 256, 512};
    std::vector<int> contexts{1024, 8192, 32768};
    int reps = 20;  // timed graph replays per point (>= 20 for the reported spread)
    int warmup = 3;
    bool skewed = false;
    int hot_experts = 32;
    std::string kv_rows;  // KV row storage of the runner: fp8, bf16 or f32 ("": option kv_rows, default fp8)
    std::vector<std::string> options;  // --option KEY=VALUE (runtime/runtime_options.h)
    std::string tuning;                // --tuning FILE | none (runtime/tuning_select.h)
    uint64_t seed = 1;
    double reserve_gb = 3.0;   // device memory left free besides weights, workspace and pool
    double time_budget_s = 0;  // > 0: skip remaining points once the run has taken this long
    bool gemm_peak = true;     // measure the cuBLAS bf16 GEMM peak (TFLOP/s reference)
    int gpus = 1;              // expert parallel over GPUs 0 .. gpus-1 (each generates only its experts)
    // Prefill points (cmd_proxy_bench_prefill.cpp): fresh prompts of each length for each number of
    // users, run through forward() in chunked-prefill steps; empty: none.
    std::vector<int> prefill_lens;
    std::vector<int> prefill_users{1};
    int prefill_chunk = 8192;         // tokens of one sequence per step
    int prefill_step = 8192;          // tokens of all sequences per step
    int prefill_reps = 3;             // timed repetitions per point (median reported)
    bool prefill_only = false;        // skip the decode points
    bool op_profile_prefill = false;  // from option op_profile: per-op table of each 1-user point's first and
                                      // last steps and of each verify point's steps of n > 1 tokens
    // Verify points (cmd_proxy_bench_verify.cpp): steps of n tokens per sequence (n = k + 1 of speculative
    // decoding) beside the one-token step, at every batch and context; empty: none.
    std::vector<int> verify_tokens;
    // With verify points: the proxy gets a synthetic MTP block (mtp.0) and each point's draft step is
    // measured as a graph of that block and its greedy pick (CudaBenchRunner::time_mtp_draft) instead of
    // estimated from a decode point's layer and head.
    bool mtp_draft = false;
};

// Runs the benchmark; returns a process exit code. Without CUDA it prints why and returns 2.
int run_proxy_bench(const ProxyBenchOptions& o);

}  // namespace dsv4::cli
