// Gated-pooling KV compressor state machine (spec §2.6, §3.3-3.4), one token at a time so that
// prefill, chunked prefill and decode share one code path and give identical entries.
//
// State layout (f32, reset by compressor_reset at sequence start):
//   overlap (CSA, kappa 2): kv/gate [2r, 2c]; rows 0..r-1 = previous window (A-halves read),
//                           rows r..2r-1 = current window (B-halves read).
//   plain   (HCA, kappa 1): kv/gate [r, c]; row = pos mod r.
// Gate rows hold wgate.x + ape[pos mod r].
#pragma once

#include <cstdint>

namespace dsv4::ref {

struct CompressorShape {
    int ratio = 0;  // r
    int dim = 0;    // c
    bool overlap = false;
    int kappa() const { return overlap ? 2 : 1; }
    int64_t state_rows() const { return int64_t(kappa()) * ratio; }
    int64_t state_width() const { return int64_t(kappa()) * dim; }
};

// Zero kv, -inf gates (empty previous window for entry 0).
void compressor_reset(const CompressorShape& s, float* kv_state, float* gate_state);

// Stores token `pos`'s projected kv[kappa*c] and gate[kappa*c] (ape already added). If pos closes a
// window ((pos+1) % r == 0), writes the pooled entry (before norm/RoPE) to entry[c] and returns
// true. CSA then shifts the current window into the previous-window rows.
bool compressor_push(const CompressorShape& s, float* kv_state, float* gate_state, const float* kv, const float* gate,
                     int64_t pos, float* entry);

}  // namespace dsv4::ref
