// Core attention over an explicit list of K=V rows with a per-head sink (spec §2.4 "Core
// attention"): o_h = sum_s exp(z_hs - M) k_s / (sum_s exp(z_hs - M) + exp(sink_h - M)),
// z_hs = (q_h . k_s) * scale. One shared K=V row serves every head (MQA).
#pragma once

#include <cstdint>

namespace dsv4::ref {

// q [H, D]; rows: n_rows pointers to K=V rows [D]; sink [H] f32; out [H, D].
// With n_rows == 0 the output is zeros (the sink absorbs all mass), never NaN (B04).
void sink_attention(const float* q, const float* const* rows, int64_t n_rows, const float* sink, int H, int D,
                    float scale, float* out);

}  // namespace dsv4::ref
