// The one set of helpers of the CUDA tests (op tests and runner tests alike): the GPU skip, device
// buffers and host <-> device copies, host bf16 codecs and seeded data, error metrics against an fp64
// reference, and check_variants, the loop every op test runs over its registered kernel variants.
// Runner-level helpers (sequences driven through a ModelRunner) are in cuda_test_util.h.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace dsv4 {

inline bool have_gpu() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
// Skips the current test (GTEST_SKIP) when no usable CUDA device is present.
#define SKIP_WITHOUT_GPU() \
    if (!::dsv4::have_gpu()) GTEST_SKIP() << "no CUDA device"
#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

// Device copy of v (at least one element allocated); the caller frees it with cudaFree.
template <class T>
T* dev(const std::vector<T>& v) {
    T* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, sizeof(T) * std::max<size_t>(v.size(), 1)), cudaSuccess);
    if (!v.empty()) {
        EXPECT_EQ(cudaMemcpy(p, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    return p;
}

// Host copy of n elements at device pointer p.
template <class T>
std::vector<T> host(const T* p, size_t n) {
    std::vector<T> v(n);
    if (n) {
        EXPECT_EQ(cudaMemcpy(v.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return v;
}

// A device buffer of `count` T freed with the test (the RAII form of dev/host).
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
    // Poison (all bits set: NaN in f32 and bf16): every output element must be written by the kernel.
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

// n token ids in [0, vocab) from mt19937(seed).
inline std::vector<int32_t> test_token_ids(int n, int64_t vocab, uint32_t seed) {
    std::mt19937 g(seed);
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = int32_t(g() % uint32_t(vocab));
    return v;
}

// Largest |a[i] - b[i]| (expects equal sizes). Equal values (infinities included) and NaN on both
// sides count 0; a NaN on one side makes the result NaN, which fails every `<` bound.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
        const double d = std::fabs(double(a[i]) - double(b[i]));
        if (!(d <= m)) m = d;  // a NaN d sticks
    }
    return m;
}

// Index of the first largest element.
inline size_t argmax_index(const std::vector<float>& v) {
    return size_t(std::max_element(v.begin(), v.end()) - v.begin());
}
// The same as a token id.
inline int32_t argmax_i32(const std::vector<float>& v) { return int32_t(argmax_index(v)); }

// Error of a kernel's output against its fp64 reference: relative L2 over the elements that are not
// NaN on both sides, the largest absolute difference, and the count of NaN on one side only.
struct ErrStats {
    double rel_l2 = 0, max_abs = 0;
    int64_t nan_mismatch = 0;
};
inline ErrStats compare(const std::vector<float>& got, const std::vector<double>& ref) {
    ErrStats s;
    EXPECT_EQ(got.size(), ref.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
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

// ---- check_variants: one op case run over every registered variant ---------------------------
// In the style of llama.cpp's test-backend-ops: a case builds its inputs and fp64 reference once;
// the harness runs every variant of the op's table that is legal for the case, each on poisoned
// outputs, compares it with the reference within the case's tolerance, and launches it again to
// check that it is deterministic (bit-identical: the decode kernels use no atomics).

// An op's variant table, as the kernels register it (name and legality per index).
struct VariantTable {
    int count = 0;
    std::function<std::string(int)> name;
    std::function<bool(int)> legal;  // may this variant run the case? (null: every variant)
};

// Bounds on ErrStats: rel L2 and max abs (infinity: unchecked); NaN mismatches always fail.
struct Tolerance {
    double rel_l2 = 1e-2;
    double max_abs = INFINITY;
};

// What the harness needs of one case.
struct OpCase {
    std::vector<double> ref;                   // fp64 reference of the output
    Tolerance tol;                             //
    std::function<void()> poison;              // poisons every output buffer
    std::function<Status(int variant)> run;    // launches the variant (synchronously or on stream 0)
    std::function<std::vector<float>()> read;  // the output as f32, in ref's order
    bool deterministic = true;                 // check a second launch bit for bit
    // Exact properties of variant v's output beyond the tolerance (zero rows written as zeros, bit
    // equality with another kernel); optional.
    std::function<void(int variant, const std::vector<float>&)> check;
};

// Runs `c` for every legal variant of `t` (EXPECT/ASSERT failures name the variant). Returns the
// number of variants that ran, so a case that no variant takes fails visibly in the caller.
inline int check_variants(const VariantTable& t, const OpCase& c, const std::string& label = "") {
    int ran = 0;
    for (int v = 0; v < t.count; ++v) {
        if (t.legal && !t.legal(v)) continue;
        const std::string name = t.name(v);
        SCOPED_TRACE(label.empty() ? name : label + " " + name);
        c.poison();
        const Status st = c.run(v);
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        if (!st.is_ok()) continue;
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<float> got = c.read();
        const ErrStats e = compare(got, c.ref);
        EXPECT_EQ(e.nan_mismatch, 0);
        EXPECT_LT(e.rel_l2, c.tol.rel_l2);
        EXPECT_LT(e.max_abs, c.tol.max_abs);
        if (c.check) c.check(v, got);
        ++ran;
        if (!c.deterministic) continue;
        EXPECT_TRUE(c.run(v).is_ok());
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<float> again = c.read();
        EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << "not deterministic";
    }
    return ran;
}

}  // namespace dsv4
