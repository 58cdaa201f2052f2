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
    rope_compress_ = ref::make_rope_table(cfg_.compress_rope_theta, cfg_.rope_dim, cfg_.yarn.enabled, cfg_.yarn.factor,
                                          cfg_.yarn.original_max_position, cfg_.yarn.beta_fast, cfg_.yarn.beta_slow);
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

Status RefModel::check_tokens(std::span<const int32_t> tokens, int64_t start_pos) const {
    for (size_t t = 0; t < tokens.size(); ++t)
        if (tokens[t] < 0 || tokens[t] >= cfg_.vocab_size)
            return error(StatusCode::kOutOfRange, "token id {} at position {} is outside the vocabulary [0, {})",
                         tokens[t], start_pos + int64_t(t), cfg_.vocab_size);
    if (tokens.empty()) return invalid_argument("empty chunk");
    return Status::ok();
}

Status RefModel::block(int l, const SeqStateView& st, std::vector<float>& X, std::span<const int32_t> tokens,
                       int64_t start_pos, const RefForwardOptions& opt) const {
    const int64_t T = int64_t(tokens.size());
    const int n = cfg_.hc_mult, d = cfg_.hidden_size;
    const LayerWeights& L = block_weights(l);
    const std::string p = block_name(l);
    std::vector<float> u(size_t(T) * d), xn(size_t(T) * d), y(size_t(T) * d);
    std::vector<ref::MhcCoeffs> coeffs(static_cast<size_t>(T));
    for (int site = 0; site < 2; ++site) {
        const bool attn = site == 0;
        ref::MhcParams mp{attn ? L.hc_attn_fn.data() : L.hc_ffn_fn.data(),
                          attn ? L.hc_attn_base.data() : L.hc_ffn_base.data(),
                          attn ? L.hc_attn_scale.data() : L.hc_ffn_scale.data(),
                          n,
                          d,
                          cfg_.hc_sinkhorn_iters,
                          float(cfg_.hc_eps),
                          float(cfg_.rms_norm_eps)};
        for (int64_t t = 0; t < T; ++t) {
            ref::mhc_coeffs(&X[size_t(t) * n * d], mp, coeffs[t]);
            ref::mhc_collapse(&X[size_t(t) * n * d], coeffs[t], n, d, &u[size_t(t) * d]);
        }
        ref::rms_norm(u.data(), attn ? L.attn_norm.data() : L.ffn_norm.data(), xn.data(), T, d,
                      float(cfg_.rms_norm_eps));
        if (attn) {
            attention(l, st, xn.data(), T, start_pos, opt, y.data());
            if (opt.dump) opt.dump(p + "attn_out", y, {T, d});
        } else {
            DSV4_RETURN_IF_ERROR(moe(l, xn.data(), tokens, opt, y.data()));
            if (opt.dump) opt.dump(p + "ffn_out", y, {T, d});
        }
        for (int64_t t = 0; t < T; ++t) ref::mhc_expand(&X[size_t(t) * n * d], &y[size_t(t) * d], coeffs[t], n, d);
    }
    if (opt.dump) opt.dump(p + "out", X, {T, n, d});
    return Status::ok();
}

void RefModel::head_logits(const std::vector<float>& X, int64_t T, const F32Vec& hc_fn, const F32Vec& hc_base,
                           const F32Vec& hc_scale, const F32Vec& norm, const RefForwardOptions& opt,
                           const char* dump_name, std::vector<float>& logits) const {
    const int n = cfg_.hc_mult, d = cfg_.hidden_size;
    // Final collapse, norm and LM head (spec §2.10), for the last token or all of them.
    const int64_t first = opt.all_logits ? 0 : T - 1;
    const int64_t R = T - first;
    std::vector<float> h(size_t(R) * d), hn(size_t(R) * d);
    for (int64_t t = first; t < T; ++t)
        ref::mhc_head(&X[size_t(t) * n * d], hc_fn.data(), hc_base.data(), hc_scale.data(), n, d, float(cfg_.hc_eps),
                      float(cfg_.rms_norm_eps), &h[size_t(t - first) * d]);
    ref::rms_norm(h.data(), norm.data(), hn.data(), R, d, float(cfg_.rms_norm_eps));
    if (opt.dump) opt.dump(dump_name, hn, {R, d});
    logits.assign(size_t(R) * cfg_.vocab_size, 0.0f);
    ref::linear(hn.data(), w_.head.data(), logits.data(), R, cfg_.vocab_size, d);
}

Status RefModel::forward(const SeqStateView& st, std::span<const int32_t> tokens, int64_t start_pos,
                         const RefForwardOptions& opt, std::vector<float>& logits) const {
    const int64_t T = int64_t(tokens.size());
    const int n = cfg_.hc_mult, d = cfg_.hidden_size;
    DSV4_RETURN_IF_ERROR(check_tokens(tokens, start_pos));
    const int64_t needed_pages = (start_pos + T + st.layout->page_tokens - 1) / st.layout->page_tokens;
    if (int64_t(st.token_pages.size()) < needed_pages)
        return error(StatusCode::kFailedPrecondition, "page table holds {} token pages but positions up to {} need {}",
                     st.token_pages.size(), start_pos + T - 1, needed_pages);
    if (start_pos == 0) reset_state(st);

    // Residual streams X [T, n, d]: n copies of the embedding (spec §2.1).
    std::vector<float> X(size_t(T) * n * d);
    for (int64_t t = 0; t < T; ++t)
        for (int j = 0; j < n; ++j)
            std::memcpy(&X[(size_t(t) * n + j) * d], &w_.embed[size_t(tokens[t]) * d], sizeof(float) * d);
    for (int l = 0; l < cfg_.n_layers; ++l) DSV4_RETURN_IF_ERROR(block(l, st, X, tokens, start_pos, opt));
    if (opt.streams_out) *opt.streams_out = X;
    if (!opt.want_logits) return Status::ok();
    head_logits(X, T, w_.hc_head_fn, w_.hc_head_base, w_.hc_head_scale, w_.norm, opt, "final_hidden", logits);
    return Status::ok();
}

Status RefModel::mtp_forward(int m, const SeqStateView& st, std::span<const float> streams,
                             std::span<const int32_t> next_tokens, int64_t start_pos, const RefForwardOptions& opt,
                             std::vector<float>& logits) const {
    const int64_t T = int64_t(next_tokens.size());
    const int n = cfg_.hc_mult, d = cfg_.hidden_size;
    if (mtp_blocks() == 0)
        return error(StatusCode::kFailedPrecondition,
                     "MTP block {} asked but the model has none (a checkpoint without mtp.*, or an MTP block with "
                     "compression, which dsv4 does not implement)",
                     m);
    if (m < 0 || m >= mtp_blocks()) return invalid_argument("MTP block {} asked but the model has {}", m, mtp_blocks());
    if (start_pos < 0) return invalid_argument("MTP start position {} is negative", start_pos);
    const int l = cfg_.n_layers + m;
    if (int(st.layout->layers.size()) <= l)
        return error(StatusCode::kFailedPrecondition,
                     "the KV layout holds no state for MTP block {} (build it with KvLayout::make(..., mtp_blocks))",
                     m);
    DSV4_RETURN_IF_ERROR(check_tokens(next_tokens, start_pos + 1));
    if (int64_t(streams.size()) != T * n * d)
        return invalid_argument("MTP input streams hold {} values, {} positions need {}", streams.size(), T, T * n * d);
    const MtpWeights& M = w_.mtp[size_t(m)];
    const float eps = float(cfg_.rms_norm_eps);
    // X[t, j] = e_proj enorm(E[next_t]) + h_proj hnorm(streams[t, j]) (spec §2.11).
    std::vector<float> e(size_t(T) * d), en(size_t(T) * d), ep(size_t(T) * d);
    for (int64_t t = 0; t < T; ++t)
        std::memcpy(&e[size_t(t) * d], &w_.embed[size_t(next_tokens[t]) * d], sizeof(float) * d);
    ref::rms_norm(e.data(), M.enorm.data(), en.data(), T, d, eps);
    ref::linear(en.data(), M.e_proj.data(), ep.data(), T, d, d);
    std::vector<float> hn(size_t(T) * n * d), X(size_t(T) * n * d);
    ref::rms_norm(streams.data(), M.hnorm.data(), hn.data(), T * n, d, eps);
    ref::linear(hn.data(), M.h_proj.data(), X.data(), T * n, d, d);
    for (int64_t t = 0; t < T; ++t)
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < d; ++i) X[(size_t(t) * n + j) * d + i] += ep[size_t(t) * d + i];
    DSV4_RETURN_IF_ERROR(block(l, st, X, next_tokens, start_pos, opt));
    if (opt.streams_out) *opt.streams_out = X;
    if (!opt.want_logits) return Status::ok();
    const std::string name = block_name(l) + "final_hidden";
    head_logits(X, T, M.hc_head_fn, M.hc_head_base, M.hc_head_scale, M.norm, opt, name.c_str(), logits);
    return Status::ok();
}

}  // namespace dsv4
