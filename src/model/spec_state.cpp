// The speculative-decoding area of a sequence's state (see spec_state.h).
#include "model/spec_state.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace dsv4 {
namespace {
// Host state access for the shared region code: element e of a contiguous state area.
struct HostState {
    float* s;
    float& operator()(int64_t e) { return s[e]; }
};
}  // namespace

std::vector<SpecRegion> spec_regions(const KvLayout& L) {
    std::vector<SpecRegion> out;
    if (L.spec_tokens <= 0) return out;
    const int64_t W = L.ring_rows, D = L.row_words_main;
    for (size_t l = 0; l < L.layers.size() - size_t(L.mtp_blocks); ++l) {
        const LayerStateLayout& s = L.layers[l];
        out.push_back(SpecRegion{s.ring_offset, s.ring_backup_offset, int32_t(D), int32_t(W), 0, 0});
    }
    for (size_t l = 0; l < L.layers.size() - size_t(L.mtp_blocks); ++l) {
        const LayerStateLayout& s = L.layers[l];
        if (s.ratio == 0) continue;
        const bool csa = s.idx_kv_offset >= 0;
        auto add = [&](int64_t kv, int64_t gate, int64_t backup, int64_t width) {
            const int32_t r = int32_t(s.ratio), ov = csa ? r : 0;
            out.push_back(SpecRegion{kv, backup, int32_t(width), r, ov, ov});
            out.push_back(SpecRegion{gate, backup + s.spec_backup_rows * width, int32_t(width), r, ov, ov});
        };
        add(s.comp_kv_offset, s.comp_gate_offset, s.comp_backup_offset, (csa ? 2 : 1) * L.row_dim_main);
        if (csa) add(s.idx_kv_offset, s.idx_gate_offset, s.idx_backup_offset, 2 * L.row_dim_index);
    }
    return out;
}

SpecHeader spec_header(const KvLayout& L, const float* state) {
    SpecHeader h;
    static_assert(std::is_trivially_copyable_v<SpecHeader>);  // its default member values make it non-trivial
    std::memcpy(static_cast<void*>(&h), state + L.spec.header_offset, sizeof h);
    return h;
}

void set_spec_header(const KvLayout& L, float* state, const SpecHeader& h) {
    std::memcpy(state + L.spec.header_offset, &h, sizeof h);
}

void spec_backup(const KvLayout& L, float* state, int64_t start, int64_t n) {
    HostState at{state};
    for (const SpecRegion& r : spec_regions(L)) spec_region_backup(at, r, L.spec_tokens, start, n);
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
    HostState at{state};
    for (const SpecRegion& r : spec_regions(L)) spec_region_rollback(at, r, L.spec_tokens, v0, h.verify_len, from);
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
