// Sampled tokens between steps (see step_tokens.h).
#include "kernels/cuda/ops/step_tokens.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {
namespace {

__global__ void scatter_sampled_kernel(const SampleRowArgs* args, const SampleRowOut* out, int n, int32_t* ids) {
    dev::pdl_begin();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ids[args[i].row] = out[i].token;
}

__global__ void fill_pending_kernel(int32_t* tokens, const int32_t* dst, const int32_t* src, int n,
                                    const int32_t* ids) {
    dev::pdl_begin();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) tokens[dst[i]] = ids[src[i]];
}

}  // namespace

cudaError_t scatter_sampled_tokens(const SampleRowArgs* args, const SampleRowOut* out, int n, int32_t* ids,
                                   cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    scatter_sampled_kernel<<<(n + 255) / 256, 256, 0, st>>>(args, out, n, ids);
    return cudaGetLastError();
}

cudaError_t fill_pending_tokens(int32_t* tokens, const int32_t* dst, const int32_t* src, int n, const int32_t* ids,
                                cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    fill_pending_kernel<<<(n + 255) / 256, 256, 0, st>>>(tokens, dst, src, n, ids);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
