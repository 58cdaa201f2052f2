// The host fills (model/synth_host.h) run as the CPU's widest clone (AVX-512 or AVX2 where present)
// against a plain scalar statement of the same formulas (splitmix64 of (seed, index), as
// kernels/cuda/synth/synth.cu): bitwise equal, including offsets (`first`) and odd lengths, so a
// vectorized clone cannot drift from the GPU's values on a machine without a GPU.
#include "model/synth_host.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"

namespace dsv4 {
namespace {

uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
uint64_t rnd(uint64_t seed, uint64_t i) {
    return mix64(seed * 0x9e3779b97f4a7c15ull + mix64(i + 0x632be59bd9b4e019ull));
}
float unit(uint64_t r) { return float(r >> 40) * (1.0f / 16777216.0f); }

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(SynthHostCpu, FillsEqualTheScalarFormulas) {
    const uint64_t seed = 777;
    for (const size_t n : {size_t(1), size_t(63), size_t(4099)}) {
        for (const int64_t first : {int64_t(0), int64_t(13), int64_t(1) << 33}) {
            std::vector<float> f(n), fw(n);
            synth_host::fill_f32(f, seed, -0.3f, 0.7f, first);
            for (size_t i = 0; i < n; ++i) fw[i] = std::fma(0.7f - -0.3f, unit(rnd(seed, uint64_t(first) + i)), -0.3f);
            EXPECT_TRUE(same_bits(f, fw)) << "f32 n " << n << " first " << first;
            std::vector<uint16_t> b(n), bw(n);
            synth_host::fill_bf16(b, seed, 0.05f, first);
            for (size_t i = 0; i < n; ++i)
                bw[i] = f32_to_bf16(0.05f * (2.0f * unit(rnd(seed, uint64_t(first) + i)) - 1.0f));
            EXPECT_TRUE(same_bits(b, bw)) << "bf16 n " << n << " first " << first;
            std::vector<uint8_t> e(n), ew(n), m(n), mw(n), s2(n), s2w(n), s3(n), s3w(n);
            synth_host::fill_e4m3(e, seed, first);
            synth_host::fill_mxfp4(m, seed, first);
            synth_host::fill_ue8m0(s2, seed, 118, 119, first);
            synth_host::fill_ue8m0(s3, seed, 100, 102, first);
            for (size_t i = 0; i < n; ++i) {
                const uint64_t r = rnd(seed, uint64_t(first) + i);
                ew[i] = uint8_t((r & 0x80u) | ((5u + ((r >> 8) & 3u)) << 3) | ((r >> 16) & 7u));
                mw[i] = uint8_t(r >> 24);
                s2w[i] = uint8_t(118 + int(r % 2));
                s3w[i] = uint8_t(100 + int(r % 3));
            }
            EXPECT_TRUE(same_bits(e, ew)) << "e4m3 n " << n << " first " << first;
            EXPECT_TRUE(same_bits(m, mw)) << "mxfp4 n " << n << " first " << first;
            EXPECT_TRUE(same_bits(s2, s2w)) << "ue8m0 [118, 119] n " << n << " first " << first;
            EXPECT_TRUE(same_bits(s3, s3w)) << "ue8m0 [100, 102] n " << n << " first " << first;
        }
    }
}

}  // namespace
}  // namespace dsv4
