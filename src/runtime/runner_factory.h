// The one place that knows which backends exist: builds a ModelRunner from options.
#pragma once

#include <memory>
#include <string>

#include "model/ref_model.h"
#include "runtime/model_runner.h"
#include "runtime/runtime_options.h"

namespace dsv4 {

struct RunnerOptions {
    std::string model = "tiny";   // "tiny" (built-in, seeded) or an HF checkpoint directory
    std::string backend = "cpu";  // "cpu" | "cuda"
    int64_t page_tokens = 64;     // tokens per token page
    int64_t n_pages = 0;          // 0: a default sized for the model and backend
    // cuda, with n_pages 0: > 0 sizes the page pool from this fraction of each GPU's memory
    // (CudaRunnerOptions::gpu_memory_utilization); 0: room for 64 sequences of 4096 tokens.
    double gpu_memory_utilization = 0.0;
    uint64_t seed = 0;       // seed of the built-in tiny model's weights
    RefNumerics numerics{};  // CPU reference: quantisation simulation of the DeepSeek reference
    RuntimeOptions rt{};     // cuda: every switch and kernel choice (runtime/runtime_options.h)
    int gpus = 1;            // cuda: expert parallel over GPUs 0 .. gpus-1 (runtime/multi_gpu_runner.h)
    // cuda: > 0 serves the synthetic Flash proxy of this many layers (model/flash_proxy.h: Flash
    // shapes, seeded weights generated on the GPU, no checkpoint; the output text is meaningless)
    // instead of `model`. 43 is the full Flash depth.
    int synthetic_flash_layers = 0;
    int max_seqs = 64;        // cuda: sequences per step (the engine's max_running must not exceed it)
    int64_t max_context = 0;  // cuda: positions per sequence (0: the runner's default, 65,536)
    int max_step_tokens = 0;  // cuda: tokens per step (0: the runner's default, 8,192)
    // Speculative decoding (issue 24): verify chunks of up to this many draft tokens (0: off).
    // Drafts from the checkpoint's MTP block ("mtp"), or on the cpu backend from the target's own
    // greedy tokens ("self", a test mode; the cuda backend refuses it).
    int speculative_tokens = 0;
    std::string speculative_draft = "mtp";  // "mtp" | "self"
};

Result<std::unique_ptr<ModelRunner>> make_model_runner(const RunnerOptions& opt);

// config.json of a checkpoint directory (a plain directory or a Hugging Face snapshot folder,
// whose files are symlinks into ../../blobs/). NotFound names the directory.
Result<ModelConfig> load_model_config(const std::string& dir);

// The config of the model `opt` names ("tiny", a checkpoint directory, or the synthetic Flash proxy
// of opt.synthetic_flash_layers layers), without loading weights. Errors as load_model_config.
Result<ModelConfig> runner_model_config(const RunnerOptions& opt);

// Loads config.json + safetensors from a directory, or builds the built-in tiny model.
Result<std::shared_ptr<const RefModel>> load_ref_model(const std::string& model, uint64_t seed,
                                                       RefNumerics numerics = {});

}  // namespace dsv4
