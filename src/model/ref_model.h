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
    float* state = nullptr;                // [layout->state_elems]
    float* pool = nullptr;                 // page pool base [n_pages, page_elems]
    std::span<const int32_t> token_pages;  // physical page ids of the token pages, in order

    float* comp_row(int layer, int64_t w) const;   // main compressed row [D]
    float* index_row(int layer, int64_t w) const;  // indexer row [ID] (CSA)
};

// Named intermediate outputs for tests and debugging ("L3.attn_out", ...): name, data, shape.
using DumpFn = std::function<void(const std::string& name, std::span<const float> data, std::vector<int64_t> shape)>;

// Routed-expert hook (expert parallelism, src/dist): called once per MoE layer with the chunk's
// routing; must add sum_k weights[t*K+k] * expert_{ids[t*K+k]}(x_t) to out[t] (the shared expert is
// added by the model afterwards). x: [T, d] MoE input (ffn_norm applied); ids: [T, K] global expert
// ids; weights: [T, K] routing weights (scale and normalisation applied); out: [T, d], zeroed.
using RoutedMoeFn = std::function<Status(int layer, const float* x, int64_t T, std::span<const int32_t> ids,
                                         std::span<const float> weights, float* out)>;

struct RefForwardOptions {
    bool all_logits = false;  // logits for every token of the chunk, not just the last
    bool want_logits = true;
    DumpFn dump;             // optional
    RoutedMoeFn routed_moe;  // optional: empty = every routed expert computed here (decoder blocks only)
    // Optional: the residual streams [T, n, d] after the last block, before the head's collapse
    // (spec §2.10), for every token of the chunk: the MTP block's hidden input (spec §2.11).
    std::vector<float>* streams_out = nullptr;
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

    // One routed expert of one block (0..n_layers-1 the decoder, n_layers + m MTP block m) on one
    // token (spec §2.9): y[d] += W2 (weight *
    // silu(min(W1 x, lim)) * clip(W3 x, -lim, lim)). x: [d]. The building block of the
    // expert-parallel path (src/dist), identical arithmetic to the local path.
    void routed_expert(int layer, int expert, const float* x, float weight, float* y) const;

    // Runs tokens[T] at positions start_pos..start_pos+T-1. start_pos == 0 resets the state.
    // logits: [T or 1, vocab] f32 (per options). Errors: token id outside [0, vocab).
    Status forward(const SeqStateView& st, std::span<const int32_t> tokens, int64_t start_pos,
                   const RefForwardOptions& opt, std::vector<float>& logits) const;

    // MTP block m (spec §2.11) over positions start_pos..start_pos+T-1 of a sequence. For position p
    // it reads the streams at p (streams [T, n, d]: forward's opt.streams_out for the main model, or
    // this function's own opt.streams_out for a further, recursive draft) and the token at p+1
    // (next_tokens [T]); it writes its own window ring (the state view's layout must hold MTP state,
    // KvLayout::make(..., mtp_blocks)) and returns logits [T or 1, vocab] for the token at p+2 (per
    // opt.all_logits / want_logits), through the block's own hc_head and norm and the shared head.
    // Like forward, any split of the positions gives the same result, provided each position's ring
    // predecessors were written by an earlier call. The main model's forward at start_pos 0 clears the
    // ring. Errors: no such MTP block, a layout without its state, token ids outside the vocabulary,
    // an empty chunk, a streams size other than T * n * d.
    Status mtp_forward(int m, const SeqStateView& st, std::span<const float> streams,
                       std::span<const int32_t> next_tokens, int64_t start_pos, const RefForwardOptions& opt,
                       std::vector<float>& logits) const;
    int mtp_blocks() const { return int(w_.mtp.size()); }

private:
    // Blocks are numbered 0..n_layers-1 for the decoder, n_layers + m for MTP block m.
    const LayerWeights& block_weights(int l) const {
        return l < cfg_.n_layers ? w_.layers[size_t(l)] : w_.mtp[size_t(l - cfg_.n_layers)].block;
    }
    int block_ratio(int l) const { return l < cfg_.n_layers ? cfg_.compress_ratio(l) : 0; }
    AttnType block_type(int l) const { return l < cfg_.n_layers ? cfg_.layer_types[size_t(l)] : AttnType::kSliding; }
    MoeRouting block_routing(int l) const {
        return l < cfg_.n_layers ? cfg_.mlp_types[size_t(l)] : MoeRouting::kLearned;
    }
    std::string block_name(int l) const {  // dump prefix: "L3." or "mtp0."
        return l < cfg_.n_layers ? "L" + std::to_string(l) + "." : "mtp" + std::to_string(l - cfg_.n_layers) + ".";
    }
    // One block on the streams X [T, n, d] in place: mHC collapse, norm, attention, expand, then the
    // same for the MoE (spec §2.3). tokens [T]: for hash routing.
    Status block(int l, const SeqStateView& st, std::vector<float>& X, std::span<const int32_t> tokens,
                 int64_t start_pos, const RefForwardOptions& opt) const;
    // Head of the streams X [T, n, d] (spec §2.10) with the given hc_head and norm: logits per opt.
    void head_logits(const std::vector<float>& X, int64_t T, const F32Vec& hc_fn, const F32Vec& hc_base,
                     const F32Vec& hc_scale, const F32Vec& norm, const RefForwardOptions& opt, const char* dump_name,
                     std::vector<float>& logits) const;
    Status check_tokens(std::span<const int32_t> tokens, int64_t start_pos) const;

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
    const ref::RopeTable& rope_for(int layer) const { return block_ratio(layer) == 0 ? rope_main_ : rope_compress_; }
    ref::RopeTable rope_main_;      // sliding-only layers: theta 10000, no YaRN
    ref::RopeTable rope_compress_;  // CSA/HCA layers: compress_rope_theta with YaRN
};

}  // namespace dsv4
