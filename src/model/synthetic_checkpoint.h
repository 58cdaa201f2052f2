// A synthetic checkpoint in the official DeepSeek-V4-Flash layout (spec §1.1 config.json, §4.1
// names / shapes / dtypes, §4.2 formats, several shards + model.safetensors.index.json, the mtp.0
// block), written tensor by tensor so the model is never held in memory: a load-path test
// fixture of real size (the official 160 GB download cannot be fetched here). Values come from
// host ports of the seeded GPU fills (model/synth_host.h; bit-exact, tested against the GPU on
// small shapes), drawn in the order of the synthetic GPU runner (runtime/synthetic_weights.h), so
// each tensor holds that runner's values for the same seed, rounded to the checkpoint's dtype
// where the runner keeps a wider one (the norms: BF16 here, f32 there; its bf16_norms option
// rounds them alike); logits are finite at any depth, the text is meaningless.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/config.h"
#include "model/synth_host.h"

namespace dsv4 {

struct SyntheticCheckpointOptions {
    int n_layers = 4;  // num_hidden_layers (43 is the full Flash depth)
    uint64_t seed = 1;
    uint64_t shard_bytes = uint64_t(4) << 30;  // a new shard starts once one reaches this size
    bool mtp = true;                           // write the mtp.0 block
    int threads = 0;                           // generator threads (0: hardware concurrency)
    int parallel_shards = 0;                   // shard files written at once (0: one per thread, at most all)
    uint64_t chunk_bytes = uint64_t(8) << 20;  // bytes per work item (the output does not depend on it)
    bool progress = true;                      // a line per shard on stderr
};

// config.json of DeepSeek-V4-Flash (spec §1.1) with num_hidden_layers = n_layers (the per-layer
// lists cut to n_layers, plus the MTP entry of compress_ratios).
std::string flash_config_json(int n_layers);

// Writes `config_json` (which must parse to `cfg`), the shards and the index into `dir` (created
// if missing): the tensors of spec §4.1 for cfg's shapes and layer schedule, in Flash's dtypes.
// Errors: Internal (cannot create or write a file), InvalidArgument (cfg invalid, or K not a
// multiple of 32 where MXFP4 needs it).
Status write_synthetic_checkpoint(const std::string& dir, const ModelConfig& cfg, const std::string& config_json,
                                  const SyntheticCheckpointOptions& opt);

// write_synthetic_checkpoint of flash_config_json(opt.n_layers).
Status write_synthetic_flash_checkpoint(const std::string& dir, const SyntheticCheckpointOptions& opt);

}  // namespace dsv4
