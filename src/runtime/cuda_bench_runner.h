// The CUDA runner built without host weights, plus the hooks the Flash proxy benchmark needs
// (`dsv4 proxy-bench`, ../shared/docs/perf-method.md): synthetic weights generated on the GPU
// (runtime/synthetic_weights.h), the device page pool for synthetic context fills, and CUDA-event
// timing of decode-graph replays. Host-only header; CUDA builds only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/cuda_runner.h"
#include "runtime/synthetic_weights.h"

namespace dsv4 {

// The runner's device page pool (KvLayout pages of layout.page_bytes, ids [0, n_pages)).
struct CudaPoolInfo {
    void* base = nullptr;
    int64_t page_bytes = 0;
    int64_t n_pages = 0;
    std::string kv_rows;  // compressed-row storage: "f32" or "bf16" (CudaRunnerOptions::kv_rows)
};

// Per-replay device times (CUDA events around each graph launch, no host work inside), in
// microseconds. `head_us`: a graph of the step's non-layer work alone (embedding, mHC head,
// final norm, LM head) at the same bucket, for the per-layer split.
struct DecodeGraphTiming {
    int bucket = 0;  // graph batch bucket the step ran in
    std::vector<double> step_us, head_us;
    // With op profiling (the argument or RuntimeOptions::op_profile): microseconds per step by op
    // label (runtime/op_profile.h; summed over the layers), from 5 replays of a marked capture.
    std::map<std::string, double> op_us;
};

class CudaBenchRunner : public ModelRunner {
public:
    virtual CudaPoolInfo pool_info() const = 0;
    // Plans `batch` (every sequence one token) once, captures (or reuses) its bucket's decode
    // graph, launches it `warmup` times, then times `reps` replays one by one. The replays re-run
    // the same step (same positions): state writes repeat, the values stay finite.
    // Errors: a sequence with more than one token; plan errors as forward().
    virtual Result<DecodeGraphTiming> time_decode_graph(const ForwardBatch& batch, int warmup, int reps,
                                                        bool op_profile = false) = 0;
    // Runs `batch` once eagerly (any chunk sizes, e.g. a prefill step) with CUDA-event marks
    // between op classes and returns the per-op table (runtime/op_profile.h; us summed over the
    // layers). The step's state writes happen as in forward(). Errors: plan errors as forward();
    // kUnimplemented where the runner cannot (expert-parallel runners).
    virtual Result<std::string> profile_step(const ForwardBatch& batch) {
        (void)batch;
        return error(StatusCode::kUnimplemented, "profile_step: not supported by this runner");
    }
    // Replaces the tuning file's rules (RuntimeOptions::tuning_rules) between steps, as if the runner
    // had been created with them: resolved and checked as at start-up, captured graphs dropped.
    // Errors: as at start-up (an unknown or illegal variant: the previous rules stay), a split-KV
    // target beyond the workspace (CudaRunnerOptions::split_kv_workspace_ctas), kUnimplemented for
    // runners that cannot (expert-parallel runners).
    virtual Status set_tuning_rules(const std::vector<TuningRule>& rules) {
        (void)rules;
        return error(StatusCode::kUnimplemented, "set_tuning_rules: not supported by this runner");
    }
    // Test hook (`dsv4 tune --calibrate`): every step from now on first spins `ns` nanoseconds on the GPU
    // (cuda::spin_device_ns; 0: off), a known slowdown for checking that the statistics detect it.
    // Captured graphs are dropped. Errors: ns < 0; kUnimplemented for runners that cannot.
    virtual Status set_test_delay_ns(int64_t ns) {
        (void)ns;
        return error(StatusCode::kUnimplemented, "set_test_delay_ns: not supported by this runner");
    }
    // Test hook (speculative decoding, issue 24): runs `batch` eagerly as forward() does (no pending
    // tokens), then MTP block 0 over the same positions, next[i] being the token after the batch's
    // token i (batch order, batch.n_tokens() ids); logits / mtp_logits: the main model's and the MTP
    // block's rows of every want_logits chunk's last token, [rows][vocab]. Errors: no MTP block
    // (CudaRunnerOptions::mtp_blocks 0: kFailedPrecondition), a next size or id out of range, plan errors.
    virtual Status forward_with_mtp(const ForwardBatch& batch, std::span<const int32_t> next,
                                    std::vector<std::vector<float>>& logits,
                                    std::vector<std::vector<float>>& mtp_logits) {
        (void)batch, (void)next, (void)logits, (void)mtp_logits;
        return error(StatusCode::kUnimplemented, "forward_with_mtp: not supported by this runner");
    }
    // Bench hook (issue 24 item 5): speculative decoding's draft step, MTP block 0 over one token per
    // sequence of `batch` (its positions and tokens as the next tokens; input streams zero) plus the
    // greedy pick of its rows, captured as a graph; `warmup` replays, then `reps` timed ones (us each).
    // The block's window ring slots of those positions are written. With RuntimeOptions::op_profile the
    // per-op table of a marked replay goes to stderr. Errors: no MTP block
    // (kFailedPrecondition), a chunk of more than one token, plan errors.
    virtual Result<std::vector<double>> time_mtp_draft(const ForwardBatch& batch, int warmup, int reps) {
        (void)batch, (void)warmup, (void)reps;
        return error(StatusCode::kUnimplemented, "time_mtp_draft: not supported by this runner");
    }
    // Steps launched as graph replays so far, by kind (tests: which path a step took).
    struct GraphReplays {
        int64_t decode = 0, verify = 0, spec = 0;  // spec: the speculative cycle's draft work (spec_graphs)
        int64_t pdl_edges = 0;                     // programmatic edges in the graphs instantiated so far (graph_pdl)
        int64_t pdl_fallbacks = 0;  // graphs whose programmatic edges the driver rejected (plain edges used)
    };
    virtual GraphReplays graph_replays() const { return {}; }
    // Query blocks of batched prefill steps whose indexer took the filtered form
    // (kernels/cuda/ops/indexer_filter.h; option indexer_filter_min_rows), since the runner was built.
    virtual int64_t indexer_filter_blocks() const { return 0; }
    // Layer launches of decode steps whose q rows went to sparse_decode as bf16 straight from q's norm
    // and RoPE (option decode_q_bf16), counted when launched eagerly or captured into a graph.
    virtual int64_t decode_q_bf16_layers() const { return 0; }
    virtual std::string variant_table() const = 0;  // the active attention variant (printable)
    virtual size_t device_bytes() const = 0;        // everything the runner allocated
    // Runs f on the page pool of every GPU the runner spans (the synthetic context fill must
    // write the same rows into every replica), each call with that GPU current.
    virtual Status for_each_pool(const std::function<Status(const CudaPoolInfo&)>& f) { return f(pool_info()); }
    // Expert parallel runners: one eager collective of the largest size on every rank, so the
    // collective library connects before any graph capture (all ranks must call it together).
    virtual Status collective_warm_up() { return Status::ok(); }
};

// A CUDA runner over synthetic weights for `cfg` (no RefModel weights, no checkpoint). `bytes`
// (optional) receives the weight bytes by category. Errors: no CUDA device, out of memory, the
// options' errors as make_cuda_runner.
Result<std::unique_ptr<CudaBenchRunner>> make_cuda_runner_synthetic(const ModelConfig& cfg,
                                                                    const SyntheticWeightsOptions& wopt,
                                                                    const CudaRunnerOptions& opt,
                                                                    ProxyWeightBytes* bytes = nullptr);

}  // namespace dsv4
