// Layer loop of the CPU reference (see ref_model.h). Attention and MoE are in ref_attention.cpp
// and ref_moe.cpp.
#include "model/ref_model.h"

#include <algorithm>
#include <cstring>

#include "kernels/ref/compressor.h"
#include "kernels/ref/mhc.h"

namespace dsv4 {

float* SeqStateView::comp_row(int layer, int64_t w) const {
    const int64_t page = token_pages[layout->row_page(layer, w)];
    return pool + page * layout->page_elems + layout->comp_row_in_page(layer, w);
}

float* SeqStateView::index_row(int layer, int64_t w) const {
    const int64_t page = token_pages[layout->row_page(layer, w)];
    return pool + page * layout->page_elems + layout->index_row_in_page(layer, w);
}

RefModel::RefModel(ModelConfig cfg, ModelWeights weights, RefNumerics numerics)
    : cfg_(std::move(cfg)), w_(std::move(weights)), num_(numerics) {
    rope_main_ = ref::make_rope_table(cfg_.rope_theta, cfg_.rope_dim, false, 1, 1, 1, 1);
    rope_compress_ = ref::make_rope_table(cfg_.compress_rope_theta, cfg_.rope_dim, cfg_.yarn.enabled,
                                          cfg_.yarn.factor, cfg_.yarn.original_max_position,
                                          cfg_.yarn.beta_fast, cfg_.yarn.beta_slow);
}

void RefModel::reset_state(const SeqStateView& st) const {
    std::fill(st.state, st.state + st.layout->state_elems, 0.0f);
    for (int l = 0; l < cfg_.n_layers; ++l) {
        const LayerStateLayout& s = st.layout->layers[l];
        if (s.ratio == 0) continue;
        const bool csa = cfg_.layer_types[l] == AttnType::kCSA;
        ref::compressor_reset({s.ratio, cfg_.head_dim, csa}, st.state + s.comp_kv_offset,
                              st.state + s.comp_gate_offset);
        if (csa)
            ref::compressor_reset({s.ratio, cfg_.index_head_dim, true}, st.state + s.idx_kv_offset,
                                  st.state + s.idx_gate_offset);
    }
}

Status RefModel::forward(const SeqStateView& st, std::span<const int32_t> tokens, int64_t start_pos,
                         const RefForwardOptions& opt, std::vector<float>& logits) const {
    const int64_t T = int64_t(tokens.size());
    const int n = cfg_.hc_mult, d = cfg_.hidden_size;
    for (int64_t t = 0; t < T; ++t)
        if (tokens[t] < 0 || tokens[t] >= cfg_.vocab_size)
            return error(StatusCode::kOutOfRange, "token id {} at position {} is outside the vocabulary [0, {})",
                         tokens[t], start_pos + t, cfg_.vocab_size);
    if (T == 0) return invalid_argument("empty chunk");
    const int64_t needed_pages = (start_pos + T + st.layout->page_tokens - 1) / st.layout->page_tokens;
    if (int64_t(st.token_pages.size()) < needed_pages)
        return error(StatusCode::kFailedPrecondition,
                     "page table holds {} token pages but positions up to {} need {}",
                     st.token_pages.size(), start_pos + T - 1, needed_pages);
    if (start_pos == 0) reset_state(st);

    auto dump = [&](const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
        if (opt.dump) opt.dump(name, v, std::move(shape));
    };

    // Residual streams X [T, n, d]: n copies of the embedding (spec §2.1).
    std::vector<float> X(size_t(T) * n * d);
    for (int64_t t = 0; t < T; ++t)
        for (int j = 0; j < n; ++j)
            std::memcpy(&X[(size_t(t) * n + j) * d], &w_.embed[size_t(tokens[t]) * d], sizeof(float) * d);

    std::vector<float> u(size_t(T) * d), xn(size_t(T) * d), y(size_t(T) * d);
    std::vector<ref::MhcCoeffs> coeffs(static_cast<size_t>(T));
    for (int l = 0; l < cfg_.n_layers; ++l) {
        const LayerWeights& L = w_.layers[l];
        const std::string p = "L" + std::to_string(l) + ".";
        for (int site = 0; site < 2; ++site) {
            const bool attn = site == 0;
            ref::MhcParams mp{attn ? L.hc_attn_fn.data() : L.hc_ffn_fn.data(),
                              attn ? L.hc_attn_base.data() : L.hc_ffn_base.data(),
                              attn ? L.hc_attn_scale.data() : L.hc_ffn_scale.data(),
                              n, d, cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps), float(cfg_.rms_norm_eps)};
            for (int64_t t = 0; t < T; ++t) {
                ref::mhc_coeffs(&X[size_t(t) * n * d], mp, coeffs[t]);
                ref::mhc_collapse(&X[size_t(t) * n * d], coeffs[t], n, d, &u[size_t(t) * d]);
            }
            ref::rms_norm(u.data(), attn ? L.attn_norm.data() : L.ffn_norm.data(), xn.data(), T, d,
                          float(cfg_.rms_norm_eps));
            if (attn) {
                attention(l, st, xn.data(), T, start_pos, opt, y.data());
                dump(p + "attn_out", y, {T, d});
            } else {
                DSV4_RETURN_IF_ERROR(moe(l, xn.data(), tokens, opt, y.data()));
                dump(p + "ffn_out", y, {T, d});
            }
            for (int64_t t = 0; t < T; ++t)
                ref::mhc_expand(&X[size_t(t) * n * d], &y[size_t(t) * d], coeffs[t], n, d);
        }
        dump(p + "out", X, {T, n, d});
    }

    if (!opt.want_logits) return Status::ok();
    // Final collapse, norm and LM head (spec §2.10), for the last token or all of them.
    const int64_t first = opt.all_logits ? 0 : T - 1;
    const int64_t R = T - first;
    std::vector<float> h(size_t(R) * d), hn(size_t(R) * d);
    for (int64_t t = first; t < T; ++t)
        ref::mhc_head(&X[size_t(t) * n * d], w_.hc_head_fn.data(), w_.hc_head_base.data(),
                      w_.hc_head_scale.data(), n, d, float(cfg_.hc_eps), float(cfg_.rms_norm_eps),
                      &h[size_t(t - first) * d]);
    ref::rms_norm(h.data(), w_.norm.data(), hn.data(), R, d, float(cfg_.rms_norm_eps));
    dump("final_hidden", hn, {R, d});
    logits.assign(size_t(R) * cfg_.vocab_size, 0.0f);
    ref::linear(hn.data(), w_.head.data(), logits.data(), R, cfg_.vocab_size, d);
    return Status::ok();
}

}  // namespace dsv4
