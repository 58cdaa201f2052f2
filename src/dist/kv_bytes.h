// KV/state bytes of one sequence (spec §3.1, §3.2) for a row format, for the per-rank memory
// plan. Grows per token: CSA layers add one main row and one indexer row every 4 tokens, HCA
// layers one main row every 128. Fixed per sequence: every layer's 128-row window ring and the
// FP32 compressor states (CSA: main kappa*c x 2r x {kv, gate}, indexer likewise; HCA: c x r x 2).
// The MTP block is not counted (the engine does not run it).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/config.h"

namespace dsv4::dist {

enum class KvRowFormat {
    kF32,   // what the CPU reference and the CUDA runner's default keep: 4 B per element
    kBf16,  // DSV4_KV_ROWS=bf16: 2 B per element
    kFp8,   // the reference FP8 layout: main row 448 e4m3 + 64 bf16 + 7 scales + pad = 584 B for D=512,
            // indexer row e4m3 + one f32 scale (132 B for 128 dims)
};

const char* kv_row_format_name(KvRowFormat f);
Result<KvRowFormat> parse_kv_row_format(const std::string& s);

struct KvBytes {
    int64_t main_row = 0;          // bytes of one compressed/window K=V row (D elements)
    int64_t index_row = 0;         // bytes of one indexer row (index_head_dim elements)
    double per_token = 0;          // average growth per token over all layers
    int64_t window = 0;            // n_layers x sliding_window rows
    int64_t compressor_state = 0;  // FP32 compressor states (CSA main + indexer, HCA)
    int64_t fixed() const { return window + compressor_state; }
    // Bytes of one sequence holding `tokens` tokens (compressed rows of closed windows only).
    int64_t for_tokens(const ModelConfig& cfg, int64_t tokens) const;
};

KvBytes kv_bytes(const ModelConfig& cfg, KvRowFormat f);

}  // namespace dsv4::dist
