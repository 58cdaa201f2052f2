// Device helpers shared by the CUDA ops: checked launches, warp/block reductions, the element
// dequantisers of the checkpoint weight formats, and 64-bit page-pool addressing (B09).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/ops/ops.h"

namespace dsv4::cuda {

#define DSV4_CUDA_RET(expr)                      \
    do {                                         \
        const cudaError_t e_ = (expr);           \
        if (e_ != cudaSuccess) return e_;        \
    } while (0)
#define DSV4_LAUNCH_RET() DSV4_CUDA_RET(cudaGetLastError())

constexpr float kNegInf = -INFINITY;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Block sum of a double; every thread gets the result. `red` holds >= 32 doubles.
__device__ __forceinline__ double block_sum_d(double v, double* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double s = 0.0;
    for (int i = 0; i < nw; ++i) s += red[i];
    __syncthreads();
    return s;
}

__device__ __forceinline__ float ue8m0_f32(uint8_t b) {
    if (b == 255) return NAN;
    return b == 0 ? __int_as_float(0x00400000) : __int_as_float(int(b) << 23);
}
__device__ __forceinline__ float e4m3_f32(uint8_t b) {
    __nv_fp8_e4m3 v;
    v.__x = b;
    return float(v);
}
__device__ __forceinline__ float e2m1_f32(uint8_t code) {
    const float vals[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = vals[code & 7];
    return (code & 8) ? -v : v;
}

// W[n, k] of expert e (e < 0: not an expert array), as f32, exactly as load_f32 dequantises.
__device__ __forceinline__ float w_at(const WeightDesc& w, int e, int64_t n, int64_t k) {
    const int64_t K = w.K;
    const uint8_t* d = static_cast<const uint8_t*>(w.data) + (e > 0 ? int64_t(e) * w.expert_stride : 0);
    const uint8_t* s = static_cast<const uint8_t*>(w.scale) + (e > 0 ? int64_t(e) * w.scale_expert_stride : 0);
    switch (w.fmt) {
        case WFmt::kF32: return reinterpret_cast<const float*>(d)[n * K + k];
        case WFmt::kBF16: {
            const uint16_t b = reinterpret_cast<const uint16_t*>(d)[n * K + k];
            return __uint_as_float(uint32_t(b) << 16);
        }
        case WFmt::kFp8E8M0: {
            const int64_t kb = (K + 127) / 128;
            return e4m3_f32(d[n * K + k]) * ue8m0_f32(s[(n / 128) * kb + k / 128]);
        }
        case WFmt::kFp8F32: {
            const int64_t kb = (K + 127) / 128;
            return e4m3_f32(d[n * K + k]) * reinterpret_cast<const float*>(s)[(n / 128) * kb + k / 128];
        }
        case WFmt::kMxfp4: {
            const uint8_t byte = d[n * (K / 2) + k / 2];
            const uint8_t code = (k & 1) ? (byte >> 4) : (byte & 15);
            return e2m1_f32(code) * ue8m0_f32(s[n * ((K + 31) / 32) + k / 32]);
        }
    }
    return 0.0f;
}

// Element e of sequence s's state area (spans state pages; 64-bit arithmetic, B09).
__device__ __forceinline__ float* state_ptr(const PagePool& p, const int32_t* table, int64_t e) {
    return p.base + int64_t(table[e / p.page_elems]) * p.page_elems + e % p.page_elems;
}
// Compressed row w (ratio r) of a sequence: token page address + the layer's row offset.
__device__ __forceinline__ float* comp_row_ptr(const PagePool& p, const int32_t* table, int r, int64_t row_off,
                                               int row_dim, int64_t w) {
    const int64_t tokpos = w * r;
    const int64_t page = table[p.n_state_pages + tokpos / p.page_tokens];
    const int64_t slot = r <= p.page_tokens ? (tokpos % p.page_tokens) / r : 0;
    return p.base + page * p.page_elems + row_off + slot * row_dim;
}

// Element i of compressed row w (f32 or bf16 storage, PagePool::row_bf16).
__device__ __forceinline__ float load_row(const PagePool& p, const int32_t* table, int r, int64_t row_off, int row_dim,
                                          int64_t w, int i) {
    const int64_t tokpos = w * r;
    const int64_t page = table[p.n_state_pages + tokpos / p.page_tokens];
    const int64_t slot = r <= p.page_tokens ? (tokpos % p.page_tokens) / r : 0;
    const float* base = p.base + page * p.page_elems + row_off;
    if (p.row_bf16) return __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(base)[slot * row_dim + i]) << 16);
    return base[slot * row_dim + i];
}
__device__ __forceinline__ void store_row(const PagePool& p, const int32_t* table, int r, int64_t row_off, int row_dim,
                                          int64_t w, int i, float v) {
    const int64_t tokpos = w * r;
    const int64_t page = table[p.n_state_pages + tokpos / p.page_tokens];
    const int64_t slot = r <= p.page_tokens ? (tokpos % p.page_tokens) / r : 0;
    float* base = p.base + page * p.page_elems + row_off;
    if (p.row_bf16) {
        reinterpret_cast<__nv_bfloat16*>(base)[slot * row_dim + i] = __float2bfloat16_rn(v);
    } else {
        base[slot * row_dim + i] = v;
    }
}

__device__ __forceinline__ float silu_f(float x) { return x * (1.0f / (1.0f + expf(-x))); }

// Rotates interleaved pairs of the trailing rope_dim dims of v[dim] (shared or global memory).
__device__ __forceinline__ void rope_pair(float* v, int dim, int rope_dim, const float* inv_freq, int64_t pos,
                                          int i, bool inverse) {
    float* r = v + (dim - rope_dim);
    const float ang = float(pos) * inv_freq[i];
    const float c = cosf(ang);
    const float sn = inverse ? -sinf(ang) : sinf(ang);
    const float a = r[2 * i], b = r[2 * i + 1];
    r[2 * i] = a * c - b * sn;
    r[2 * i + 1] = a * sn + b * c;
}

}  // namespace dsv4::cuda
