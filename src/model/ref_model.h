// RefModel: the CPU reference forward pass of DeepSeek-V4 (spec §2, §3), f32 throughout, written
// for clarity. It defines the semantics the CUDA backend is tested against and is itself tested
// against transformers (tests/golden).
//
// One call processes a chunk of one sequence: tokens at positions start_pos.. with the sequence's
// decode-time state (spec §3.1) read from and written to a SeqStateView. Prefill, chunked prefill
// and decode are the same code path: projections are batched over the chunk, while the
// stateful parts (window ring, compressors, indexer, attention) advance one token at a time in
// position order, so any split of a sequence gives the same result as one pass.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/ref/ops.h"
#include "model/config.h"
#include "model/weights.h"
#include "model/kv_layout.h"

namespace dsv4 {

// A sequence's state: the contiguous state area (window rings, compressor states) and the
// compressed rows in its token pages.
struct SeqStateView {
    const KvLayout* layout = nullptr;
    float* state = nullptr;               // [layout->state_elems]
    float* pool = nullptr;                // page pool base [n_pages, page_elems]
    std::span<const int32_t> token_pages; // physical page ids of the token pages, in order

    float* comp_row(int layer, int64_t w) const;     // main compressed row [D]
    float* index_row(int layer, int64_t w) const;    // indexer row [ID] (CSA)
};

// Named intermediate outputs for tests and debugging ("L3.attn_out", ...): name, data, shape.
using DumpFn = std::function<void(const std::string& name, std::span<const float> data,
                                  std::vector<int64_t> shape)>;

// Routed-expert hook (expert parallelism, src/dist): called once per MoE layer with the chunk's
// routing; must add sum_k weights[t*K+k] * expert_{ids[t*K+k]}(x_t) to out[t] (the shared expert is
// added by the model afterwards). x: [T, d] MoE input (ffn_norm applied); ids: [T, K] global expert
// ids; weights: [T, K] routing weights (scale and normalisation applied); out: [T, d], zeroed.
using RoutedMoeFn = std::function<Status(int layer, const float* x, int64_t T, std::span<const int32_t> ids,
                                         std::span<const float> weights, float* out)>;

struct RefForwardOptions {
    bool all_logits = false;  // logits for every token of the chunk, not just the last
    bool want_logits = true;
    DumpFn dump;              // optional
    RoutedMoeFn routed_moe;   // optional: empty = every routed expert computed here
};

// Quantisation simulation of the DeepSeek reference (spec §2.12). Off = transformers' FP32
// semantics (the golden tests); on = the cached values the model was trained to expect.
struct RefNumerics {
    bool kv_fp8 = false;       // window K=V and main compressed rows: FP8 QDQ of the nope dims (block 64),
                               // RoPE dims rounded to BF16 (ref::kv_cache_qdq; = the FP8 584-byte row);
                               // indexer keys rounded to BF16 (the reference caches them as BF16)
    bool indexer_fp4 = false;  // indexer queries and keys: Hadamard rotation + FP4 QDQ (block 32)
};

class RefModel {
public:
    RefModel(ModelConfig cfg, ModelWeights weights, RefNumerics numerics = {});
    const RefNumerics& numerics() const { return num_; }

    const ModelConfig& config() const { return cfg_; }
    const ModelWeights& weights() const { return w_; }

    // One routed expert of one layer on one token (spec §2.9): y[d] += W2 (weight *
    // silu(min(W1 x, lim)) * clip(W3 x, -lim, lim)). x: [d]. The building block of the
    // expert-parallel path (src/dist), identical arithmetic to the local path.
    void routed_expert(int layer, int expert, const float* x, float weight, float* y) const;

    // Runs tokens[T] at positions start_pos..start_pos+T-1. start_pos == 0 resets the state.
    // logits: [T or 1, vocab] f32 (per options). Errors: token id outside [0, vocab).
    Status forward(const SeqStateView& st, std::span<const int32_t> tokens, int64_t start_pos,
                   const RefForwardOptions& opt, std::vector<float>& logits) const;

private:
    // x: attention input [T, d] (attn_norm applied); out: [T, d].
    void attention(int layer, const SeqStateView& st, const float* x, int64_t T, int64_t start_pos,
                   const RefForwardOptions& opt, float* out) const;
    // x: MoE input [T, d] (ffn_norm applied); out: [T, d]. Errors: those of opt.routed_moe.
    Status moe(int layer, const float* x, std::span<const int32_t> tokens, const RefForwardOptions& opt,
               float* out) const;
    void reset_state(const SeqStateView& st) const;

    ModelConfig cfg_;
    ModelWeights w_;
    RefNumerics num_;
    const ref::RopeTable& rope_for(int layer) const {
        return cfg_.compress_ratio(layer) == 0 ? rope_main_ : rope_compress_;
    }
    ref::RopeTable rope_main_;      // sliding-only layers: theta 10000, no YaRN
    ref::RopeTable rope_compress_;  // CSA/HCA layers: compress_rope_theta with YaRN
};

}  // namespace dsv4
