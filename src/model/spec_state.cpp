// The speculative-decoding area of a sequence's state (see spec_state.h).
#include "model/spec_state.h"

#include <algorithm>
#include <cstring>

namespace dsv4 {
namespace {

// One compressor's state: kv and gate [rows, width] at kv / gate, backup [backup_rows, width] x 2.
struct CompressorRegion {
    int64_t kv = -1, gate = -1, backup = -1, width = 0, ratio = 0, backup_rows = 0;
    bool overlap = false;
    // State row of position q (compressor_push: the current-window half for overlapping ones).
    int64_t row(int64_t q) const { return (overlap ? ratio : 0) + q % ratio; }
};

template <typename Fn>
void for_each_compressor(const KvLayout& L, Fn&& fn) {
    for (size_t l = 0; l < L.layers.size() - size_t(L.mtp_blocks); ++l) {
        const LayerStateLayout& s = L.layers[l];
        if (s.ratio == 0) continue;
        const bool csa = s.idx_kv_offset >= 0;
        const int64_t kappa = csa ? 2 : 1;
        fn(CompressorRegion{s.comp_kv_offset, s.comp_gate_offset, s.comp_backup_offset, kappa * L.row_dim_main, s.ratio,
                            s.spec_backup_rows, csa});
        if (csa)
            fn(CompressorRegion{s.idx_kv_offset, s.idx_gate_offset, s.idx_backup_offset, 2 * L.row_dim_index, s.ratio,
                                s.spec_backup_rows, true});
    }
}

void copy_row(float* dst, const float* src, int64_t width) { std::memcpy(dst, src, sizeof(float) * size_t(width)); }

}  // namespace

SpecHeader spec_header(const KvLayout& L, const float* state) {
    SpecHeader h;
    std::memcpy(&h, state + L.spec.header_offset, sizeof h);
    return h;
}

void set_spec_header(const KvLayout& L, float* state, const SpecHeader& h) {
    std::memcpy(state + L.spec.header_offset, &h, sizeof h);
}

void spec_backup(const KvLayout& L, float* state, int64_t start, int64_t n) {
    const int64_t W = L.ring_rows, D = L.row_words_main;
    for (size_t l = 0; l < L.layers.size() - size_t(L.mtp_blocks); ++l) {
        const LayerStateLayout& s = L.layers[l];
        for (int64_t i = 0; i < n; ++i)
            copy_row(state + s.ring_backup_offset + i * D, state + L.ring_row(int(l), (start + i) % W), D);
    }
    for_each_compressor(L, [&](const CompressorRegion& c) {
        const int64_t gate_backup = c.backup + c.backup_rows * c.width;
        for (int64_t i = 0; i < n; ++i) {
            copy_row(state + c.backup + i * c.width, state + c.kv + c.row(start + i) * c.width, c.width);
            copy_row(state + gate_backup + i * c.width, state + c.gate + c.row(start + i) * c.width, c.width);
        }
        const int64_t prev = L.spec_tokens + 1;  // the previous-window rows follow the slot rows
        if (c.overlap) {
            copy_row(state + c.backup + prev * c.width, state + c.kv, c.ratio * c.width);
            copy_row(state + gate_backup + prev * c.width, state + c.gate, c.ratio * c.width);
        }
    });
    SpecHeader h = spec_header(L, state);
    h.verify_start = int32_t(start);
    h.verify_len = int32_t(n);
    set_spec_header(L, state, h);
}

Status spec_rollback(const KvLayout& L, float* state, int64_t from) {
    SpecHeader h = spec_header(L, state);
    if (h.verify_len == 0) return Status::ok();
    const int64_t v0 = h.verify_start, v1 = v0 + h.verify_len;
    if (from < v0)
        return error(StatusCode::kFailedPrecondition,
                     "a chunk at position {} starts before the unresolved verify chunk at [{}, {})", from, v0, v1);
    const int64_t W = L.ring_rows, D = L.row_words_main;
    for (int64_t q = from; q < v1; ++q)
        for (size_t l = 0; l < L.layers.size() - size_t(L.mtp_blocks); ++l)
            copy_row(state + L.ring_row(int(l), q % W), state + L.layers[l].ring_backup_offset + (q - v0) * D, D);
    for_each_compressor(L, [&](const CompressorRegion& c) {
        const int64_t gate_backup = c.backup + c.backup_rows * c.width;
        for (int64_t q = from; q < v1; ++q) {
            copy_row(state + c.kv + c.row(q) * c.width, state + c.backup + (q - v0) * c.width, c.width);
            copy_row(state + c.gate + c.row(q) * c.width, state + gate_backup + (q - v0) * c.width, c.width);
        }
        // The chunk's window close (at most one) moved the current window into the previous-window
        // rows; undone when it fell at a rejected position.
        const int64_t close = (v0 / c.ratio + 1) * c.ratio - 1;
        if (c.overlap && close >= from && close < v1) {
            const int64_t prev = L.spec_tokens + 1;
            copy_row(state + c.kv, state + c.backup + prev * c.width, c.ratio * c.width);
            copy_row(state + c.gate, state + gate_backup + prev * c.width, c.ratio * c.width);
        }
    });
    h.verify_start = h.verify_len = 0;
    h.pending_len = int32_t(std::clamp<int64_t>(from - h.pending_start, 0, h.pending_len));
    set_spec_header(L, state, h);
    return Status::ok();
}

int32_t spec_pending_token(const KvLayout& L, const float* state, int64_t i) {
    return int32_t(state[L.spec.pending_tokens_offset + i]);
}

void set_spec_pending_token(const KvLayout& L, float* state, int64_t i, int32_t token) {
    state[L.spec.pending_tokens_offset + i] = float(token);
}

std::span<float> spec_pending_streams(const KvLayout& L, float* state, int64_t m, int64_t stream_elems) {
    return {state + L.spec.pending_streams_offset, size_t(m * stream_elems)};
}

}  // namespace dsv4
