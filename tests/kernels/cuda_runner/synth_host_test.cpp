// The host ports of the seeded GPU fills (model/synth_host.h) against
// kernels/cuda/synth on small shapes, including slices (`first`): bitwise equal.
#include <cstring>
#include <random>

#include "core/dtype.h"

#include "kernels/cuda/synth/synth.h"
#include "model/synth_host.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"

namespace dsv4 {
namespace {

template <class T, class F>
std::vector<T> on_gpu(size_t n, F fill) {
    T* d = dev(std::vector<T>(n));
    EXPECT_EQ(fill(d), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto h = host(d, n);
    cudaFree(d);
    return h;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(SynthHost, BitExactWithGpuFills) {
    SKIP_WITHOUT_GPU();
    const size_t n = 100003;
    const uint64_t seed = 12345;
    std::vector<float> hf(n);
    synth_host::fill_f32(hf, seed, -0.3f, 0.7f);
    EXPECT_TRUE(
        same_bits(hf, on_gpu<float>(n, [&](float* p) { return cuda::synth::fill_f32(p, n, seed, -0.3f, 0.7f, 0); })));
    std::vector<uint16_t> hb(n);
    synth_host::fill_bf16(hb, seed, 0.05f);
    EXPECT_TRUE(
        same_bits(hb, on_gpu<uint16_t>(n, [&](uint16_t* p) { return cuda::synth::fill_bf16(p, n, seed, 0.05f, 0); })));
    std::vector<uint8_t> he(n);
    synth_host::fill_e4m3(he, seed);
    EXPECT_TRUE(same_bits(he, on_gpu<uint8_t>(n, [&](uint8_t* p) { return cuda::synth::fill_e4m3(p, n, seed, 0); })));
    std::vector<uint8_t> hs(n);
    synth_host::fill_ue8m0(hs, seed, 118, 119, 777);
    EXPECT_TRUE(same_bits(
        hs, on_gpu<uint8_t>(n, [&](uint8_t* p) { return cuda::synth::fill_ue8m0(p, n, seed, 118, 119, 0, 777); })));
    synth_host::fill_ue8m0(hs, seed, 100, 102, 5);  // a range that is not a power of two
    EXPECT_TRUE(same_bits(
        hs, on_gpu<uint8_t>(n, [&](uint8_t* p) { return cuda::synth::fill_ue8m0(p, n, seed, 100, 102, 0, 5); })));
    std::vector<uint8_t> hm(n);
    synth_host::fill_mxfp4(hm, seed, 4096);
    EXPECT_TRUE(
        same_bits(hm, on_gpu<uint8_t>(n, [&](uint8_t* p) { return cuda::synth::fill_mxfp4(p, n, seed, 0, 4096); })));
    const int64_t V = 1000;
    std::vector<int32_t> ht(size_t(V * 6));
    synth_host::fill_tid2eid(ht, V, 6, 64, seed);
    EXPECT_TRUE(same_bits(
        ht, on_gpu<int32_t>(ht.size(), [&](int32_t* p) { return cuda::synth::fill_tid2eid(p, V, 6, 64, seed, 0); })));
}

// The synthetic runner's bf16 rounding of its norms (SyntheticWeightsOptions::bf16_norms) against
// the host's (what the checkpoint writer stores): random bit patterns of finite floats, ties
// (low half 0x8000, both parities) and the norms' range.
TEST(SynthHost, GpuBf16RoundingMatchesHost) {
    SKIP_WITHOUT_GPU();
    std::mt19937 g(5);
    std::vector<float> v;
    for (int i = 0; i < 60000; ++i) {
        uint32_t u = g();
        if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu;  // no inf / NaN
        if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;         // exact ties
        v.push_back(f32_from_bits(u));
        v.push_back(0.8f + 0.4f * float(g() >> 8) / 16777216.0f);
    }
    float* d = dev(v);
    ASSERT_EQ(cuda::synth::round_to_bf16(d, int64_t(v.size()), 0), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = host(d, v.size());
    cudaFree(d);
    std::vector<float> want(v.size());
    for (size_t i = 0; i < v.size(); ++i) want[i] = round_bf16(v[i]);
    EXPECT_TRUE(same_bits(got, want));
    EXPECT_FALSE(same_bits(got, v));  // it rounds
}

}  // namespace
}  // namespace dsv4
