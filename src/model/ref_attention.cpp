// Attention of one layer in the CPU reference (spec §2.4-2.8, §3.4): q/kv projections with norms
// and RoPE, window ring, compressors, lightning indexer with top-k, sink attention over window +
// compressed rows, inverse RoPE and the grouped low-rank output projection.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/compressor.h"
#include "kernels/ref/qat.h"
#include "model/ref_model.h"

namespace dsv4 {

namespace {
// Finishes a pooled compressor entry: weighted RMSNorm, then RoPE at the window's first position.
void finish_entry(float* entry, int dim, const std::vector<float>& norm, float eps, const ref::RopeTable& rope,
                  int64_t rope_pos) {
    std::vector<float> tmp(entry, entry + dim);
    ref::rms_norm(tmp.data(), norm.data(), entry, 1, dim, eps);
    ref::apply_rope(entry, dim, rope, rope_pos);
}
}  // namespace

void RefModel::attention(int l, const SeqStateView& st, const float* x, int64_t T, int64_t start_pos,
                         const RefForwardOptions& opt, float* out) const {
    const LayerWeights& L = block_weights(l);
    const LayerStateLayout& S = st.layout->layers[l];
    const int d = cfg_.hidden_size, H = cfg_.n_heads, D = cfg_.head_dim, qr = cfg_.q_lora_rank;
    const int W = cfg_.sliding_window, G = cfg_.o_groups, orank = cfg_.o_lora_rank;
    const float eps = float(cfg_.rms_norm_eps);
    const ref::RopeTable& rope = rope_for(l);
    const int r = block_ratio(l);
    const bool csa = block_type(l) == AttnType::kCSA;
    const std::string pfx = block_name(l);

    // Query path: q_lat = q_norm(wq_a x); q = wq_b q_lat; per-head unweighted norm; RoPE.
    std::vector<float> q_lat_raw(size_t(T) * qr), q_lat(size_t(T) * qr), q(size_t(T) * H * D);
    ref::linear(x, L.wq_a.data(), q_lat_raw.data(), T, qr, d);
    ref::rms_norm(q_lat_raw.data(), L.q_norm.data(), q_lat.data(), T, qr, eps);
    ref::linear(q_lat.data(), L.wq_b.data(), q.data(), T, int64_t(H) * D, qr);
    ref::rms_norm_unweighted(q.data(), T * H, D, eps);
    // K=V path: kv = kv_norm(wkv x); RoPE.
    std::vector<float> kv_raw(size_t(T) * D), kv(size_t(T) * D);
    ref::linear(x, L.wkv.data(), kv_raw.data(), T, D, d);
    ref::rms_norm(kv_raw.data(), L.kv_norm.data(), kv.data(), T, D, eps);
    for (int64_t t = 0; t < T; ++t) {
        const int64_t p = start_pos + t;
        for (int h = 0; h < H; ++h) ref::apply_rope(&q[(size_t(t) * H + h) * D], D, rope, p);
        ref::apply_rope(&kv[size_t(t) * D], D, rope, p);
        if (num_.kv_fp8) ref::kv_cache_qdq(&kv[size_t(t) * D], D, cfg_.rope_dim);
    }

    // Compressor projections (f32), batched over the chunk.
    const ref::CompressorShape main_shape{r, D, csa};
    std::vector<float> cv, cg;
    if (r > 0) {
        const int64_t wd = main_shape.state_width();
        cv.resize(size_t(T) * wd);
        cg.resize(size_t(T) * wd);
        ref::linear(x, L.compressor.wkv.data(), cv.data(), T, wd, d);
        ref::linear(x, L.compressor.wgate.data(), cg.data(), T, wd, d);
    }
    // Indexer projections (CSA).
    const int IH = cfg_.index_n_heads, ID = cfg_.index_head_dim;
    const ref::CompressorShape idx_shape{r, ID, true};
    std::vector<float> iv, ig, iq, iw;
    if (csa) {
        const int64_t wd = idx_shape.state_width();
        iv.resize(size_t(T) * wd);
        ig.resize(size_t(T) * wd);
        ref::linear(x, L.indexer.compressor.wkv.data(), iv.data(), T, wd, d);
        ref::linear(x, L.indexer.compressor.wgate.data(), ig.data(), T, wd, d);
        iq.resize(size_t(T) * IH * ID);
        ref::linear(q_lat.data(), L.indexer.wq_b.data(), iq.data(), T, int64_t(IH) * ID, qr);
        iw.resize(size_t(T) * IH);
        ref::linear(x, L.indexer.weights_proj.data(), iw.data(), T, IH, d);
        // Head weights scaled by ID^-1/2 * IH^-1/2 (spec §2.8 step 2).
        const float wscale = 1.0f / std::sqrt(float(ID)) / std::sqrt(float(IH));
        for (float& v : iw) v *= wscale;
    }

    float* ring = st.state + S.ring_offset;  // [W, D], slot p mod W
    std::vector<float> o(size_t(T) * H * D);
    std::vector<float> entry(size_t(std::max(D, ID)));
    std::vector<const float*> rows;
    std::vector<float> scores;
    std::vector<int64_t> dumped_topk;
    const float scale = 1.0f / std::sqrt(float(D));
    for (int64_t t = 0; t < T; ++t) {
        const int64_t p = start_pos + t;
        std::memcpy(ring + (p % W) * D, &kv[size_t(t) * D], sizeof(float) * D);
        if (r > 0) {
            const int64_t wd = main_shape.state_width();
            float* g = &cg[size_t(t) * wd];
            for (int64_t i = 0; i < wd; ++i) g[i] += L.compressor.ape[(p % r) * wd + i];
            if (ref::compressor_push(main_shape, st.state + S.comp_kv_offset, st.state + S.comp_gate_offset,
                                     &cv[size_t(t) * wd], g, p, entry.data())) {
                const int64_t w = p / r;
                finish_entry(entry.data(), D, L.compressor.norm, eps, rope_compress_, w * r);
                if (num_.kv_fp8) ref::kv_cache_qdq(entry.data(), D, cfg_.rope_dim);
                std::memcpy(st.comp_row(l, w), entry.data(), sizeof(float) * D);
            }
        }
        if (csa) {
            const int64_t wd = idx_shape.state_width();
            float* g = &ig[size_t(t) * wd];
            for (int64_t i = 0; i < wd; ++i) g[i] += L.indexer.compressor.ape[(p % r) * wd + i];
            if (ref::compressor_push(idx_shape, st.state + S.idx_kv_offset, st.state + S.idx_gate_offset,
                                     &iv[size_t(t) * wd], g, p, entry.data())) {
                const int64_t w = p / r;
                finish_entry(entry.data(), ID, L.indexer.compressor.norm, eps, rope_compress_, w * r);
                if (num_.indexer_fp4) {
                    ref::hadamard(entry.data(), ID);
                    ref::fp4_qdq_blocks(entry.data(), ID, 32);
                }
                // The reference caches indexer keys as BF16 (spec §3.2): part of the cached-row numerics.
                if (num_.kv_fp8)
                    for (int64_t i = 0; i < ID; ++i) entry[size_t(i)] = round_bf16(entry[size_t(i)]);
                std::memcpy(st.index_row(l, w), entry.data(), sizeof(float) * ID);
            }
        }

        // Rows attended by query p: the window, then compressed rows.
        rows.clear();
        for (int64_t s = std::max<int64_t>(0, p - W + 1); s <= p; ++s) rows.push_back(ring + (s % W) * D);
        const int64_t n_c = r > 0 ? (p + 1) / r : 0;
        if (r > 0 && !csa) {
            for (int64_t w = 0; w < n_c; ++w) rows.push_back(st.comp_row(l, w));
        } else if (csa && n_c > 0 && ref::index_selects_all(n_c, int(cfg_.index_topk))) {
            for (int64_t w = 0; w < n_c; ++w) rows.push_back(st.comp_row(l, w));
            if (opt.dump) {
                for (int64_t w = 0; w < n_c; ++w) dumped_topk.push_back(int32_t(w));
                for (int64_t i = n_c; i < cfg_.index_topk; ++i) dumped_topk.push_back(-1);
            }
        } else if (csa && n_c > 0) {
            // Lightning indexer: I(p,w) = sum_h w_h ReLU(q_h . k_w) (spec §2.8), then top-k.
            float* qi = &iq[size_t(t) * IH * ID];
            for (int h = 0; h < IH; ++h) {
                ref::apply_rope(qi + size_t(h) * ID, ID, rope_compress_, p);
                if (num_.indexer_fp4) {  // the rotation cancels in q.k; only the FP4 rounding remains
                    ref::hadamard(qi + size_t(h) * ID, ID);
                    ref::fp4_qdq_blocks(qi + size_t(h) * ID, ID, 32);
                }
            }
            scores.assign(size_t(n_c), 0.0f);
            for (int64_t w = 0; w < n_c; ++w) {
                const float* k = st.index_row(l, w);
                double acc = 0.0;
                for (int h = 0; h < IH; ++h) {
                    double dot = 0.0;
                    for (int i = 0; i < ID; ++i) dot += double(qi[size_t(h) * ID + i]) * k[i];
                    acc += double(iw[size_t(t) * IH + h]) * std::max(0.0, dot);
                }
                scores[w] = float(acc);
            }
            const auto sel = ref::topk_indices(scores, std::min<int64_t>(cfg_.index_topk, n_c));
            for (int32_t w : sel) rows.push_back(st.comp_row(l, w));
            if (opt.dump) {
                std::vector<int32_t> sorted(sel);
                std::sort(sorted.begin(), sorted.end());
                for (int32_t w : sorted) dumped_topk.push_back(w);
                for (int64_t i = int64_t(sel.size()); i < cfg_.index_topk; ++i) dumped_topk.push_back(-1);
            }
        }
        if (csa && n_c == 0 && opt.dump)
            for (int64_t i = 0; i < cfg_.index_topk; ++i) dumped_topk.push_back(-1);

        float* ot = &o[size_t(t) * H * D];
        ref::sink_attention(&q[size_t(t) * H * D], rows.data(), int64_t(rows.size()), L.attn_sink.data(), H, D, scale,
                            ot);
        for (int h = 0; h < H; ++h) ref::apply_rope(ot + size_t(h) * D, D, rope, p, /*inverse=*/true);
    }
    if (csa && opt.dump) {
        std::vector<float> f(dumped_topk.begin(), dumped_topk.end());
        opt.dump(pfx + "topk", f, {T, cfg_.index_topk});
    }

    // Grouped low-rank output projection: z_j = wo_a[j] . concat(heads of group j); a = wo_b z.
    const int hpg = H / G;
    const int64_t gin = int64_t(hpg) * D;
    std::vector<float> gx(size_t(T) * gin), gz(size_t(T) * orank), z(size_t(T) * G * orank);
    for (int j = 0; j < G; ++j) {
        for (int64_t t = 0; t < T; ++t)
            std::memcpy(&gx[size_t(t) * gin], &o[size_t(t) * H * D + size_t(j) * gin], sizeof(float) * gin);
        ref::linear(gx.data(), L.wo_a.data() + size_t(j) * orank * gin, gz.data(), T, orank, gin);
        for (int64_t t = 0; t < T; ++t)
            std::memcpy(&z[size_t(t) * G * orank + size_t(j) * orank], &gz[size_t(t) * orank], sizeof(float) * orank);
    }
    ref::linear(z.data(), L.wo_b.data(), out, T, d, int64_t(G) * orank);
}

}  // namespace dsv4
