#include "kernels/ref/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace dsv4::ref {

void compressor_reset(const CompressorShape& s, float* kv_state, float* gate_state) {
    const int64_t n = s.state_rows() * s.state_width();
    std::fill(kv_state, kv_state + n, 0.0f);
    std::fill(gate_state, gate_state + n, -std::numeric_limits<float>::infinity());
}

bool compressor_push(const CompressorShape& s, float* kv_state, float* gate_state, const float* kv, const float* gate,
                     int64_t pos, float* entry) {
    const int r = s.ratio, c = s.dim;
    const int64_t width = s.state_width();
    const int64_t row = (s.overlap ? r : 0) + pos % r;
    std::memcpy(kv_state + row * width, kv, sizeof(float) * width);
    std::memcpy(gate_state + row * width, gate, sizeof(float) * width);
    if ((pos + 1) % r != 0) return false;

    // Slots: overlap -> previous window's A-halves [0,c) then current window's B-halves [c,2c);
    // plain -> the r rows of the window.
    const int n_slots = s.overlap ? 2 * r : r;
    for (int ch = 0; ch < c; ++ch) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < n_slots; ++j) {
            const int64_t off = int64_t(j) * width + ((s.overlap && j >= r) ? c : 0) + ch;
            mx = std::max(mx, gate_state[off]);
        }
        float den = 0.0f, num = 0.0f;
        for (int j = 0; j < n_slots; ++j) {
            const int64_t off = int64_t(j) * width + ((s.overlap && j >= r) ? c : 0) + ch;
            const float g = gate_state[off];
            const float e = (g == -std::numeric_limits<float>::infinity()) ? 0.0f : std::exp(g - mx);
            den += e;
            num += e * kv_state[off];
        }
        entry[ch] = num / den;
    }
    if (s.overlap) {
        std::memcpy(kv_state, kv_state + int64_t(r) * width, sizeof(float) * r * width);
        std::memcpy(gate_state, gate_state + int64_t(r) * width, sizeof(float) * r * width);
    }
    return true;
}

}  // namespace dsv4::ref
