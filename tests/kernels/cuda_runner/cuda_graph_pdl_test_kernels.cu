// Kernels and launches of the hand-built graph (cuda_graph_pdl_test_kernels.h).
#include "tests/kernels/cuda_runner/cuda_graph_pdl_test_kernels.h"

#include "kernels/cuda/common/pdl.cuh"

// Outside namespace dsv4: the rewrite must treat it as a library kernel (no programmatic edge into it).
namespace other_library {
namespace dev = dsv4::cuda::dev;
__global__ void pdl_graph_foreign(float* x, int n) {
    dev::pdl_begin();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 0.5f + 3.0f;
}
}  // namespace other_library

namespace dsv4::test_pdl {
namespace {

namespace dev = dsv4::cuda::dev;

__device__ __forceinline__ int index() { return blockIdx.x * blockDim.x + threadIdx.x; }

__global__ void pdl_graph_k1(float* x, int n) {
    dev::pdl_begin();
    if (index() < n) x[index()] = x[index()] * 1.5f + 1.0f;
}
__global__ void pdl_graph_k2(float* x, const float* z, int n) {
    dev::pdl_begin();
    if (index() < n) x[index()] = x[index()] * 2.0f + z[index()] + 1.0f;
}
__global__ void pdl_graph_k3(float* x, int n) {
    dev::pdl_begin();
    if (index() < n) x[index()] = x[index()] - 7.0f;
}
__global__ void pdl_graph_k4(const float* x, float* y, int n) {
    dev::pdl_begin();
    if (index() < n) y[index()] = x[index()] * 3.0f;
}
__global__ void pdl_graph_k5(float* x, const float* y, int n) {
    dev::pdl_begin();
    if (index() < n) x[index()] = x[index()] + y[index()];
}
__global__ void pdl_graph_k6(float* x, int n) {
    dev::pdl_begin();
    if (index() < n) x[index()] = x[index()] * 1.25f;
}
// Launched with clusters of 2 CTAs.
__global__ void pdl_graph_k7_cluster(float* x, int n) {
    dev::pdl_begin();
    if (index() < n) x[index()] = x[index()] + 0.5f;
}
__global__ void pdl_graph_k8(float* x, int n) {
    dev::pdl_begin();
    if (index() < n) x[index()] = x[index()] * 0.75f - 2.0f;
}

}  // namespace

cudaError_t launch_all(cudaStream_t s1, cudaStream_t s2, cudaEvent_t fork, cudaEvent_t join, const Buffers& b) {
    pdl_graph_k1<<<kBlocks, kThreads, 0, s1>>>(b.x, kN);
    cudaMemsetAsync(b.z, 0, sizeof(float) * kN, s1);
    pdl_graph_k2<<<kBlocks, kThreads, 0, s1>>>(b.x, b.z, kN);
    pdl_graph_k3<<<kBlocks, kThreads, 0, s1>>>(b.x, kN);
    cudaEventRecord(fork, s1);
    cudaStreamWaitEvent(s2, fork, 0);
    pdl_graph_k4<<<kBlocks, kThreads, 0, s2>>>(b.x, b.y, kN);
    cudaEventRecord(join, s2);
    cudaStreamWaitEvent(s1, join, 0);
    pdl_graph_k5<<<kBlocks, kThreads, 0, s1>>>(b.x, b.y, kN);
    other_library::pdl_graph_foreign<<<kBlocks, kThreads, 0, s1>>>(b.x, kN);
    pdl_graph_k6<<<kBlocks, kThreads, 0, s1>>>(b.x, kN);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(kBlocks);
    cfg.blockDim = dim3(kThreads);
    cfg.stream = s1;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    float* x = b.x;
    int n = kN;
    cudaLaunchKernelEx(&cfg, pdl_graph_k7_cluster, x, n);
    pdl_graph_k8<<<kBlocks, kThreads, 0, s1>>>(b.x, kN);
    return cudaGetLastError();
}

}  // namespace dsv4::test_pdl
