// The host ports of the seeded GPU fills (model/synth_host.h) against
// kernels/cuda/synth on small shapes, including slices (`first`): bitwise equal.
#include <cstring>

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
    EXPECT_TRUE(same_bits(hf, on_gpu<float>(n, [&](float* p) {
                              return cuda::synth::fill_f32(p, n, seed, -0.3f, 0.7f, 0);
                          })));
    std::vector<uint16_t> hb(n);
    synth_host::fill_bf16(hb, seed, 0.05f);
    EXPECT_TRUE(same_bits(hb, on_gpu<uint16_t>(n, [&](uint16_t* p) {
                              return cuda::synth::fill_bf16(p, n, seed, 0.05f, 0);
                          })));
    std::vector<uint8_t> he(n);
    synth_host::fill_e4m3(he, seed);
    EXPECT_TRUE(same_bits(
        he, on_gpu<uint8_t>(n, [&](uint8_t* p) { return cuda::synth::fill_e4m3(p, n, seed, 0); })));
    std::vector<uint8_t> hs(n);
    synth_host::fill_ue8m0(hs, seed, 118, 119, 777);
    EXPECT_TRUE(same_bits(hs, on_gpu<uint8_t>(n, [&](uint8_t* p) {
                              return cuda::synth::fill_ue8m0(p, n, seed, 118, 119, 0, 777);
                          })));
    synth_host::fill_ue8m0(hs, seed, 100, 102, 5);  // a range that is not a power of two
    EXPECT_TRUE(same_bits(hs, on_gpu<uint8_t>(n, [&](uint8_t* p) {
                              return cuda::synth::fill_ue8m0(p, n, seed, 100, 102, 0, 5);
                          })));
    std::vector<uint8_t> hm(n);
    synth_host::fill_mxfp4(hm, seed, 4096);
    EXPECT_TRUE(same_bits(hm, on_gpu<uint8_t>(n, [&](uint8_t* p) {
                              return cuda::synth::fill_mxfp4(p, n, seed, 0, 4096);
                          })));
    const int64_t V = 1000;
    std::vector<int32_t> ht(size_t(V * 6));
    synth_host::fill_tid2eid(ht, V, 6, 64, seed);
    EXPECT_TRUE(same_bits(ht, on_gpu<int32_t>(ht.size(), [&](int32_t* p) {
                              return cuda::synth::fill_tid2eid(p, V, 6, 64, seed, 0);
                          })));
}

}  // namespace
}  // namespace dsv4
