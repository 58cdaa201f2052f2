// What the grouped expert GEMMs (moe_grouped_sm90.cu, moe_wgmma_sm90.cu) share: the work list, one
// entry per (expert, tile of mt rows) in expert order, written on the device so the launch needs no
// host sync; the launch around it; the registry row type. Included by each translation unit that
// launches a grouped GEMM (internal linkage).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe/moe_sm90.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::sm90 {
namespace {

constexpr int kExpertBits = 11;  // tile_list entry = tile index << 11 | expert (experts <= 1024)

// One work-list entry decoded: expert e, the tile's first row t0 among the expert's rows, and how
// many of its mt rows are live (the expert's last tile may be partial).
struct TileEntry {
    int e, t0, live;
};
__device__ __forceinline__ TileEntry tile_entry(const MoeExpertArgs& a, int tile, int mt) {
    const int32_t entry = a.tile_list[tile];
    const int e = entry & ((1 << kExpertBits) - 1);
    const int t0 = (entry >> kExpertBits) * mt;
    return {e, t0, min(mt, a.expert_count[e] - t0)};
}

// The balanced work list (MoeGroupedShape::balanced, ::persistent): expert e's c rows in n = ceil(c /
// nt) tiles of one width w, ceil(c / n) rounded up to 8 (<= nt <= 128, nt a multiple of 8), so the
// padded rows per tile are under 8 plus the rounding instead of up to nt - 1. Entry = tile index << 15
// | (w / 8 - 1) << 11 | expert; every tile has live rows ((n - 1) w <= (n - 1) nt < c).
constexpr int kBalancedWidthShift = kExpertBits, kBalancedTileShift = kExpertBits + 4;
__host__ __device__ constexpr int balanced_width(int c, int nt = 128) {
    const int n = (c + nt - 1) / nt;
    return n == 0 ? 0 : ((c + n - 1) / n + 7) / 8 * 8;
}
struct BalancedEntry {
    int e, t0, live, w;
};
// The fields of a balanced entry; count: its expert's rows (expert_count[e]). Split from the loads
// so that a caller can fetch the entry and the count at different times (moe_wgmma_persist_sm90.cu).
__device__ __forceinline__ int balanced_expert(int32_t entry) { return entry & ((1 << kExpertBits) - 1); }
__device__ __forceinline__ BalancedEntry balanced_decode(int32_t entry, int count) {
    const int w = (((entry >> kBalancedWidthShift) & 15) + 1) * 8;
    const int t0 = (entry >> kBalancedTileShift) * w;
    return {balanced_expert(entry), t0, min(w, count - t0), w};
}
__device__ __forceinline__ BalancedEntry balanced_entry(const MoeExpertArgs& a, int tile) {
    const int32_t entry = a.tile_list[tile];
    return balanced_decode(entry, a.expert_count[balanced_expert(entry)]);
}

// Inclusive scan of s[0 .. 1024) by the 1,024 threads of the block (thread e adds into s[e]).
__device__ __forceinline__ void scan_1024(int* s) {
    const int e = threadIdx.x;
    __syncthreads();
    for (int o = 1; o < 1024; o <<= 1) {
        const int v = e >= o ? s[e - o] : 0;
        __syncthreads();
        s[e] += v;
        __syncthreads();
    }
}

__global__ void __launch_bounds__(1024)
    tile_list_kernel(const int32_t* count, int n_experts, int mt, int32_t* list, int32_t* n_tiles) {
    dev::pdl_begin();
    __shared__ int s[1024];
    const int e = threadIdx.x;
    const int nt = e < n_experts ? (count[e] + mt - 1) / mt : 0;
    s[e] = nt;
    scan_1024(s);
    const int start = s[e] - nt;
    for (int i = 0; i < nt; ++i) list[start + i] = (i << kExpertBits) | e;
    if (e == 1023) *n_tiles = s[1023];
}

// The mixed work lists (MoeGroupedShape::mixed): expert e's rows in 128-row tiles, except a tail of
// at most 64 rows, which goes to list64 as one 64-row tile (entry index in 64-row units). n_tiles[0]
// and n_tiles[1] receive the two lengths.
__global__ void __launch_bounds__(1024)
    tile_list_mixed_kernel(const int32_t* count, int n_experts, int32_t* list128, int32_t* list64, int32_t* n_tiles) {
    dev::pdl_begin();
    __shared__ int s[1024], s64[1024];
    const int e = threadIdx.x;
    const int c = e < n_experts ? count[e] : 0;
    const int tail = c % 128;
    const int n128 = c / 128 + (tail > 64 ? 1 : 0), n64 = tail > 0 && tail <= 64 ? 1 : 0;
    s[e] = n128;
    s64[e] = n64;
    scan_1024(s);
    scan_1024(s64);
    const int start = s[e] - n128;
    for (int i = 0; i < n128; ++i) list128[start + i] = (i << kExpertBits) | e;
    if (n64) list64[s64[e] - 1] = ((2 * (c / 128)) << kExpertBits) | e;
    if (e == 1023) {
        n_tiles[0] = s[1023];
        n_tiles[1] = s64[1023];
    }
}

__global__ void __launch_bounds__(1024)
    tile_list_balanced_kernel(const int32_t* count, int n_experts, int32_t* list, int32_t* n_tiles, int max_w = 128) {
    dev::pdl_begin();
    __shared__ int s[1024];
    const int e = threadIdx.x;
    const int c = e < n_experts ? count[e] : 0;
    const int nt = (c + max_w - 1) / max_w, wcode = c > 0 ? balanced_width(c, max_w) / 8 - 1 : 0;
    s[e] = nt;
    scan_1024(s);
    const int start = s[e] - nt;
    for (int i = 0; i < nt; ++i) list[start + i] = (i << kBalancedTileShift) | (wcode << kBalancedWidthShift) | e;
    if (e == 1023) *n_tiles = s[1023];
}

// Gives kernel k smem bytes of dynamic shared memory, writes a's work list for tiles of mt rows,
// then runs k on (col_blocks, the work list's bound) CTAs of `threads`; CTAs past *n_tiles exit.
inline cudaError_t launch_grouped(void (*k)(MoeExpertArgs), const MoeExpertArgs& a, int mt, int col_blocks, int threads,
                                  int smem, cudaStream_t s) {
    cudaError_t err = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    tile_list_kernel<<<1, 1024, 0, s>>>(a.expert_count, a.n_experts, mt, a.tile_list, a.n_tiles);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const int max_tiles = moe_grouped_max_tiles(a.n_rows, a.n_experts, mt);
    if (max_tiles <= 0) return cudaSuccess;
    k<<<dim3(col_blocks, max_tiles), threads, smem, s>>>(a);
    return cudaGetLastError();
}

// The mixed launch (MoeGroupedShape::mixed): writes both work lists (they share a.tile_list: the
// 64-row list starts after the 128-row list's bound), then runs k128 over the 128-row tiles and k64
// over the tails, each on (col_blocks, its list's bound) CTAs of `threads`; CTAs past their count exit.
// The same output rows as the 128-row form, fewer padded rows.
inline cudaError_t launch_grouped_mixed(void (*k128)(MoeExpertArgs), int smem128, void (*k64)(MoeExpertArgs),
                                        int smem64, const MoeExpertArgs& a, int col_blocks, int threads,
                                        cudaStream_t s) {
    cudaError_t err = cudaFuncSetAttribute(k128, cudaFuncAttributeMaxDynamicSharedMemorySize, smem128);
    if (err == cudaSuccess) err = cudaFuncSetAttribute(k64, cudaFuncAttributeMaxDynamicSharedMemorySize, smem64);
    if (err != cudaSuccess) return err;
    if (a.n_rows <= 0) return cudaSuccess;
    const int cap128 = moe_grouped_mixed_cap128(a.n_rows, a.n_experts);
    MoeExpertArgs b = a;  // the 64-row tails
    b.tile_list = a.tile_list + cap128;
    b.n_tiles = a.n_tiles + 1;
    tile_list_mixed_kernel<<<1, 1024, 0, s>>>(a.expert_count, a.n_experts, a.tile_list, b.tile_list, a.n_tiles);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    if (cap128 > 0) {
        k128<<<dim3(col_blocks, cap128), threads, smem128, s>>>(a);
        if ((err = cudaGetLastError()) != cudaSuccess) return err;
    }
    k64<<<dim3(col_blocks, a.n_experts < a.n_rows ? a.n_experts : a.n_rows), threads, smem64, s>>>(b);
    return cudaGetLastError();
}

// The balanced launch (MoeGroupedShape::balanced): writes the balanced work list, then runs k on
// (col_blocks, its bound: the 128-row tiles' moe_grouped_max_tiles) CTAs; CTAs past *n_tiles exit.
inline cudaError_t launch_grouped_balanced(void (*k)(MoeExpertArgs), const MoeExpertArgs& a, int col_blocks,
                                           int threads, int smem, cudaStream_t s) {
    cudaError_t err = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    tile_list_balanced_kernel<<<1, 1024, 0, s>>>(a.expert_count, a.n_experts, a.tile_list, a.n_tiles);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const int max_tiles = moe_grouped_max_tiles(a.n_rows, a.n_experts, 128);
    if (max_tiles <= 0) return cudaSuccess;
    k<<<dim3(col_blocks, max_tiles), threads, smem, s>>>(a);
    return cudaGetLastError();
}

// One row of a grouped GEMM registry: its shape and its launcher (both modes).
struct Entry {
    MoeGroupedShape shape;
    cudaError_t (*fn)(const MoeExpertArgs&, cudaStream_t);
};

}  // namespace
}  // namespace dsv4::cuda::sm90
