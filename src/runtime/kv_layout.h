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

#include "model/config.h"

namespace dsv4 {

struct KvLayout {
    int64_t page_tokens = 0;    // tokens covered by one token page (multiple of every ratio <= it)
    int64_t page_bytes = 0;     // bytes of one page
    int64_t n_state_pages = 0;  // fixed pages per sequence
    int64_t row_bytes = 4;      // bytes per stored element (4 = f32 on the CPU reference)

    // Builds the layout for a model. `elem_bytes`: element size of the stored rows.
    static KvLayout make(const ModelConfig& cfg, int64_t page_tokens, int64_t elem_bytes);

    // Pages a sequence of n_tokens needs (state pages + token pages).
    int64_t pages_for_tokens(int64_t n_tokens) const {
        return n_state_pages + (n_tokens + page_tokens - 1) / page_tokens;
    }
};

}  // namespace dsv4
