// Synthetic seeded weights of a DeepSeek-V4 model generated directly on the GPU in the checkpoint's
// own formats (the Flash proxy of ../shared/docs/perf-method.md): no host weights, no checkpoint.
// Formats (spec §4.1, §4.2): FP8 e4m3 block-128 + UE8M0 scales for the attention projections,
// shared expert and indexer wq_b; MXFP4 + UE8M0 1x32 scales for the routed experts; BF16 for the
// embedding, LM head, router, compressors and indexer weights_proj; f32 vectors (norms, mHC,
// sinks, ape, router bias) and int32 tid2eid, as the CUDA runner holds them. Magnitudes are set so
// that every projection maps unit-RMS inputs to about unit-RMS outputs (finite logits at any depth).
// Routing: router weights random and bias zero, so tokens spread over experts about uniformly;
// `skewed` adds a large bias to experts [0, hot_experts) so that learned layers pick only among
// them (and hash layers' tid2eid draws from them too). CUDA builds only.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/config.h"
#include "model/flash_proxy.h"
#include "runtime/cuda_weights.h"

namespace dsv4 {

struct SyntheticWeightsOptions {
    uint64_t seed = 1;
    bool skewed = false;
    int hot_experts = 32;    // experts favoured by `skewed`
    float hot_bias = 16.0f;  // router bias of hot experts (scores are sqrt(softplus) ~ 0..3)
    // Expert parallelism: generate only routed experts [expert_first, expert_first + expert_count)
    // (expert_count 0: all), each with the bytes it has in the all-expert generation, so a rank's
    // experts equal the same experts of a one-GPU runner with the same seed. Everything else is
    // generated in full (replicated on every rank).
    int expert_first = 0, expert_count = 0;
    // The values a checkpoint written by `dsv4 make-checkpoint` (model/synthetic_checkpoint.h) with
    // the same seed holds, once loaded: the RMSNorm weights (norm, attn_norm, ffn_norm, q_norm,
    // kv_norm, the compressors' norms; BF16 in the official checkpoint, f32 here) rounded to bf16
    // values. Every other tensor is generated in its checkpoint dtype already. Unskewed only.
    bool bf16_norms = false;
    // MTP blocks (spec §2.11: a ratio-0 block with learned routing, FP8 e_proj / h_proj) generated after
    // every other tensor (DevWeights::mtp), for the draft step of speculative decoding; not in `bytes`.
    int mtp_blocks = 0;
    // Experts a token can be routed to: n_routed_experts, or hot_experts when skewed.
    int routable(const ModelConfig& cfg) const { return skewed ? hot_experts : cfg.n_routed_experts; }
};

// Generates and allocates every tensor of `cfg` in `arena`. The order of the seed streams (one per
// fill) is a contract with the checkpoint writer, which draws them in the same order. `bytes` (optional) receives the
// bytes allocated per category (equal to proxy_weight_bytes(cfg) by construction; tested).
Result<DevWeights> make_synthetic_weights(const ModelConfig& cfg, const SyntheticWeightsOptions& opt,
                                          DeviceArena& arena, ProxyWeightBytes* bytes = nullptr);

}  // namespace dsv4
