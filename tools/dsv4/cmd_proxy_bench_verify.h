// `dsv4 proxy-bench --verify-tokens ...`: the cost of a speculative-decoding verify step on the Flash
// proxy (issue 24 item 5): every sequence of the batch runs n = k + 1 tokens (the last sampled token
// and k drafts) at its decode position, through the runner's served path (forward_sampled, greedy
// on the device), beside the one-token decode step timed the same way. Part of
// cmd_proxy_bench_cuda.cpp's run; CUDA builds only.
#pragma once

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/flash_proxy.h"
#include "model/kv_layout.h"
#include "runtime/cuda_bench_runner.h"
#include "tools/dsv4/cmd_proxy_bench.h"

namespace dsv4::cli {

// Bytes bound of a verify step: B sequences of n tokens at context L read the dense weights with B * n
// embedding rows, the routed experts B * n tokens touch (expert_fraction at B * n), and each sequence's
// KV once (the rows the last of its n tokens sees: a lower bound, the n windows and CSA selections
// differ). FLOPs: B * n tokens at context L (the LM head included for every token).
StepBytesModel verify_bytes_model(const ModelConfig& cfg, const ProxyWeightBytes& wb, const KvRowBytes& rows, int B,
                                  int n, int64_t L, int hot);

// For each (batch, context) of o.batches x o.contexts and n in {1} + o.verify_tokens: the B sequences
// are filled to context L, then steps of n tokens per sequence at positions L.. run through
// runner.forward_sampled (DeviceSample::kGreedy on the last token of each chunk: ids only come back,
// as when serving), the n values alternated in each of o.reps rounds after o.warmup rounds; each step
// rewrites the same positions. Wall time per step (plan, upload, launches or graph replay, sync). The
// runner computes the head and the greedy pick for each chunk's last token only (a verify step needs
// all n; see the printout). n outside [1, 16] is an error. With o.op_profile_prefill (option
// op_profile) each point also prints the per-op table of one eager step of every n > 1.
// Prints step time, its ratio to the one-token step, % of its own bound (bytes at bw_gbs or FLOPs at
// gemm_tflops) and a time-per-output-token projection from the measured steps (a draft step taken as
// the head plus one layer of J["points"]' decode point at the same batch and context, the MTP block's
// work; see the printout); appends the points to J["verify"]. Returns false on a runner error.
bool run_verify_points(CudaBenchRunner& runner, const ModelConfig& cfg, const ProxyWeightBytes& wb,
                       const KvRowBytes& rows, const KvLayout& layout, const ProxyBenchOptions& o, double bw_gbs,
                       double gemm_tflops, int hot, int64_t n_pages, nlohmann::json& J);

}  // namespace dsv4::cli
