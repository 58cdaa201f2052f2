// The hand-built graph of cuda_graph_pdl_test.cpp: kernels in and outside namespace dsv4, a memset,
// a fork and join over two streams and a thread-block-cluster launch (kept apart from the test so
// that nvcc does not compile gtest and the runner's headers).
#pragma once

#include <cuda_runtime.h>

namespace dsv4::test_pdl {

constexpr int kN = 1 << 20;  // many waves of CTAs: an early start would show
constexpr int kThreads = 256;
constexpr int kBlocks = kN / kThreads;

// Device buffers of kN floats each.
struct Buffers {
    float *x = nullptr, *y = nullptr, *z = nullptr;
};

// The launches, in stream order (k4 on a second stream, joined back before k5):
// k1 -> memset(z) -> k2 -> k3 -> {k4 on s2} -> k5 (join of k3 and k4) -> foreign -> k6 -> k7 (cluster) -> k8.
// Each step reads what the one before it wrote, so a step that ran early would change x.
// Returns the first launch error (cudaGetLastError).
cudaError_t launch_all(cudaStream_t s1, cudaStream_t s2, cudaEvent_t fork, cudaEvent_t join, const Buffers& b);

}  // namespace dsv4::test_pdl
