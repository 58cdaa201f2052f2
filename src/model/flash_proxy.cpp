// The Flash proxy config and its bytes-moved model (see flash_proxy.h).
#include "model/flash_proxy.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace dsv4 {

std::vector<AttnType> default_proxy_layer_types(int n_layers) {
    std::vector<AttnType> t;
    for (int l = 0; l < n_layers; ++l) {
        if (l < 2)
            t.push_back(AttnType::kSliding);
        else
            t.push_back((l - 2) % 2 == 0 ? AttnType::kCSA : AttnType::kHCA);
    }
    return t;
}

Result<std::vector<AttnType>> parse_layer_types(std::string_view list) {
    std::vector<AttnType> out;
    size_t pos = 0;
    while (pos <= list.size()) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        std::string item(list.substr(pos, comma - pos));
        for (char& c : item) c = char(std::tolower(static_cast<unsigned char>(c)));
        if (item == "sliding" || item == "swa" || item == "s")
            out.push_back(AttnType::kSliding);
        else if (item == "csa" || item == "c")
            out.push_back(AttnType::kCSA);
        else if (item == "hca" || item == "h")
            out.push_back(AttnType::kHCA);
        else
            return invalid_argument("layer type '{}' (item {}): expected sliding, csa or hca", item, out.size());
        pos = comma + 1;
    }
    return out;
}

Result<ModelConfig> flash_proxy_config(const FlashProxySpec& spec) {
    if (spec.n_layers <= 0) return invalid_argument("proxy: {} layers (must be positive)", spec.n_layers);
    if (spec.hash_layers < 0) return invalid_argument("proxy: {} hash layers (must be >= 0)", spec.hash_layers);
    std::vector<AttnType> types =
        spec.layer_types.empty() ? default_proxy_layer_types(spec.n_layers) : spec.layer_types;
    if (int(types.size()) != spec.n_layers)
        return invalid_argument("proxy: {} layer types for {} layers", types.size(), spec.n_layers);
    ModelConfig c;  // spec §1.1 Flash values
    c.vocab_size = 129280;
    c.hidden_size = 4096;
    c.n_layers = spec.n_layers;
    c.n_heads = 64;
    c.n_kv_heads = 1;
    c.head_dim = 512;
    c.rope_dim = 64;
    c.q_lora_rank = 1024;
    c.o_lora_rank = 1024;
    c.o_groups = 8;
    c.sliding_window = 128;
    c.layer_types = types;
    for (AttnType t : types) c.compress_ratios.push_back(t == AttnType::kCSA ? 4 : t == AttnType::kHCA ? 128 : 0);
    for (int l = 0; l < spec.n_layers; ++l)
        c.mlp_types.push_back(l < spec.hash_layers ? MoeRouting::kHash : MoeRouting::kLearned);
    c.rope_theta = 10000.0;
    c.compress_rope_theta = 160000.0;
    c.yarn = YarnParams{true, 16.0, 65536.0, 32.0, 1.0};
    c.max_position_embeddings = 1048576;
    c.index_n_heads = 64;
    c.index_head_dim = 128;
    c.index_topk = 512;
    c.hc_mult = 4;
    c.hc_sinkhorn_iters = 20;
    c.hc_eps = 1e-6;
    c.n_routed_experts = 256;
    c.n_shared_experts = 1;
    c.n_experts_per_tok = 6;
    c.moe_intermediate_size = 2048;
    c.routed_scaling_factor = 1.5;
    c.norm_topk_prob = true;
    c.swiglu_limit = 10.0;
    c.rms_norm_eps = 1e-6;
    c.num_nextn_predict_layers = 0;  // the proxy has no MTP block
    c.bos_token_id = 0;
    c.eos_token_id = 1;
    c.expert_format = ExpertFormat::kFp4;
    c.tie_word_embeddings = false;
    DSV4_RETURN_IF_ERROR(c.validate());
    return c;
}

int64_t fp8_block_bytes(int64_t N, int64_t K) { return N * K + ((N + 127) / 128) * ((K + 127) / 128); }
int64_t mxfp4_bytes(int64_t N, int64_t K) { return N * (K / 2) + N * ((K + 31) / 32); }

ProxyWeightBytes proxy_weight_bytes(const ModelConfig& c) {
    ProxyWeightBytes w;
    const int64_t d = c.hidden_size, V = c.vocab_size, H = c.n_heads, D = c.head_dim, qr = c.q_lora_rank;
    const int64_t G = c.o_groups, orank = c.o_lora_rank, E = c.n_routed_experts, I = c.moe_intermediate_size;
    const int64_t n = c.hc_mult, mix = c.hc_mix_dim(), IH = c.index_n_heads, ID = c.index_head_dim;
    auto fp8 = [&](int64_t N, int64_t K) {
        w.streamed += fp8_block_bytes(N, K);
        w.streamed_params += N * K;
    };
    auto bf16 = [&](int64_t N, int64_t K) {
        w.streamed += bf16_bytes(N, K);
        w.streamed_params += N * K;
    };
    auto f32 = [&](int64_t count) { w.streamed += 4 * count; };
    w.embed = bf16_bytes(V, d);
    bf16(V, d);              // LM head
    f32(d);                  // final norm
    f32(n * n * d + n + 1);  // hc_head fn, base, scale
    f32(c.rope_dim);         // two RoPE tables of rope_dim/2
    w.expert_params_one = 3 * I * d;
    for (int l = 0; l < c.n_layers; ++l) {
        f32(2 * (mix * n * d + mix + 3));  // hc_attn, hc_ffn
        f32(2 * d + H + qr + D);           // attn_norm, ffn_norm, sink, q_norm, kv_norm
        fp8(qr, d);                        // wq_a
        fp8(H * D, qr);                    // wq_b
        fp8(D, d);                         // wkv
        fp8(G * orank, (H / G) * D);       // wo_a
        fp8(d, G * orank);                 // wo_b
        const int r = c.compress_ratio(l);
        if (r > 0) {
            const int64_t kappa = c.layer_types[l] == AttnType::kCSA ? 2 : 1;
            bf16(kappa * D, d);  // compressor wkv
            bf16(kappa * D, d);  // compressor wgate
            f32(r * kappa * D + D);
        }
        if (c.layer_types[l] == AttnType::kCSA) {
            bf16(2 * ID, d);  // indexer compressor wkv, wgate
            bf16(2 * ID, d);
            f32(r * 2 * ID + ID);
            fp8(IH * ID, qr);  // indexer wq_b
            bf16(IH, d);       // weights_proj
        }
        bf16(E, d);  // router
        if (c.mlp_types[l] == MoeRouting::kHash)
            w.tables += 4 * V * c.n_experts_per_tok;
        else
            f32(E);  // router bias
        fp8(I, d);   // shared w1, w3, w2
        fp8(I, d);
        fp8(d, I);
        w.experts += E * (2 * mxfp4_bytes(I, d) + mxfp4_bytes(d, I));
    }
    return w;
}

Result<KvRowBytes> kv_row_bytes(const ModelConfig& c, std::string_view format) {
    const int64_t D = c.head_dim, ID = std::max(c.index_head_dim, 1);
    if (format == "f32") return KvRowBytes{"f32", 4 * D, 4 * D, 4 * ID};
    if (format == "bf16") return KvRowBytes{"bf16", 2 * D, 2 * D, 2 * ID};  // ring rows packed bf16 too
    if (format == "fp8") {
        // 584 = (D - rope) e4m3 + rope bf16 + one UE8M0 scale per 64 nope dims + pad (spec §3.2).
        const int64_t nope = D - c.rope_dim;
        const int64_t main = nope + 2 * c.rope_dim + (nope + 63) / 64 + 1;
        // Indexer rows at perf-method.md's 132 B (128 e4m3 + f32 scale): the roofline's model. dsv4
        // stores them as bf16 (2 x ID bytes, the reference's cache), so it moves more than this.
        return KvRowBytes{"fp8", main, main, ID + 4};
    }
    return invalid_argument("KV row format '{}' (expected f32, bf16 or fp8)", format);
}

double expert_fraction(int B, int E, int k, int hot) {
    if (B <= 0 || E <= 0) return 0.0;
    hot = std::clamp(hot, std::max(k, 1), E);
    return double(hot) / E * (1.0 - std::pow(1.0 - double(k) / hot, double(B)));
}

StepBytesModel step_bytes_model(const ModelConfig& c, const ProxyWeightBytes& w, const KvRowBytes& rows, int B,
                                int64_t L, int hot_experts) {
    StepBytesModel m;
    const int64_t d = c.hidden_size, k = c.n_experts_per_tok;
    int hash = 0;
    for (auto t : c.mlp_types) hash += t == MoeRouting::kHash;
    m.dense = double(w.streamed) + double(B) * (2.0 * d + double(hash) * 4.0 * k);
    m.expert_frac = expert_fraction(B, c.n_routed_experts, int(k), hot_experts);
    m.experts = double(w.experts) * m.expert_frac;
    double kv = 0, attn_flops = 0;
    const double H = c.n_heads, D = c.head_dim, IH = c.index_n_heads, ID = c.index_head_dim;
    for (int l = 0; l < c.n_layers; ++l) {
        const double ring = double(std::min<int64_t>(L + 1, c.sliding_window));
        double main_rows = 0, idx_rows = 0;
        const int r = c.compress_ratio(l);
        if (c.layer_types[l] == AttnType::kCSA) {
            const double n = double((L + 1) / r);
            main_rows = std::min<double>(c.index_topk, n);
            idx_rows = n;
        } else if (c.layer_types[l] == AttnType::kHCA) {
            main_rows = double((L + 1) / r);
        }
        kv += ring * rows.ring_row + main_rows * rows.main_row + idx_rows * rows.index_row;
        attn_flops += 4.0 * H * D * (ring + main_rows) + 2.0 * IH * ID * idx_rows;
    }
    m.kv_per_seq = kv;
    m.kv = double(B) * kv;
    m.flops = 2.0 * B * (double(w.streamed_params) + double(c.n_layers) * k * double(w.expert_params_one)) +
              double(B) * attn_flops;
    return m;
}

std::string describe_bytes_model(const ModelConfig& c, const ProxyWeightBytes& w, const KvRowBytes& rows,
                                 int hot_experts) {
    const StepBytesModel one = step_bytes_model(c, w, rows, 1, 0, hot_experts);
    std::string s = fmt::format(
        "bytes model per decode step (perf-method.md), {} layers:\n"
        "  dense streamed weights  {:.3f} GB (attention FP8, shared FP8, routers/compressors/indexer/LM head BF16, "
        "mHC/norms f32) + B x {} B (embedding + tid2eid rows)\n"
        "  routed experts          {:.3f} GB (MXFP4) x f(B), f(B) = ({}/{}) x (1 - (1 - {}/{})^B)\n"
        "  KV per sequence         ring min(L+1,{}) x {} B; CSA min({}, (L+1)/4) x {} B + (L+1)/4 x {} B (indexer); "
        "HCA (L+1)/128 x {} B  [rows: {}]\n",
        c.n_layers, double(w.streamed) / 1e9, int64_t(one.dense - double(w.streamed)), double(w.experts) / 1e9,
        std::clamp(hot_experts, c.n_experts_per_tok, c.n_routed_experts), c.n_routed_experts, c.n_experts_per_tok,
        std::clamp(hot_experts, c.n_experts_per_tok, c.n_routed_experts), c.sliding_window, rows.ring_row, c.index_topk,
        rows.main_row, rows.index_row, rows.main_row, rows.name);
    return s;
}

}  // namespace dsv4
