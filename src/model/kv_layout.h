// KvLayout: how a sequence's decode-time state (spec §3.1) maps onto fixed-size pages drawn from
// one pool. Two kinds of pages, both the same size in bytes:
//   * state pages (n_state_pages per sequence, fixed): the sliding-window ring of every layer
//     and every compressor's residual state;
//   * token pages, one per `page_tokens` tokens: the compressed rows (CSA main + indexer keys,
//     HCA) produced by those tokens. Compressed row w of a layer with ratio r lives in token
//     page (w*r) / page_tokens, slot ((w*r) % page_tokens) / r.
// A sequence's page table lists its state pages first, then its token pages in order.
// The scheduler only counts pages; runners turn page ids into addresses.
// Offsets and sizes are in elements of elem_bytes (4: f32 on the CPU reference, 4-byte words on
// the CUDA pool). Window ring rows and main compressed rows take row_words_main elements each,
// indexer rows row_words_index, per the pool's row format (model/kv_rows.h); with kF32 rows these
// are head_dim / index_head_dim and the layout is the plain f32 one the CPU reference uses. With
// other formats every ring row lies inside one page (ring offset and page size are multiples of
// row_words_main), so a row has one contiguous address for the decode attention kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/kv_rows.h"

namespace dsv4 {

// Where one layer's state lives. Offsets are in elements (of elem_bytes each).
struct LayerStateLayout {
    int ratio = 0;                  // 0: sliding-only
    int64_t ring_offset = 0;        // state area: window ring [W, row_words_main], slot p mod W
    int64_t comp_kv_offset = -1;    // state area: main compressor kv   [kappa*r, kappa*D]
    int64_t comp_gate_offset = -1;  // state area: main compressor gate [kappa*r, kappa*D]
    int64_t idx_kv_offset = -1;     // state area: indexer compressor kv   [2r, 2*ID] (CSA)
    int64_t idx_gate_offset = -1;   // state area: indexer compressor gate [2r, 2*ID] (CSA)
    int64_t rows_per_page = 0;      // compressed rows per token page
    int64_t row_offset = -1;        // token page: main compressed rows [rows_per_page, row_words_main]
    int64_t idx_row_offset = -1;    // token page: indexer rows [rows_per_page, row_words_index] (CSA)
    // Speculative decoding (KvLayout::spec_tokens > 0; decoder blocks only): what a verify chunk of
    // n <= spec_tokens + 1 tokens overwrites, saved before it runs (model/spec_state.h). Offsets in
    // the state area; -1 when absent.
    int64_t ring_backup_offset = -1;  // [spec_tokens + 1, row_words_main]: ring slots of the chunk's positions
    int64_t comp_backup_offset = -1;  // kv then gate, each [spec_backup_rows, kappa*head_dim]
    int64_t idx_backup_offset = -1;   // kv then gate, each [spec_backup_rows, 2*index_head_dim] (CSA)
    int64_t spec_backup_rows = 0;     // spec_tokens + 1 slot rows, then (CSA) the r previous-window rows
};

// The per-sequence speculative-decoding area of the state (KvLayout::spec_tokens > 0), in elements
// from the start of the state area (model/spec_state.h says what each holds).
struct SpecStateLayout {
    int64_t header_offset = -1;           // [4] int32: verify start, verify length, pending start, pending length
    int64_t pending_tokens_offset = -1;   // [spec_tokens + 1] token ids as f32 values: the pending positions' tokens
    int64_t pending_streams_offset = -1;  // [spec_tokens + 1, hc_mult * hidden] f32: their final streams
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
    int64_t ring_rows = 0;      // rows of every window ring (the sliding window W)
    KvRowFormat row_format = KvRowFormat::kF32;
    KvRowSpec main_row, index_row;  // stored geometry of K=V rows (ring + main compressed) and indexer rows
    int64_t row_words_main = 0;     // elements between consecutive K=V rows (= head_dim for kF32)
    int64_t row_words_index = 0;    // elements between consecutive indexer rows (= index_head_dim for kF32)
    // [n_layers + mtp_blocks]: the decoder blocks, then the MTP blocks (spec §2.11: a window ring
    // each, ratio 0), whose state follows every decoder block's so their offsets do not move.
    std::vector<LayerStateLayout> layers;
    int mtp_blocks = 0;
    // Speculative decoding: the most draft tokens one verify chunk carries (0: none), and the area
    // that holds the verify chunk's backup and the MTP block's pending inputs.
    int spec_tokens = 0;
    SpecStateLayout spec;

    // Builds the layout. page_tokens must be a multiple of every compress ratio <= it, and every
    // larger ratio a multiple of page_tokens; errors say which ratio does not fit. Rows other
    // than kF32 need elem_bytes 4 and head_dim, index_head_dim multiples of 4 (8-byte rows).
    // mtp_blocks (<= cfg.num_nextn_predict_layers) adds the state of that many MTP blocks;
    // spec_tokens (0..8) the speculative-decoding area for verify chunks of up to spec_tokens + 1
    // tokens, which must not span a whole compressor window (spec_tokens + 1 <= every ratio) nor
    // the sliding window, so that one chunk closes at most one window per compressor.
    static Result<KvLayout> make(const ModelConfig& cfg, int64_t page_tokens, int64_t elem_bytes,
                                 KvRowFormat rows = KvRowFormat::kF32, int mtp_blocks = 0, int spec_tokens = 0);

    // Token page index (within a sequence's token pages) and slot of compressed row w of a layer.
    int64_t row_page(int layer, int64_t w) const { return (w * layers[layer].ratio) / page_tokens; }
    int64_t row_slot(int layer, int64_t w) const {
        const int64_t r = layers[layer].ratio;
        return r <= page_tokens ? ((w * r) % page_tokens) / r : 0;
    }

    // Element offset, from the start of the state area, of window ring slot `slot` of a layer.
    int64_t ring_row(int layer, int64_t slot) const { return layers[layer].ring_offset + slot * row_words_main; }
    // Element offset, from the start of its token page, of compressed row w (main / indexer).
    int64_t comp_row_in_page(int layer, int64_t w) const {
        return layers[layer].row_offset + row_slot(layer, w) * row_words_main;
    }
    int64_t index_row_in_page(int layer, int64_t w) const {
        return layers[layer].idx_row_offset + row_slot(layer, w) * row_words_index;
    }

    // Pages a sequence of n_tokens needs (state pages + token pages).
    int64_t pages_for_tokens(int64_t n_tokens) const {
        return n_state_pages + (n_tokens + page_tokens - 1) / page_tokens;
    }
};

}  // namespace dsv4
