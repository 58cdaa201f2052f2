// KvLayout: how a sequence's decode-time state (spec §3.1) maps onto fixed-size pages drawn from
// one pool. Two kinds of pages, both the same size in bytes:
//   * state pages (n_state_pages per sequence, fixed): the sliding-window ring of every layer
//     and every compressor's residual state;
//   * token pages, one per `page_tokens` tokens: the compressed rows (CSA main + indexer keys,
//     HCA) produced by those tokens. Compressed row w of a layer with ratio r lives in token
//     page (w*r) / page_tokens, slot ((w*r) % page_tokens) / r.
// A sequence's page table lists its state pages first, then its token pages in order.
// The scheduler only counts pages; runners turn page ids into addresses.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace dsv4 {

// Where one layer's state lives. Offsets are in elements (of elem_bytes each).
struct LayerStateLayout {
    int ratio = 0;                 // 0: sliding-only
    int64_t ring_offset = 0;       // state area: window ring [W, D]
    int64_t comp_kv_offset = -1;   // state area: main compressor kv   [kappa*r, kappa*D]
    int64_t comp_gate_offset = -1; // state area: main compressor gate [kappa*r, kappa*D]
    int64_t idx_kv_offset = -1;    // state area: indexer compressor kv   [2r, 2*ID] (CSA)
    int64_t idx_gate_offset = -1;  // state area: indexer compressor gate [2r, 2*ID] (CSA)
    int64_t rows_per_page = 0;     // compressed rows per token page
    int64_t row_offset = -1;       // token page: main compressed rows [rows_per_page, D]
    int64_t idx_row_offset = -1;   // token page: indexer rows [rows_per_page, ID] (CSA)
};

struct KvLayout {
    int64_t page_tokens = 0;    // tokens covered by one token page
    int64_t page_bytes = 0;     // bytes of one page
    int64_t page_elems = 0;     // elements of one page
    int64_t elem_bytes = 4;     // bytes per stored element (4 = f32 on the CPU reference)
    int64_t n_state_pages = 0;  // fixed pages per sequence
    int64_t state_elems = 0;    // elements of the state area (<= n_state_pages * page_elems)
    int64_t row_dim_main = 0;   // elements of a main compressed row (head_dim)
    int64_t row_dim_index = 0;  // elements of an indexer row (index_head_dim)
    std::vector<LayerStateLayout> layers;

    // Builds the layout. page_tokens must be a multiple of every compress ratio <= it, and every
    // larger ratio a multiple of page_tokens; errors say which ratio does not fit.
    static Result<KvLayout> make(const ModelConfig& cfg, int64_t page_tokens, int64_t elem_bytes);

    // Token page index (within a sequence's token pages) and slot of compressed row w of a layer.
    int64_t row_page(int layer, int64_t w) const { return (w * layers[layer].ratio) / page_tokens; }
    int64_t row_slot(int layer, int64_t w) const {
        const int64_t r = layers[layer].ratio;
        return r <= page_tokens ? ((w * r) % page_tokens) / r : 0;
    }

    // Pages a sequence of n_tokens needs (state pages + token pages).
    int64_t pages_for_tokens(int64_t n_tokens) const {
        return n_state_pages + (n_tokens + page_tokens - 1) / page_tokens;
    }
};

}  // namespace dsv4
