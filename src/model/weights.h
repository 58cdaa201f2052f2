// Weights of a DeepSeek-V4 model for the CPU reference, dequantised to f32 (spec §4).
// Names in comments are the official checkpoint names (spec §4.1); shapes use ModelConfig
// names: d = hidden_size, H = n_heads, D = head_dim, qr = q_lora_rank, G = o_groups,
// or = o_lora_rank, E = n_routed_experts, I = moe_intermediate_size, IH/ID = indexer heads/dim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace dsv4 {

class Checkpoint;

using F32Vec = std::vector<float>;

struct CompressorWeights {
    int ratio = 0;         // r
    int dim = 0;           // c: output width (D main, ID indexer)
    bool overlap = false;  // CSA (ratio-4) compressors pool overlapping windows; kappa = 2
    F32Vec wkv;            // compressor.wkv.weight   [kappa*c, d]
    F32Vec wgate;          // compressor.wgate.weight [kappa*c, d]
    F32Vec ape;            // compressor.ape          [r, kappa*c]
    F32Vec norm;           // compressor.norm.weight  [c]
    int kappa() const { return overlap ? 2 : 1; }
};

struct IndexerWeights {
    F32Vec wq_b;                   // indexer.wq_b.weight         [IH*ID, qr]
    F32Vec weights_proj;           // indexer.weights_proj.weight [IH, d]
    CompressorWeights compressor;  // indexer.compressor.*, dim ID
};

struct ExpertWeights {
    F32Vec w1;  // [I, d] gate
    F32Vec w3;  // [I, d] up
    F32Vec w2;  // [d, I] down
};

struct LayerWeights {
    F32Vec hc_attn_fn, hc_attn_base, hc_attn_scale;  // [(2+n)n, n*d], [(2+n)n], [3]
    F32Vec hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
    F32Vec attn_norm;  // [d]
    F32Vec ffn_norm;   // [d]
    F32Vec attn_sink;  // attn.attn_sink [H] (f32 in the checkpoint; bf16 widened: B07)
    F32Vec wq_a;       // [qr, d]
    F32Vec q_norm;     // [qr]
    F32Vec wq_b;       // [H*D, qr]
    F32Vec wkv;        // [D, d]
    F32Vec kv_norm;    // [D]
    F32Vec wo_a;       // [G*or, (H/G)*D]
    F32Vec wo_b;       // [d, G*or]
    bool has_compressor = false;
    CompressorWeights compressor;  // main compressor, dim D (CSA and HCA layers)
    bool has_indexer = false;
    IndexerWeights indexer;              // CSA layers
    F32Vec gate;                         // ffn.gate.weight [E, d]
    F32Vec gate_bias;                    // ffn.gate.bias [E] (learned routing)
    std::vector<int32_t> tid2eid;        // ffn.gate.tid2eid [vocab, k] (hash routing)
    ExpertWeights shared;                // ffn.shared_experts.*
    std::vector<ExpertWeights> experts;  // ffn.experts.E.* [E]
};

// The multi-token-prediction block mtp.M (spec §2.11): one decoder block with compress ratio 0
// (sliding window only) and learned routing, plus what feeds it and reads it out. It predicts
// token t+2 at position t from the embedding of token t+1 and the main model's final streams at t;
// the embedding and LM head are the main model's.
struct MtpWeights {
    LayerWeights block;                              // mtp.M.{hc_*, attn_norm, attn.*, ffn_norm, ffn.*}
    F32Vec e_proj;                                   // mtp.M.e_proj.weight [d, d]
    F32Vec h_proj;                                   // mtp.M.h_proj.weight [d, d]
    F32Vec enorm, hnorm, norm;                       // mtp.M.{enorm,hnorm,norm}.weight [d]
    F32Vec hc_head_fn, hc_head_base, hc_head_scale;  // mtp.M.hc_head_{fn,base,scale} [n, n*d], [n], [1]
};

struct ModelWeights {
    F32Vec embed;                                    // embed.weight [vocab, d]
    F32Vec head;                                     // head.weight  [vocab, d]
    F32Vec norm;                                     // norm.weight  [d]
    F32Vec hc_head_fn, hc_head_base, hc_head_scale;  // [n, n*d], [n], [1]
    std::vector<LayerWeights> layers;
    // cfg.num_nextn_predict_layers blocks when the checkpoint holds mtp.* tensors, else empty (the main
    // model runs without them); also empty when the config gives an MTP block a compress ratio other
    // than 0 (not implemented).
    std::vector<MtpWeights> mtp;

    // Loads every tensor of spec §4.1 from a checkpoint, dequantising FP8/MXFP4. Errors name the
    // tensor. Validates tid2eid entries (in range, distinct per row: B11). The MTP blocks are loaded
    // when the checkpoint has them; a checkpoint with some but not all of a block's tensors is an
    // error naming the missing one.
    static Result<ModelWeights> load(const ModelConfig& cfg, const Checkpoint& ckpt);
    // Seeded synthetic weights (Philox), for the built-in tiny model and tests; with
    // cfg.num_nextn_predict_layers MTP blocks, drawn after every main-model tensor (so the main
    // model's values do not depend on them).
    static ModelWeights random(const ModelConfig& cfg, uint64_t seed);
};

// The built-in default model: DeepSeek-V4 topology (sliding, CSA, HCA, hash routing, real
// window 128 and real RoPE/YaRN settings) at tiny width, with the real 129,280-token vocabulary.
ModelConfig tiny_model_config();

}  // namespace dsv4
