#include "dist/weight_inventory.h"

#include <fmt/format.h>

namespace dsv4::dist {

int64_t storage_bytes(Storage s, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    switch (s) {
        case Storage::kBf16:
            return 2 * n;
        case Storage::kF32:
            return 4 * n;
        case Storage::kI64:
            return 8 * n;
        case Storage::kFp8Block:
            return n + ((rows + 127) / 128) * ((cols + 127) / 128);
        case Storage::kMxfp4:
            return n / 2 + rows * ((cols + 31) / 32);
    }
    return 0;
}

namespace {

struct Builder {
    std::vector<TensorSpec>& out;
    void add(std::string name, int64_t rows, int64_t cols, Storage s, Placement p = Placement::kReplicated,
             int expert = -1) {
        out.push_back(TensorSpec{std::move(name), rows, cols, s, p, expert});
    }
};

Storage expert_storage(ExpertFormat f) {
    switch (f) {
        case ExpertFormat::kFp4:
            return Storage::kMxfp4;
        case ExpertFormat::kFp8:
            return Storage::kFp8Block;
        case ExpertFormat::kBf16:
            return Storage::kBf16;
    }
    return Storage::kBf16;
}

// One decoder block (spec §4.1) with prefix "layers.L." or "mtp.0."; ratio 0/4/128; hash routing
// adds tid2eid instead of the selection bias.
void add_block(Builder& b, const ModelConfig& c, const std::string& p, int ratio, bool hash, Storage dense) {
    const int64_t d = c.hidden_size, H = c.n_heads, D = c.head_dim, qr = c.q_lora_rank;
    const int64_t G = c.o_groups, orank = c.o_lora_rank, E = c.n_routed_experts, I = c.moe_intermediate_size;
    const int64_t mix = c.hc_mix_dim(), hcd = c.hc_dim();
    for (const char* site : {"attn", "ffn"}) {
        b.add(p + "hc_" + site + "_fn", mix, hcd, Storage::kF32);
        b.add(p + "hc_" + site + "_base", mix, 1, Storage::kF32);
        b.add(p + "hc_" + site + "_scale", 3, 1, Storage::kF32);
    }
    b.add(p + "attn_norm.weight", d, 1, Storage::kBf16);
    b.add(p + "ffn_norm.weight", d, 1, Storage::kBf16);
    b.add(p + "attn.attn_sink", H, 1, Storage::kF32, Placement::kHeadRows);
    b.add(p + "attn.wq_a.weight", qr, d, dense);
    b.add(p + "attn.q_norm.weight", qr, 1, Storage::kBf16);
    b.add(p + "attn.wq_b.weight", H * D, qr, dense, Placement::kHeadRows);
    b.add(p + "attn.wkv.weight", D, d, dense);
    b.add(p + "attn.kv_norm.weight", D, 1, Storage::kBf16);
    b.add(p + "attn.wo_a.weight", G * orank, (H / G) * D, dense, Placement::kHeadRows);
    b.add(p + "attn.wo_b.weight", d, G * orank, dense, Placement::kHeadCols);
    if (ratio != 0) {
        const bool csa = ratio == 4;
        const int64_t kappa = csa ? 2 : 1;
        b.add(p + "attn.compressor.wkv.weight", kappa * D, d, Storage::kBf16);
        b.add(p + "attn.compressor.wgate.weight", kappa * D, d, Storage::kBf16);
        b.add(p + "attn.compressor.ape", ratio, kappa * D, Storage::kF32);
        b.add(p + "attn.compressor.norm.weight", D, 1, Storage::kBf16);
        if (csa) {
            const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
            b.add(p + "attn.indexer.wq_b.weight", IH * ID, qr, dense);
            b.add(p + "attn.indexer.weights_proj.weight", IH, d, Storage::kBf16);
            b.add(p + "attn.indexer.compressor.wkv.weight", 2 * ID, d, Storage::kBf16);
            b.add(p + "attn.indexer.compressor.wgate.weight", 2 * ID, d, Storage::kBf16);
            b.add(p + "attn.indexer.compressor.ape", ratio, 2 * ID, Storage::kF32);
            b.add(p + "attn.indexer.compressor.norm.weight", ID, 1, Storage::kBf16);
        }
    }
    b.add(p + "ffn.gate.weight", E, d, Storage::kBf16);
    if (hash)
        b.add(p + "ffn.gate.tid2eid", c.vocab_size, c.n_experts_per_tok, Storage::kI64);
    else
        b.add(p + "ffn.gate.bias", E, 1, Storage::kF32);
    b.add(p + "ffn.shared_experts.w1.weight", I, d, dense);
    b.add(p + "ffn.shared_experts.w3.weight", I, d, dense);
    b.add(p + "ffn.shared_experts.w2.weight", d, I, dense);
    const Storage es = expert_storage(c.expert_format);
    for (int e = 0; e < E; ++e) {
        const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
        b.add(q + "w1.weight", I, d, es, Placement::kExpert, e);
        b.add(q + "w3.weight", I, d, es, Placement::kExpert, e);
        b.add(q + "w2.weight", d, I, es, Placement::kExpert, e);
    }
}

}  // namespace

std::vector<TensorSpec> weight_inventory(const ModelConfig& c, const InventoryOptions& opt) {
    std::vector<TensorSpec> out;
    Builder b{out};
    const Storage dense = opt.dense_fp8 ? Storage::kFp8Block : Storage::kBf16;
    const int64_t d = c.hidden_size, n = c.hc_mult;
    b.add("embed.weight", c.vocab_size, d, Storage::kBf16);
    b.add("head.weight", c.vocab_size, d, Storage::kBf16);
    b.add("norm.weight", d, 1, Storage::kBf16);
    b.add("hc_head_fn", n, c.hc_dim(), Storage::kF32);
    b.add("hc_head_base", n, 1, Storage::kF32);
    b.add("hc_head_scale", 1, 1, Storage::kF32);
    for (int l = 0; l < c.n_layers; ++l)
        add_block(b, c, "layers." + std::to_string(l) + ".", c.compress_ratios[l], c.mlp_types[l] == MoeRouting::kHash,
                  dense);
    if (opt.include_mtp)
        for (int m = 0; m < c.num_nextn_predict_layers; ++m) {
            // MTP block: sliding-window attention, learned routing (spec §2.11).
            const std::string p = "mtp." + std::to_string(m) + ".";
            add_block(b, c, p, 0, false, dense);
            b.add(p + "e_proj.weight", d, d, dense);
            b.add(p + "h_proj.weight", d, d, dense);
            b.add(p + "enorm.weight", d, 1, Storage::kBf16);
            b.add(p + "hnorm.weight", d, 1, Storage::kBf16);
            b.add(p + "norm.weight", d, 1, Storage::kBf16);
            b.add(p + "hc_head_fn", n, c.hc_dim(), Storage::kF32);
            b.add(p + "hc_head_base", n, 1, Storage::kF32);
            b.add(p + "hc_head_scale", 1, 1, Storage::kF32);
        }
    return out;
}

int64_t total_bytes(const std::vector<TensorSpec>& inv) {
    int64_t t = 0;
    for (const TensorSpec& s : inv) t += storage_bytes(s.storage, s.rows, s.cols);
    return t;
}

Result<RankWeightBytes> rank_weight_bytes(const std::vector<TensorSpec>& inv, const ExpertPartition& ep,
                                          const AttentionShard& attn) {
    if (ep.n_ranks() != attn.n_ranks)
        return invalid_argument("expert partition over {} ranks but attention over {}", ep.n_ranks(), attn.n_ranks);
    const bool tp = attn.scheme == AttnScheme::kTensorParallel;
    const int64_t N = attn.n_ranks;
    RankWeightBytes r;
    for (const TensorSpec& s : inv) {
        switch (s.placement) {
            case Placement::kReplicated:
                r.replicated += storage_bytes(s.storage, s.rows, s.cols);
                break;
            case Placement::kExpert:
                if (ep.owns(attn.rank, s.expert)) r.experts += storage_bytes(s.storage, s.rows, s.cols);
                break;
            case Placement::kHeadRows:
            case Placement::kHeadCols: {
                if (!tp) {
                    r.attention_split += storage_bytes(s.storage, s.rows, s.cols);
                    break;
                }
                const bool by_rows = s.placement == Placement::kHeadRows;
                const int64_t dim = by_rows ? s.rows : s.cols;
                if (dim % N != 0)
                    return invalid_argument("{}: {} {} are not divisible by {} ranks", s.name, dim,
                                            by_rows ? "rows" : "columns", N);
                r.attention_split += by_rows ? storage_bytes(s.storage, s.rows / N, s.cols)
                                             : storage_bytes(s.storage, s.rows, s.cols / N);
                break;
            }
        }
    }
    return r;
}

}  // namespace dsv4::dist
