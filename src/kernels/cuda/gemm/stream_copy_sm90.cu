// Grid-stride 16-byte copy, 4 loads in flight per thread. Memory-bound by construction: it is
// the measured HBM ceiling for the decode benchmarks.
#include "kernels/cuda/gemm/stream_copy.h"

namespace dsv4::cuda {
namespace {
__global__ void __launch_bounds__(512) stream_copy_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src,
                                                          size_t n) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = __ldcs(src + i), b = __ldcs(src + i + stride), c = __ldcs(src + i + 2 * stride),
                    d = __ldcs(src + i + 3 * stride);
        __stcs(dst + i, a);
        __stcs(dst + i + stride, b);
        __stcs(dst + i + 2 * stride, c);
        __stcs(dst + i + 3 * stride, d);
    }
    for (; i < n; i += stride) __stcs(dst + i, __ldcs(src + i));
}
}  // namespace

cudaError_t stream_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    int dev = 0, sms = 132;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    stream_copy_kernel<<<sms * 4, 512, 0, stream>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src),
                                                   bytes / 16);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
