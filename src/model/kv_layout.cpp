#include "model/kv_layout.h"

#include <algorithm>

namespace dsv4 {

Result<KvLayout> KvLayout::make(const ModelConfig& cfg, int64_t page_tokens, int64_t elem_bytes, KvRowFormat rows,
                                int mtp_blocks, int spec_tokens) {
    if (page_tokens <= 0) return invalid_argument("page size must be positive, got {}", page_tokens);
    if (mtp_blocks < 0 || mtp_blocks > cfg.num_nextn_predict_layers)
        return invalid_argument("{} MTP blocks asked but the model has {}", mtp_blocks, cfg.num_nextn_predict_layers);
    if (spec_tokens < 0 || spec_tokens > 8)
        return invalid_argument("speculative tokens {} outside [0, 8]", spec_tokens);
    if (spec_tokens > 0) {
        if (spec_tokens + 1 > cfg.sliding_window)
            return invalid_argument("a verify chunk of {} tokens is longer than the sliding window of {}",
                                    spec_tokens + 1, cfg.sliding_window);
        for (int l = 0; l < cfg.n_layers; ++l)
            if (cfg.compress_ratio(l) > 0 && spec_tokens + 1 > cfg.compress_ratio(l))
                return invalid_argument(
                    "a verify chunk of {} tokens spans more than one window of layer {}'s compress "
                    "ratio {}: at most {} speculative tokens",
                    spec_tokens + 1, l, cfg.compress_ratio(l), cfg.compress_ratio(l) - 1);
    }
    const bool packed = rows != KvRowFormat::kF32;
    if (packed && (elem_bytes != 4 || cfg.head_dim % 4 || cfg.index_head_dim % 4))
        return invalid_argument(
            "{} KV rows need 4-byte elements and head dims that are multiples of 4 (head_dim {}, "
            "index_head_dim {})",
            kv_row_format_name(rows), cfg.head_dim, cfg.index_head_dim);
    KvLayout L;
    L.page_tokens = page_tokens;
    L.elem_bytes = elem_bytes;
    L.row_dim_main = cfg.head_dim;
    L.row_dim_index = cfg.index_head_dim;
    L.ring_rows = cfg.sliding_window;
    L.row_format = rows;
    L.main_row = kv_main_row_spec(rows, cfg.head_dim, cfg.rope_dim);
    L.index_row = kv_index_row_spec(rows, std::max(cfg.index_head_dim, 0));
    L.row_words_main = packed ? L.main_row.words() : cfg.head_dim;
    L.row_words_index = packed ? L.index_row.words() : cfg.index_head_dim;
    const int64_t D = L.row_words_main, ID = cfg.index_head_dim, IW = L.row_words_index, W = cfg.sliding_window;
    int64_t state = 0, token = 0;
    for (int l = 0; l < cfg.n_layers; ++l) {
        LayerStateLayout s;
        s.ratio = cfg.compress_ratio(l);
        if (packed) state = (state + D - 1) / D * D;  // ring rows never straddle a page (see below)
        s.ring_offset = state;
        state += W * D;
        if (s.ratio > 0) {
            const int64_t r = s.ratio;
            if (r <= page_tokens ? page_tokens % r != 0 : r % page_tokens != 0)
                return invalid_argument(
                    "page size {} tokens does not fit compress ratio {} of layer {} (one must divide "
                    "the other)",
                    page_tokens, r, l);
            const bool csa = cfg.layer_types[l] == AttnType::kCSA;
            const int64_t kappa = csa ? 2 : 1;
            s.comp_kv_offset = state;
            state += kappa * r * kappa * cfg.head_dim;
            s.comp_gate_offset = state;
            state += kappa * r * kappa * cfg.head_dim;
            if (csa) {
                s.idx_kv_offset = state;
                state += 2 * r * 2 * ID;
                s.idx_gate_offset = state;
                state += 2 * r * 2 * ID;
            }
            s.rows_per_page = std::max<int64_t>(1, page_tokens / r);
            s.row_offset = token;
            token += s.rows_per_page * D;
            if (csa) {
                s.idx_row_offset = token;
                token += s.rows_per_page * IW;
            }
        }
        L.layers.push_back(s);
    }
    for (int m = 0; m < mtp_blocks; ++m) {  // sliding-window blocks: a ring only
        LayerStateLayout s;
        if (packed) state = (state + D - 1) / D * D;
        s.ring_offset = state;
        state += W * D;
        L.layers.push_back(s);
    }
    L.mtp_blocks = mtp_blocks;
    L.spec_tokens = spec_tokens;
    if (spec_tokens > 0) {
        const int64_t n = spec_tokens + 1;
        for (int l = 0; l < cfg.n_layers; ++l) {
            LayerStateLayout& s = L.layers[size_t(l)];
            if (packed) state = (state + D - 1) / D * D;
            s.ring_backup_offset = state;
            state += n * D;
            if (s.ratio > 0) {
                const bool csa = cfg.layer_types[l] == AttnType::kCSA;
                s.spec_backup_rows = n + (csa ? s.ratio : 0);
                s.comp_backup_offset = state;
                state += 2 * s.spec_backup_rows * (csa ? 2 : 1) * cfg.head_dim;
                if (csa) {
                    s.idx_backup_offset = state;
                    state += 2 * s.spec_backup_rows * 2 * ID;
                }
            }
        }
        L.spec.header_offset = state;
        state += 4;
        L.spec.pending_tokens_offset = state;
        state += n;
        L.spec.pending_streams_offset = state;
        state += n * int64_t(cfg.hc_mult) * cfg.hidden_size;
    }
    // A page must hold one token page; state pages are the same size.
    L.page_elems = std::max<int64_t>(token, 1);
    // Packed rows: a page size that is a multiple of the row size keeps each ring row (at a
    // multiple of D in the state area) inside one page.
    if (packed) L.page_elems = (L.page_elems + D - 1) / D * D;
    L.page_bytes = L.page_elems * elem_bytes;
    L.state_elems = state;
    L.n_state_pages = (state + L.page_elems - 1) / L.page_elems;
    return L;
}

}  // namespace dsv4
