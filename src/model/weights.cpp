// Loading and synthesising ModelWeights (see weights.h).
#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"
#include "model/checkpoint.h"

namespace dsv4 {

namespace {

struct Loader {
    const Checkpoint& ckpt;
    Status status;
    F32Vec f32(const std::string& name, std::vector<int64_t> shape) {
        if (!status.is_ok()) return {};
        auto r = load_f32(ckpt, name, shape);
        if (!r) {
            status = r.status();
            return {};
        }
        return std::move(r).value();
    }
};

void load_compressor(Loader& ld, const std::string& pfx, CompressorWeights& c, int ratio, int dim, bool overlap,
                     int d) {
    c.ratio = ratio;
    c.dim = dim;
    c.overlap = overlap;
    const int64_t w = int64_t(c.kappa()) * dim;
    c.wkv = ld.f32(pfx + "wkv.weight", {w, d});
    c.wgate = ld.f32(pfx + "wgate.weight", {w, d});
    c.ape = ld.f32(pfx + "ape", {ratio, w});
    c.norm = ld.f32(pfx + "norm.weight", {dim});
}

}  // namespace

namespace {
// One decoder block with prefix p ("layers.L." or "mtp.M."), of compress ratio r, attention type and
// routing as given (spec §4.1). Errors: a missing or misshapen tensor (in ld.status), tid2eid entries.
Status load_block(Loader& ld, const ModelConfig& cfg, const std::string& p, int r, AttnType type, MoeRouting routing,
                  LayerWeights& L) {
    const Checkpoint& ckpt = ld.ckpt;
    const int64_t d = cfg.hidden_size, n = cfg.hc_mult, mix = cfg.hc_mix_dim();
    const int64_t H = cfg.n_heads, D = cfg.head_dim, qr = cfg.q_lora_rank, G = cfg.o_groups;
    const int64_t orank = cfg.o_lora_rank, E = cfg.n_routed_experts, I = cfg.moe_intermediate_size;
    const int64_t K = cfg.n_experts_per_tok;
    L.hc_attn_fn = ld.f32(p + "hc_attn_fn", {mix, n * d});
    L.hc_attn_base = ld.f32(p + "hc_attn_base", {mix});
    L.hc_attn_scale = ld.f32(p + "hc_attn_scale", {3});
    L.hc_ffn_fn = ld.f32(p + "hc_ffn_fn", {mix, n * d});
    L.hc_ffn_base = ld.f32(p + "hc_ffn_base", {mix});
    L.hc_ffn_scale = ld.f32(p + "hc_ffn_scale", {3});
    L.attn_norm = ld.f32(p + "attn_norm.weight", {d});
    L.ffn_norm = ld.f32(p + "ffn_norm.weight", {d});
    L.attn_sink = ld.f32(p + "attn.attn_sink", {H});
    L.wq_a = ld.f32(p + "attn.wq_a.weight", {qr, d});
    L.q_norm = ld.f32(p + "attn.q_norm.weight", {qr});
    L.wq_b = ld.f32(p + "attn.wq_b.weight", {H * D, qr});
    L.wkv = ld.f32(p + "attn.wkv.weight", {D, d});
    L.kv_norm = ld.f32(p + "attn.kv_norm.weight", {D});
    L.wo_a = ld.f32(p + "attn.wo_a.weight", {G * orank, (H / G) * D});
    L.wo_b = ld.f32(p + "attn.wo_b.weight", {d, G * orank});
    const bool csa = type == AttnType::kCSA;
    if (r > 0) {
        L.has_compressor = true;
        load_compressor(ld, p + "attn.compressor.", L.compressor, r, int(D), csa, int(d));
    }
    if (csa) {
        L.has_indexer = true;
        const int64_t IH = cfg.index_n_heads, ID = cfg.index_head_dim;
        L.indexer.wq_b = ld.f32(p + "attn.indexer.wq_b.weight", {IH * ID, qr});
        L.indexer.weights_proj = ld.f32(p + "attn.indexer.weights_proj.weight", {IH, d});
        load_compressor(ld, p + "attn.indexer.compressor.", L.indexer.compressor, r, int(ID), true, int(d));
    }
    L.gate = ld.f32(p + "ffn.gate.weight", {E, d});
    if (routing == MoeRouting::kHash) {
        if (!ld.status.is_ok()) return ld.status;
        auto t = load_i32(ckpt, p + "ffn.gate.tid2eid", std::vector<int64_t>{cfg.vocab_size, K});
        if (!t) return t.status();
        L.tid2eid = std::move(t).value();
        // Every entry must index a real expert and rows must not repeat experts (B11).
        for (int64_t v = 0; v < cfg.vocab_size; ++v) {
            const int32_t* row = &L.tid2eid[size_t(v) * K];
            for (int64_t k = 0; k < K; ++k) {
                if (row[k] < 0 || row[k] >= E)
                    return error(StatusCode::kDataLoss,
                                 "{}: {}ffn.gate.tid2eid[{}][{}] = {} is not an expert id in [0, {})", ckpt.path(), p,
                                 v, k, row[k], E);
                for (int64_t k2 = 0; k2 < k; ++k2)
                    if (row[k2] == row[k])
                        return error(StatusCode::kDataLoss, "{}: {}ffn.gate.tid2eid[{}] repeats expert {}", ckpt.path(),
                                     p, v, row[k]);
            }
        }
    } else {
        L.gate_bias = ld.f32(p + "ffn.gate.bias", {E});
    }
    L.shared.w1 = ld.f32(p + "ffn.shared_experts.w1.weight", {I, d});
    L.shared.w3 = ld.f32(p + "ffn.shared_experts.w3.weight", {I, d});
    L.shared.w2 = ld.f32(p + "ffn.shared_experts.w2.weight", {d, I});
    L.experts.resize(E);
    for (int64_t e = 0; e < E && ld.status.is_ok(); ++e) {
        const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
        L.experts[e].w1 = ld.f32(q + "w1.weight", {I, d});
        L.experts[e].w3 = ld.f32(q + "w3.weight", {I, d});
        L.experts[e].w2 = ld.f32(q + "w2.weight", {d, I});
    }
    return ld.status;
}
}  // namespace

Result<ModelWeights> ModelWeights::load(const ModelConfig& cfg, const Checkpoint& ckpt) {
    Loader ld{ckpt, Status::ok()};
    const int64_t d = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult;
    ModelWeights w;
    w.embed = ld.f32("embed.weight", {V, d});
    w.head = ckpt.has("head.weight") || !cfg.tie_word_embeddings ? ld.f32("head.weight", {V, d}) : w.embed;
    w.norm = ld.f32("norm.weight", {d});
    w.hc_head_fn = ld.f32("hc_head_fn", {n, n * d});
    w.hc_head_base = ld.f32("hc_head_base", {n});
    w.hc_head_scale = ld.f32("hc_head_scale", {1});
    w.layers.resize(cfg.n_layers);
    for (int l = 0; l < cfg.n_layers && ld.status.is_ok(); ++l)
        DSV4_RETURN_IF_ERROR(load_block(ld, cfg, "layers." + std::to_string(l) + ".", cfg.compress_ratio(l),
                                        cfg.layer_types[l], cfg.mlp_types[l], w.layers[l]));
    if (!ld.status.is_ok()) return ld.status;
    // MTP blocks (spec §2.11): optional as a whole, complete when present (any mtp.* tensor makes every
    // tensor of every block required). Blocks with compression are not implemented: left out.
    bool any_mtp = false, compressed_mtp = false;
    for (const std::string& name : ckpt.names()) any_mtp |= name.starts_with("mtp.");
    for (int r : cfg.mtp_compress_ratios) compressed_mtp |= r != 0;
    if (cfg.num_nextn_predict_layers > 0 && any_mtp && !compressed_mtp) {
        w.mtp.resize(size_t(cfg.num_nextn_predict_layers));
        for (int m = 0; m < cfg.num_nextn_predict_layers && ld.status.is_ok(); ++m) {
            MtpWeights& M = w.mtp[size_t(m)];
            const std::string p = "mtp." + std::to_string(m) + ".";
            DSV4_RETURN_IF_ERROR(load_block(ld, cfg, p, 0, AttnType::kSliding, MoeRouting::kLearned, M.block));
            M.e_proj = ld.f32(p + "e_proj.weight", {d, d});
            M.h_proj = ld.f32(p + "h_proj.weight", {d, d});
            M.enorm = ld.f32(p + "enorm.weight", {d});
            M.hnorm = ld.f32(p + "hnorm.weight", {d});
            M.norm = ld.f32(p + "norm.weight", {d});
            M.hc_head_fn = ld.f32(p + "hc_head_fn", {n, n * d});
            M.hc_head_base = ld.f32(p + "hc_head_base", {n});
            M.hc_head_scale = ld.f32(p + "hc_head_scale", {1});
        }
        if (!ld.status.is_ok()) return ld.status;
    }
    return w;
}

namespace {
// Seeded normal(mean, std) vector; each tensor gets its own Philox stream.
struct Synth {
    uint64_t seed;
    uint64_t stream = 0;
    F32Vec normal(size_t n, float std, float mean = 0.0f) {
        F32Vec v(n);
        const uint64_t s = stream++;
        for (size_t i = 0; i < n; ++i) v[i] = mean + std * philox_normal(seed, s, i);
        return v;
    }
};

CompressorWeights synth_compressor(Synth& S, int ratio, int dim, bool overlap, int d) {
    CompressorWeights c;
    c.ratio = ratio;
    c.dim = dim;
    c.overlap = overlap;
    const size_t w = size_t(c.kappa()) * dim;
    c.wkv = S.normal(w * d, 0.02f);
    c.wgate = S.normal(w * d, 0.02f);
    c.ape = S.normal(size_t(ratio) * w, 0.5f);
    c.norm = S.normal(size_t(dim), 0.1f, 1.0f);
    return c;
}
}  // namespace

namespace {
// One synthetic decoder block (see load_block); hash routing draws a tid2eid table.
void synth_block(Synth& S, const ModelConfig& cfg, int r, AttnType type, MoeRouting routing, LayerWeights& L) {
    const size_t d = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult, mix = cfg.hc_mix_dim();
    const size_t H = cfg.n_heads, D = cfg.head_dim, qr = cfg.q_lora_rank, G = cfg.o_groups;
    const size_t orank = cfg.o_lora_rank, E = cfg.n_routed_experts, I = cfg.moe_intermediate_size;
    const size_t K = cfg.n_experts_per_tok;
    L.hc_attn_fn = S.normal(mix * n * d, 0.02f);
    L.hc_attn_base = S.normal(mix, 0.5f);
    L.hc_attn_scale = S.normal(3, 0.1f, 1.0f);
    L.hc_ffn_fn = S.normal(mix * n * d, 0.02f);
    L.hc_ffn_base = S.normal(mix, 0.5f);
    L.hc_ffn_scale = S.normal(3, 0.1f, 1.0f);
    L.attn_norm = S.normal(d, 0.1f, 1.0f);
    L.ffn_norm = S.normal(d, 0.1f, 1.0f);
    L.attn_sink = S.normal(H, 0.5f);
    L.wq_a = S.normal(qr * d, 0.02f);
    L.q_norm = S.normal(qr, 0.1f, 1.0f);
    L.wq_b = S.normal(H * D * qr, 0.02f);
    L.wkv = S.normal(D * d, 0.02f);
    L.kv_norm = S.normal(D, 0.1f, 1.0f);
    L.wo_a = S.normal(G * orank * (H / G) * D, 0.02f);
    L.wo_b = S.normal(d * G * orank, 0.02f);
    const bool csa = type == AttnType::kCSA;
    if (r > 0) {
        L.has_compressor = true;
        L.compressor = synth_compressor(S, r, int(D), csa, int(d));
    }
    if (csa) {
        L.has_indexer = true;
        const size_t IH = cfg.index_n_heads, ID = cfg.index_head_dim;
        L.indexer.wq_b = S.normal(IH * ID * qr, 0.02f);
        L.indexer.weights_proj = S.normal(IH * d, 0.02f);
        L.indexer.compressor = synth_compressor(S, r, int(ID), true, int(d));
    }
    L.gate = S.normal(E * d, 0.02f);
    if (routing == MoeRouting::kHash) {
        // Each row: K distinct experts from a seeded shuffle.
        L.tid2eid.resize(V * K);
        std::vector<int32_t> perm(E);
        const uint64_t s = S.stream++;
        for (size_t v = 0; v < V; ++v) {
            std::iota(perm.begin(), perm.end(), 0);
            for (size_t k = 0; k < K; ++k) {
                const size_t j = k + size_t(philox_uniform(S.seed, s, v * K + k) * float(E - k - 1e-3f));
                std::swap(perm[k], perm[std::min(j, E - 1)]);
                L.tid2eid[v * K + k] = perm[k];
            }
        }
    } else {
        L.gate_bias = S.normal(E, 0.05f);
    }
    L.shared = {S.normal(I * d, 0.02f), S.normal(I * d, 0.02f), S.normal(d * I, 0.02f)};
    L.experts.resize(E);
    for (size_t e = 0; e < E; ++e)
        L.experts[e] = {S.normal(I * d, 0.02f), S.normal(I * d, 0.02f), S.normal(d * I, 0.02f)};
}
}  // namespace

ModelWeights ModelWeights::random(const ModelConfig& cfg, uint64_t seed) {
    Synth S{seed};
    const size_t d = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult;
    ModelWeights w;
    w.embed = S.normal(V * d, 1.0f);
    w.head = S.normal(V * d, 0.02f);
    w.norm = S.normal(d, 0.1f, 1.0f);
    w.hc_head_fn = S.normal(n * n * d, 0.02f);
    w.hc_head_base = S.normal(n, 0.5f);
    w.hc_head_scale = S.normal(1, 0.1f, 1.0f);
    w.layers.resize(cfg.n_layers);
    for (int l = 0; l < cfg.n_layers; ++l)
        synth_block(S, cfg, cfg.compress_ratio(l), cfg.layer_types[l], cfg.mlp_types[l], w.layers[l]);
    w.mtp.resize(size_t(std::max(cfg.num_nextn_predict_layers, 0)));
    for (MtpWeights& M : w.mtp) {
        synth_block(S, cfg, 0, AttnType::kSliding, MoeRouting::kLearned, M.block);
        M.e_proj = S.normal(d * d, 0.02f);
        M.h_proj = S.normal(d * d, 0.02f);
        M.enorm = S.normal(d, 0.1f, 1.0f);
        M.hnorm = S.normal(d, 0.1f, 1.0f);
        M.norm = S.normal(d, 0.1f, 1.0f);
        M.hc_head_fn = S.normal(n * n * d, 0.02f);
        M.hc_head_base = S.normal(n, 0.5f);
        M.hc_head_scale = S.normal(1, 0.1f, 1.0f);
    }
    return w;
}

ModelConfig tiny_model_config() {
    ModelConfig c;
    c.vocab_size = 129280;
    c.hidden_size = 128;
    c.n_layers = 5;
    c.n_heads = 8;
    c.head_dim = 64;
    c.rope_dim = 16;
    c.q_lora_rank = 64;
    c.o_lora_rank = 32;
    c.o_groups = 4;
    c.sliding_window = 128;
    c.compress_ratios = {0, 4, 128, 4, 0};
    c.layer_types = {AttnType::kSliding, AttnType::kCSA, AttnType::kHCA, AttnType::kCSA, AttnType::kSliding};
    c.mlp_types = {MoeRouting::kHash, MoeRouting::kLearned, MoeRouting::kLearned, MoeRouting::kLearned,
                   MoeRouting::kLearned};
    c.rope_theta = 10000.0;
    c.compress_rope_theta = 160000.0;
    c.yarn = YarnParams{true, 16.0, 65536.0, 32.0, 1.0};
    c.max_position_embeddings = 1048576;
    c.index_n_heads = 8;
    c.index_head_dim = 32;
    c.index_topk = 16;
    c.n_routed_experts = 16;
    c.n_experts_per_tok = 2;
    c.moe_intermediate_size = 64;
    c.routed_scaling_factor = 1.5;
    c.swiglu_limit = 10.0;
    c.expert_format = ExpertFormat::kBf16;
    c.num_nextn_predict_layers = 1;  // one MTP block, as the official checkpoints have
    return c;
}

}  // namespace dsv4
