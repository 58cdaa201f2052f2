// cuda_fast_kernel_table (see cuda_fast_table.h).
#include "runtime/cuda_fast_table.h"

#include <cstdio>
#include <map>
#include <vector>

#include "kernels/cuda/ops/fast_path.h"

namespace dsv4 {

namespace {
struct OpRow {
    std::string fmt;
    int fast = 0, total = 0;
    std::string decline;  // first reason seen
};
}  // namespace

std::string cuda_fast_kernel_table(const DevWeights& w, const ModelConfig& cfg, bool fast_kernels) {
    const int64_t d = cfg.hidden_size, H = cfg.n_heads, D = cfg.head_dim, qr = cfg.q_lora_rank;
    const int64_t G = cfg.o_groups, orank = cfg.o_lora_rank, I = cfg.moe_intermediate_size;
    std::vector<std::string> order;
    std::map<std::string, OpRow> rows;
    auto note = [&](const std::string& name, const std::string& fmt, const std::string& why) {
        auto [it, fresh] = rows.try_emplace(name);
        if (fresh) order.push_back(name), it->second.fmt = fmt;
        ++it->second.total;
        if (why.empty())
            ++it->second.fast;
        else if (it->second.decline.empty())
            it->second.decline = why;
    };
    auto lin = [&](const std::string& name, const cuda::WeightDesc& wd, int npg, int64_t gin, int64_t ldx) {
        if (!wd.data) return;
        note(name, cuda::wfmt_name(wd.fmt), cuda::linear_fast_decline(wd, npg, gin, ldx, wd.N, false));
    };
    for (int l = 0; l < cfg.n_layers && l < int(w.layers.size()); ++l) {
        const DevLayer& L = w.layers[l];
        lin("attn.wq_a", L.wq_a, 0, 0, d);
        lin("attn.wq_b", L.wq_b, 0, 0, qr);
        lin("attn.wkv", L.wkv, 0, 0, d);
        lin("attn.compressor", L.comp.wkv, 0, 0, d);
        lin("attn.indexer.compressor", L.idx_comp.wkv, 0, 0, d);
        lin("attn.indexer.wq_b", L.idx_wq_b, 0, 0, qr);
        lin("attn.indexer.weights_proj", L.idx_wproj, 0, 0, d);
        lin("attn.wo_a (grouped)", L.wo_a, int(orank), (H / G) * D, H * D);
        lin("attn.wo_b", L.wo_b, 0, 0, G * orank);
        lin("ffn.gate", L.gate, 0, 0, d);
        lin("ffn.shared_experts.w1/w3", L.sh_w1, 0, 0, d);
        lin("ffn.shared_experts.w2", L.sh_w2, 0, 0, I);
        cuda::MoeArgs a;
        a.E = cfg.n_routed_experts;
        a.K = cfg.n_experts_per_tok;
        a.d = int(d);
        a.I = int(I);
        a.w1 = L.ex_w1;
        a.w3 = L.ex_w3;
        a.w2 = L.ex_w2;
        const bool hash = cfg.mlp_types[l] == MoeRouting::kHash;
        a.tid2eid = hash ? L.tid2eid : nullptr;
        static const int32_t kSomeTokens = 0;  // only tested for non-null
        a.tokens = &kSomeTokens;
        note(hash ? "ffn.experts (hash)" : "ffn.experts", cuda::wfmt_name(L.ex_w1.fmt), cuda::moe_fast_decline(a));
    }
    lin("head", w.head, 0, 0, d);
    const bool on = fast_kernels;
    std::string out = std::string("fast decode kernels: ") +
                      (on ? "on (option fast_kernels=0 forces the correct-first kernels)\n"
                          : "off (option fast_kernels=0): every op takes the correct-first kernels\n");
    char buf[512];
    for (const std::string& name : order) {
        const OpRow& r = rows[name];
        const bool moe = name.rfind("ffn.experts", 0) == 0;
        std::string path;
        if (r.fast > 0 && on)
            path = moe ? "moe_route/permute/mxfp4 expert/combine" : "dense_gemv";
        else
            path = "correct-first";
        if (on && r.fast > 0 && r.fast < r.total)
            path += " in " + std::to_string(r.fast) + "/" + std::to_string(r.total) + " layers";
        if (on && r.fast < r.total)
            path += (r.fast > 0 ? "; else correct-first: " : " (") + r.decline + (r.fast > 0 ? "" : ")");
        std::snprintf(buf, sizeof(buf), "  %-28s %-18s %s\n", name.c_str(), r.fmt.c_str(), path.c_str());
        out += buf;
    }
    return out;
}

}  // namespace dsv4
