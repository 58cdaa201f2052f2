// `dsv4 proxy-bench --prefill-lens ...`: offline prefill throughput of the Flash proxy through the
// CUDA runner (issue 22 item 3). Part of cmd_proxy_bench_cuda.cpp's run; CUDA builds only.
#pragma once

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/flash_proxy.h"
#include "model/kv_layout.h"
#include "runtime/cuda_bench_runner.h"
#include "tools/dsv4/cmd_proxy_bench.h"

namespace dsv4::cli {

// FLOPs of prefilling one prompt of L tokens: the sum over its positions p of one token's decode
// FLOPs at context p (step_bytes_model, B = 1: 2 x the dense and top-k expert matrix elements, the
// attention over the window and the compressed rows, the indexer scores). The LM head is counted
// once per token there; prefill computes it for the last token only, so it is taken out again.
double prefill_flops(const ModelConfig& cfg, const ProxyWeightBytes& wb, const KvRowBytes& rows, int64_t L, int hot);

// For each (prompt length, users) point: fresh sequences (pages reset by start_pos 0), the prompts
// run through runner.forward() in steps of at most o.prefill_step tokens with at most
// o.prefill_chunk tokens of one sequence each (sequences served in turn, as a chunked-prefill
// scheduler does); logits for each prompt's last token. Wall time per repetition (forward() returns
// after the logits are on the host); median and spread of o.prefill_reps repetitions after one
// warm-up. Prints a table (tokens/s, TFLOP/s, % of the GEMM peak measured in the same run, TTFT of
// the first prompt) and appends the points to J["prefill"]. Returns false on a runner error.
bool run_prefill_points(CudaBenchRunner& runner, const ModelConfig& cfg, const ProxyWeightBytes& wb,
                        const KvRowBytes& rows, const KvLayout& layout, const ProxyBenchOptions& o, double gemm_tflops,
                        nlohmann::json& J);

}  // namespace dsv4::cli
