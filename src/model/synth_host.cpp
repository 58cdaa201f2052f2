// Host ports of the GPU fills (see synth_host.h). The loops are plain element-wise code; GCC and
// clang vectorize them in the x86-64-v4 (AVX-512, 64-bit lane multiplies) and v3 clones, chosen at
// load time by the CPU (target_clones), about 5x the scalar rate on an AVX-512 CPU. Integer mixing
// and one multiply or fma per element round exactly, so every clone gives the same bits.
#include "model/synth_host.h"

#include <cmath>

#include "core/dtype.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV4_FILL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DSV4_FILL_CLONES
#endif

namespace dsv4::synth_host {

namespace {
// The generator of kernels/cuda/synth/synth.cu: splitmix64 of (seed, index).
inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
inline uint64_t rnd(uint64_t seed, uint64_t i) {
    return mix64(seed * 0x9e3779b97f4a7c15ull + mix64(i + 0x632be59bd9b4e019ull));
}
inline float unit(uint64_t r) { return float(r >> 40) * (1.0f / 16777216.0f); }
inline uint8_t e4m3_code(uint64_t r) { return uint8_t((r & 0x80u) | ((5u + ((r >> 8) & 3u)) << 3) | ((r >> 16) & 7u)); }
}  // namespace

DSV4_FILL_CLONES void fill_f32(std::span<float> p, uint64_t seed, float lo, float hi, int64_t first) {
    // nvcc contracts lo + (hi - lo) * u into one fma; the host does the same explicitly.
    float* out = p.data();
    const size_t n = p.size();
    for (size_t i = 0; i < n; ++i) out[i] = std::fma(hi - lo, unit(rnd(seed, uint64_t(first) + i)), lo);
}
DSV4_FILL_CLONES void fill_bf16(std::span<uint16_t> p, uint64_t seed, float amp, int64_t first) {
    // 2u - 1 is exact (u has 24 bits), so the one rounding is the multiply, whatever the contraction.
    uint16_t* out = p.data();
    const size_t n = p.size();
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(amp * (2.0f * unit(rnd(seed, uint64_t(first) + i)) - 1.0f));
}
DSV4_FILL_CLONES void fill_e4m3(std::span<uint8_t> p, uint64_t seed, int64_t first) {
    uint8_t* out = p.data();
    const size_t n = p.size();
    for (size_t i = 0; i < n; ++i) out[i] = e4m3_code(rnd(seed, uint64_t(first) + i));
}
DSV4_FILL_CLONES void fill_ue8m0(std::span<uint8_t> p, uint64_t seed, int lo, int hi, int64_t first) {
    uint8_t* out = p.data();
    const size_t n = p.size();
    const uint64_t m = uint64_t(hi - lo + 1);
    if ((m & (m - 1)) == 0) {  // a power of two (the synthetic scales span 2 values): % as a mask, vectorized
        for (size_t i = 0; i < n; ++i) out[i] = uint8_t(lo + int(rnd(seed, uint64_t(first) + i) & (m - 1)));
        return;
    }
    for (size_t i = 0; i < n; ++i) out[i] = uint8_t(lo + int(rnd(seed, uint64_t(first) + i) % m));
}
DSV4_FILL_CLONES void fill_mxfp4(std::span<uint8_t> p, uint64_t seed, int64_t first) {
    uint8_t* out = p.data();
    const size_t n = p.size();
    for (size_t i = 0; i < n; ++i) out[i] = uint8_t(rnd(seed, uint64_t(first) + i) >> 24);
}
void fill_tid2eid(std::span<int32_t> p, int64_t V, int k, int hot, uint64_t seed) {
    const bool pow2 = (hot & (hot - 1)) == 0;
    for (int64_t v = 0; v < V; ++v) {
        const uint64_t r = rnd(seed, uint64_t(v));
        const int start = int(r % uint64_t(hot));
        const int step = pow2 && hot > 1 ? int(((r >> 32) % uint64_t(hot)) | 1u) : 1;
        for (int j = 0; j < k; ++j) p[size_t(v * k + j)] = int32_t((start + int64_t(j) * step) % hot);
    }
}

}  // namespace dsv4::synth_host
