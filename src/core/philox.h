// Philox4x32-10 counter-based RNG (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11). Stateless: the same (seed, counter) gives the same numbers on CPU and GPU, which lets
// synthetic weights be generated identically on both sides and per-request sampling be
// independent of batch composition.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace dsv4 {

struct Philox4x32 {
    // Returns 4 random 32-bit words for (key = seed, counter = (c0, c1, c2, c3)).
    static DSV4_HD inline void generate(uint64_t seed, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                        uint32_t out[4]) {
        uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
        uint32_t x0 = c0, x1 = c1, x2 = c2, x3 = c3;
        for (int r = 0; r < 10; ++r) {
            const uint64_t p0 = uint64_t(0xD2511F53u) * x0;
            const uint64_t p1 = uint64_t(0xCD9E8D57u) * x2;
            const uint32_t y0 = uint32_t(p1 >> 32) ^ x1 ^ k0;
            const uint32_t y1 = uint32_t(p1);
            const uint32_t y2 = uint32_t(p0 >> 32) ^ x3 ^ k1;
            const uint32_t y3 = uint32_t(p0);
            x0 = y0;
            x1 = y1;
            x2 = y2;
            x3 = y3;
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        out[0] = x0;
        out[1] = x1;
        out[2] = x2;
        out[3] = x3;
    }
};

// Uniform float in (0, 1] from a 32-bit word (24 bits of mantissa).
DSV4_HD inline float u32_to_unit(uint32_t x) { return (float(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

// Element i of a seeded stream: uniform in (0, 1].
DSV4_HD inline float philox_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
    uint32_t out[4];
    Philox4x32::generate(seed, uint32_t(i >> 2), uint32_t(i >> 34), uint32_t(stream), uint32_t(stream >> 32), out);
    return u32_to_unit(out[i & 3]);
}

// Element i of a seeded stream: standard normal (Box-Muller on a pair of words).
DSV4_HD inline float philox_normal(uint64_t seed, uint64_t stream, uint64_t i) {
    uint32_t out[4];
    Philox4x32::generate(seed, uint32_t(i >> 1), uint32_t(i >> 33), uint32_t(stream),
                         uint32_t(stream >> 32) ^ 0x5bd1e995u, out);
    const float u1 = u32_to_unit(out[0]);
    const float u2 = u32_to_unit(out[1]);
    const float r = sqrtf(-2.0f * logf(u1));
    const float t = 6.283185307179586f * u2;
    return (i & 1) ? r * sinf(t) : r * cosf(t);
}

}  // namespace dsv4
