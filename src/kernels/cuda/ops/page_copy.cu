// Whole-page copies inside the pool (see page_copy.h).
#include "kernels/cuda/ops/page_copy.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kCtasPerPage = 8;

__global__ void __launch_bounds__(kThreads)
    copy_pages_kernel(uint32_t* pool, int64_t page_words, const int32_t* pairs) {
    dev::pdl_begin();
    const int64_t src = int64_t(pairs[2 * blockIdx.x]) * page_words;
    const int64_t dst = int64_t(pairs[2 * blockIdx.x + 1]) * page_words;
    for (int64_t i = int64_t(blockIdx.y) * kThreads + threadIdx.x; i < page_words;
         i += int64_t(kCtasPerPage) * kThreads)
        pool[dst + i] = pool[src + i];
}

}  // namespace

cudaError_t copy_pages(uint32_t* pool, int64_t page_words, const int32_t* pairs, int n, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    copy_pages_kernel<<<dim3(unsigned(n), kCtasPerPage), kThreads, 0, st>>>(pool, page_words, pairs);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
