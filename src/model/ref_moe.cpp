// MoE of one layer in the CPU reference (spec §2.9): sqrt(softplus) router scores, top-k with
// selection bias (or hash routing through tid2eid), normalised and scaled weights, SwiGLU
// experts with the clamp, plus the always-on shared expert.
#include <cmath>
#include <vector>

#include "model/ref_model.h"

namespace dsv4 {

namespace {
// y[d] += weight * W2 (silu(min(W1 x, lim)) * clip(W3 x, -lim, lim)).
void swiglu_expert(const ExpertWeights& e, const float* x, int d, int I, float limit, float weight, float* y,
                   std::vector<float>& a, std::vector<float>& b) {
    a.assign(size_t(I), 0.0f);
    b.assign(size_t(I), 0.0f);
    ref::linear(x, e.w1.data(), a.data(), 1, I, d);
    ref::linear(x, e.w3.data(), b.data(), 1, I, d);
    for (int i = 0; i < I; ++i) {
        float g = a[i], u = b[i];
        if (limit > 0) {
            g = std::min(g, limit);
            u = std::clamp(u, -limit, limit);
        }
        a[i] = ref::silu(g) * u * weight;
    }
    ref::linear(a.data(), e.w2.data(), y, 1, d, I, /*accumulate=*/true);
}
}  // namespace

void RefModel::routed_expert(int layer, int expert, const float* x, float weight, float* y) const {
    std::vector<float> a, b;
    swiglu_expert(block_weights(layer).experts[expert], x, cfg_.hidden_size, cfg_.moe_intermediate_size,
                  float(cfg_.swiglu_limit), weight, y, a, b);
}

Status RefModel::moe(int l, const float* x, std::span<const int32_t> tokens, const RefForwardOptions& opt,
                     float* out) const {
    const LayerWeights& L = block_weights(l);
    const int d = cfg_.hidden_size, E = cfg_.n_routed_experts, K = cfg_.n_experts_per_tok;
    const int I = cfg_.moe_intermediate_size;
    const float limit = float(cfg_.swiglu_limit);
    const int64_t T = int64_t(tokens.size());
    std::vector<float> logits(size_t(T) * E);
    ref::linear(x, L.gate.data(), logits.data(), T, E, d);
    // Routing of the whole chunk first: ids [T, K] and weights [T, K].
    std::vector<int32_t> ids(size_t(T) * K);
    std::vector<float> weights(size_t(T) * K);
    std::vector<float> sel_scores(static_cast<size_t>(E));
    for (int64_t t = 0; t < T; ++t) {
        std::vector<float> s(static_cast<size_t>(E));
        for (int e = 0; e < E; ++e) s[e] = std::sqrt(ref::softplus(logits[size_t(t) * E + e]));
        std::vector<int32_t> chosen;
        if (block_routing(l) == MoeRouting::kHash) {
            chosen.assign(&L.tid2eid[size_t(tokens[t]) * K], &L.tid2eid[size_t(tokens[t]) * K] + K);
        } else {
            for (int e = 0; e < E; ++e) sel_scores[e] = s[e] + L.gate_bias[e];
            chosen = ref::topk_indices(sel_scores, K);
        }
        double sum = 0.0;
        for (int32_t e : chosen) sum += std::isfinite(s[e]) ? s[e] : 0.0f;
        for (int k = 0; k < K; ++k) {
            const int32_t e = chosen[k];
            float wgt = float(cfg_.routed_scaling_factor);
            if (cfg_.norm_topk_prob)
                wgt *= float(s[e] / (sum + 1e-20));
            else
                wgt *= s[e];
            if (!std::isfinite(wgt)) wgt = 0.0f;  // NaN router logits must not poison the output (B12)
            ids[size_t(t) * K + k] = e;
            weights[size_t(t) * K + k] = wgt;
        }
    }
    std::fill(out, out + size_t(T) * d, 0.0f);
    std::vector<float> a, b;
    // The expert-parallel hook partitions the decoder blocks' experts (src/dist); an MTP block's experts
    // are computed here, on every rank alike, until the multi-GPU runner holds them.
    if (opt.routed_moe && l < cfg_.n_layers) {
        DSV4_RETURN_IF_ERROR(opt.routed_moe(l, x, T, ids, weights, out));
    } else {
        for (int64_t t = 0; t < T; ++t)
            for (int k = 0; k < K; ++k)
                swiglu_expert(L.experts[ids[size_t(t) * K + k]], x + size_t(t) * d, d, I, limit,
                              weights[size_t(t) * K + k], out + size_t(t) * d, a, b);
    }
    for (int64_t t = 0; t < T; ++t)
        swiglu_expert(L.shared, x + size_t(t) * d, d, I, limit, 1.0f, out + size_t(t) * d, a, b);
    return Status::ok();
}

}  // namespace dsv4
