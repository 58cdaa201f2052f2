// Helpers shared by the CUDA runner/op tests: skip without a GPU, host <-> device copies.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "runtime/cuda_runner.h"

// Skips the current test (GTEST_SKIP) when no usable CUDA device is present.
#define SKIP_WITHOUT_GPU() \
    if (!::dsv4::cuda_device_available()) GTEST_SKIP() << "no CUDA device"

namespace dsv4 {

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

}  // namespace dsv4
