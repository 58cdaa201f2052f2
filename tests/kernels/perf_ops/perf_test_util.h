// Helpers for the CUDA decode-op tests: device buffers, host bf16/fp8 codecs (core/dtype.h),
// seeded random data, error metrics against an fp64 CPU reference. Tests skip without a GPU.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace dsv4::cuda::test {

inline bool have_gpu() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define DSV4_REQUIRE_GPU() \
    if (!::dsv4::cuda::test::have_gpu()) GTEST_SKIP() << "no CUDA device"
#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

template <typename T>
struct DevBuf {
    T* p = nullptr;
    size_t n = 0;
    explicit DevBuf(size_t count) : n(count) {
        if (cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)) != cudaSuccess) p = nullptr;
    }
    DevBuf(const std::vector<T>& h) : DevBuf(h.size()) { upload(h); }
    ~DevBuf() { cudaFree(p); }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
    void upload(const std::vector<T>& h) { cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice); }
    std::vector<T> download() const {
        std::vector<T> h(n);
        cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
        return h;
    }
    // Poison: every output element must be written by the kernel.
    void poison() { cudaMemset(p, 0xff, n * sizeof(T)); }
};

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint16_t> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
    return o;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
    std::vector<float> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_f32(v[i]);
    return o;
}
// Values exactly representable in bf16 (so host and device see the same inputs).
inline std::vector<float> randn_bf16(std::mt19937& g, size_t n, float sd = 1.0f) {
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = round_bf16(d(g));
    return v;
}

struct ErrStats {
    double rel_l2 = 0, max_abs = 0;
    int64_t nan_mismatch = 0;
};
inline ErrStats compare(const std::vector<float>& got, const std::vector<double>& ref) {
    ErrStats s;
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (std::isnan(got[i]) != std::isnan(ref[i])) {
            ++s.nan_mismatch;
            continue;
        }
        if (std::isnan(ref[i])) continue;
        const double d = double(got[i]) - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        s.max_abs = std::max(s.max_abs, std::abs(d));
    }
    s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    return s;
}

}  // namespace dsv4::cuda::test
