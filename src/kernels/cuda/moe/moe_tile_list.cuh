// The grouped expert GEMMs' work list (moe_grouped_sm90.cu, moe_wgmma_sm90.cu): one entry per
// (expert, tile of mt rows) in expert order, written on the device so the launch needs no host
// sync. Included by each translation unit that launches a grouped GEMM (internal linkage).
#pragma once

#include <cstdint>

namespace dsv4::cuda::sm90 {
namespace {

constexpr int kExpertBits = 11;  // tile_list entry = tile index << 11 | expert (experts <= 1024)

__global__ void __launch_bounds__(1024) tile_list_kernel(const int32_t* count, int n_experts, int mt,
                                                         int32_t* list, int32_t* n_tiles) {
    __shared__ int s[1024];
    const int e = threadIdx.x;
    const int nt = e < n_experts ? (count[e] + mt - 1) / mt : 0;
    s[e] = nt;
    __syncthreads();
    for (int o = 1; o < 1024; o <<= 1) {  // inclusive scan
        const int v = e >= o ? s[e - o] : 0;
        __syncthreads();
        s[e] += v;
        __syncthreads();
    }
    const int start = s[e] - nt;
    for (int i = 0; i < nt; ++i) list[start + i] = (i << kExpertBits) | e;
    if (e == 1023) *n_tiles = s[1023];
}

}  // namespace
}  // namespace dsv4::cuda::sm90
