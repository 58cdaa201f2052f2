// Load-time repack of MXFP4 expert codes into the pair-rotated layout (core/mxfp4_pair_rotated.h)
// read by the "bitdqpk" expert variants. Memory-bound elementwise pass, in place: each thread
// rewrites 32-bit words (4 bytes of codes, 8 values); the scale bytes are untouched.
#include <cstddef>

#include "core/mxfp4_pair_rotated.h"
#include "kernels/cuda/moe/moe_sm90.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::sm90 {
namespace {

__global__ void repack_kernel(uint32_t* w, size_t n) {
    dev::pdl_begin();
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        w[i] = mxfp4_pk::repack_word(w[i]);
}

}  // namespace

cudaError_t moe_weight_repack_run(uint32_t* w, size_t n_words, cudaStream_t stream) {
    if (n_words == 0) return cudaSuccess;
    const size_t blocks = (n_words + 255) / 256;
    repack_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(w, n_words);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda::sm90
