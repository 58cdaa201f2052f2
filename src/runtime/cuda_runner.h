// CudaRunner: ModelRunner on one NVIDIA GPU (sm_90a). Host-only header: declares the factory; the
// implementation (cuda_runner.cpp, cuda_weights.cpp, kernels in src/kernels/cuda/ops) is only
// built when DSV4_HAVE_CUDA.
//
// Same semantics as RefRunner (src/runtime/ref_runner.h): f32 activations, every op of the CPU
// reference, KV state in the same KvLayout page model (state pages + token pages of 4-byte words;
// K=V rows in the kv_rows format, so pages shrink with fp8/bf16 rows) but in one device pool
// addressed through per-sequence page tables on the device. With kv_rows "fp8" it matches
// RefRunner with RefNumerics{kv_fp8 = true} (same cached values; indexer rows bf16). A step is
// planned once (page tables, tokens, positions, split schedule) into fixed device buffers; steps
// where every sequence decodes one token run as a CUDA graph captured per batch bucket (1, 2, 4,
// 8, 16, then steps of 16, 32 and 64 up to max_seqs: decode_bucket), padded sequences having
// n_tok 0 (B03). Prefill chunks run eagerly: projections
// batched over all tokens, the stateful part (ring, compressors, indexer, attention) one token
// step at a time across sequences.
#pragma once

#include <memory>
#include <string>

#include "dist/device_all_reduce.h"
#include "model/ref_model.h"
#include "runtime/model_runner.h"
#include "runtime/runtime_options.h"

namespace dsv4 {

struct CudaRunnerOptions {
    int64_t page_tokens = 64;
    int64_t n_pages = 0;  // 0: see gpu_memory_utilization
    // With n_pages 0: > 0 sizes the page pool from the GPU's memory, the pool taking what is left of
    // this fraction of it after the weights, the workspaces and a reserve (the kFull sampler's
    // weights and 2 GiB for CUDA graphs, cuBLAS and the driver), as vLLM's --gpu-memory-utilization,
    // capped at max_seqs sequences of max_context positions; 0 keeps the fixed default of room for
    // 64 sequences of 4096 tokens.
    double gpu_memory_utilization = 0.0;
    int max_seqs = 64;            // sequences per step
    int max_step_tokens = 8192;   // tokens per step (all sequences together)
    int64_t max_context = 65536;  // positions per sequence
    // Every switch and kernel choice (runtime/runtime_options.h), filled once at start-up by the tool
    // (defaults < environment < --option) or set directly by tests; the runner reads no environment.
    RuntimeOptions rt;
    bool verbose = true;  // print the weight summary and the variant table at start-up
    // Size the sparse_decode split workspace for at least this split-KV target (CTAs), so that
    // CudaBenchRunner::set_tuning_rules can install rules with targets up to it (`dsv4 tune`); 0: the
    // targets of the options and the tuning file only.
    int split_kv_workspace_ctas = 0;
    // Expert parallelism (docs/design.md): rank ep_rank of ep_size holds the routed experts
    // [r*E/N, (r+1)*E/N) only; everything else is replicated and every rank runs the same batch.
    // Routing runs on every rank, the expert kernels only over local experts, the shared expert of
    // layer l on rank l % N, and one all-reduce (ep_all_reduce, sum f32) of the MoE output [T, d]
    // per layer joins the ranks, inside the captured decode graph. ep_size 1: no collective (the
    // one-GPU path unchanged). The runner works on the device current when it is created; every
    // call must come from a thread with that device current, and all ranks must be created and
    // stepped together (init runs one all-reduce; runtime/multi_gpu_runner.h drives N ranks).
    int ep_rank = 0, ep_size = 1;
    std::shared_ptr<dist::DeviceAllReduce> ep_all_reduce;  // required when ep_size > 1
    // The model's MTP blocks to load and keep state for (speculative decoding's drafts, spec §2.11;
    // 0: none, 1: mtp.0), from a RefModel, the checkpoint loader or the synthetic proxy weights; the
    // model must hold them (window-only blocks: a compressed MTP block is refused).
    int mtp_blocks = 0;
    // Speculative decoding with the MTP block's drafts (issue 24): verify chunks of up to spec_tokens
    // drafts (0: off; needs mtp_blocks 1 and one GPU). The state layout holds their backup and the
    // block's pending inputs (model/spec_state.h); ModelRunner::max_draft_tokens() returns it.
    int spec_tokens = 0;
};

// True when a CUDA device is present and usable (tests skip otherwise).
bool cuda_device_available();

// `checkpoint_dir`: "" to upload model.weights() as f32 (built-in tiny model), else the checkpoint
// whose tensors are uploaded in their own formats (must be the one `model` was loaded from).
Result<std::unique_ptr<ModelRunner>> make_cuda_runner(std::shared_ptr<const RefModel> model,
                                                      const std::string& checkpoint_dir, const CudaRunnerOptions& opt);

// The runner for a checkpoint directory without the CPU reference model: the tensors are planned
// and validated on the host (model/load_plan.h: every tensor consumed or skipped with a reason)
// and then streamed in their own formats from the mapped shards to the GPU
// (runtime/checkpoint_loader.h). With ep_size > 1 only this rank's routed experts are read.
// `cfg` must be the directory's config.json. Errors: those of Checkpoint::open and make_load_plan
// (naming tensor and file), ResourceExhausted when the device lacks room (before allocating).
Result<std::unique_ptr<ModelRunner>> make_cuda_runner(const ModelConfig& cfg, const std::string& checkpoint_dir,
                                                      const CudaRunnerOptions& opt);

}  // namespace dsv4
