// Device helpers shared by the CUDA ops: checked launches, warp/block reductions, the element
// dequantisers of the checkpoint weight formats, and 64-bit page-pool addressing (B09).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/mxfp4_pair_rotated.h"
#include "kernels/cuda/ops/ops.h"

namespace dsv4::cuda {

#define DSV4_CUDA_RET(expr)               \
    do {                                  \
        const cudaError_t e_ = (expr);    \
        if (e_ != cudaSuccess) return e_; \
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
        case WFmt::kF32:
            return reinterpret_cast<const float*>(d)[n * K + k];
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
        case WFmt::kMxfp4PairRotated: {
            // Code of k is nibble i = k % 8 of its 32-bit word (K % 8 == 0), whose 4 bits the
            // repack scattered: gather them back (nibble i = pair i % 4, half i / 4).
            const uint32_t word = reinterpret_cast<const uint32_t*>(d)[(n * (K / 2) + k / 2) / 4];
            const int i = int(k % 8);
            uint8_t code = 0;
#pragma unroll
            for (int f = 0; f < 4; ++f) code |= uint8_t(((word >> mxfp4_pk::packed_bit(i % 4, f, i / 4)) & 1u) << f);
            return e2m1_f32(code) * ue8m0_f32(s[n * ((K + 31) / 32) + k / 32]);
        }
    }
    return 0.0f;
}

// Page table of plan entry s (StepPlan::table_row maps pseudo-sequences to their sequence's row).
__device__ __forceinline__ const int32_t* seq_table(const StepPlan& plan, int s) {
    return plan.page_table + int64_t(plan.table_row ? plan.table_row[s] : s) * plan.pt_stride;
}

// Element e of sequence s's state area (spans state pages; 64-bit arithmetic, B09).
__device__ __forceinline__ float* state_ptr(const PagePool& p, const int32_t* table, int64_t e) {
    return p.base + int64_t(table[e / p.page_elems]) * p.page_elems + e % p.page_elems;
}
// Word i of an int32 record at state element off (speculative decoding's header, model/spec_state.h:
// stored as the f32 words' bits).
__device__ __forceinline__ int32_t state_word(const PagePool& p, const int32_t* table, int64_t off, int i) {
    return __float_as_int(*state_ptr(p, table, off + i));
}
__device__ __forceinline__ void set_state_word(const PagePool& p, const int32_t* table, int64_t off, int i, int32_t v) {
    *state_ptr(p, table, off + i) = __int_as_float(v);
}
// Compressed row w (ratio r) of a sequence: token page address + the layer's row offset; rows
// are `words` 4-byte words apart.
__device__ __forceinline__ int64_t comp_row_word(const PagePool& p, const int32_t* table, int r, int64_t row_off,
                                                 int words, int64_t w) {
    const int64_t tokpos = w * r;
    const int64_t page = table[p.n_state_pages + tokpos / p.page_tokens];
    const int64_t slot = r <= p.page_tokens ? (tokpos % p.page_tokens) / r : 0;
    return page * p.page_elems + row_off + slot * words;
}
__device__ __forceinline__ float* comp_row_ptr(const PagePool& p, const int32_t* table, int r, int64_t row_off,
                                               int words, int64_t w) {
    return p.base + comp_row_word(p, table, r, row_off, words, w);
}

__device__ __forceinline__ float bf16_bits_f32(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// Element i of one stored row (model/kv_rows.h formats).
__device__ __forceinline__ float row_elem(const float* row, const RowFormat& f, int i) {
    if (f.fmt == 0) return row[i];
    const uint8_t* b = reinterpret_cast<const uint8_t*>(row);
    if (f.fmt == 1) return bf16_bits_f32(reinterpret_cast<const uint16_t*>(b)[i]);
    const int n = f.dim - f.rope_dim;
    if (i < n) return e4m3_f32(b[i]) * ue8m0_f32(b[n + 2 * f.rope_dim + i / 64]);
    return bf16_bits_f32(reinterpret_cast<const uint16_t*>(b + n)[i - n]);
}

// Element i of compressed row w.
__device__ __forceinline__ float load_row(const PagePool& p, const int32_t* table, int r, int64_t row_off,
                                          const RowFormat& f, int64_t w, int i) {
    return row_elem(comp_row_ptr(p, table, r, row_off, f.words, w), f, i);
}
// Element i of window ring slot `slot` (f32 rows may straddle state pages: addressed per element).
__device__ __forceinline__ float ring_elem(const PagePool& p, const int32_t* table, int64_t ring_off, int64_t slot,
                                           int i) {
    const RowFormat& f = p.main;
    if (f.fmt == 0) return *state_ptr(p, table, ring_off + slot * f.words + i);
    return row_elem(state_ptr(p, table, ring_off + slot * f.words), f, i);
}

// UE8M0 exponent byte of the smallest power of two >= x (0 for x <= 0), as core/dtype ue8m0_ceil.
__device__ __forceinline__ uint8_t ue8m0_ceil_dev(float x) {
    if (!(x > 0.0f)) return 0;
    int e;
    const float m = frexpf(x, &e);
    int b = (m == 0.5f ? e - 1 : e) + 127;
    b = b < 0 ? 0 : (b > 254 ? 254 : b);
    return uint8_t(b);
}
// f32 -> e4m3fn code, round to nearest even, saturating at 448, NaN -> 0x7f: the same steps as
// core/dtype f32_to_fp8e4m3, so that GPU and CPU rows agree bit for bit.
__device__ __forceinline__ uint8_t f32_e4m3_dev(float f) {
    if (isnan(f)) return 0x7f;
    const uint8_t sign = signbit(f) ? 0x80 : 0x00;
    const float a = fabsf(f);
    if (a >= 448.0f) return sign | 0x7e;
    if (a < 0.015625f) return sign | uint8_t(rintf(a * 512.0f));  // subnormal quantum 2^-9
    int e;
    const float m = frexpf(a, &e);
    float k = rintf((2.0f * m - 1.0f) * 8.0f);
    int ex = e - 1 + 7;
    if (k >= 8.0f) {
        k = 0.0f;
        ++ex;
    }
    if (ex > 15 || (ex == 15 && k > 6.0f)) return sign | 0x7e;
    return sign | uint8_t((ex << 3) | int(k));
}

// Block-cooperative write of one row v[f.dim] (shared memory, complete before the call) to the
// contiguous row `dst` in format f. Every thread of the block must call it (it synchronises for
// fp8 rows); dst is complete for the block after it returns.
__device__ __forceinline__ void store_row_block(const float* v, float* dst, const RowFormat& f) {
    __shared__ uint8_t scales[64];  // nope <= 4096 dims
    if (f.fmt == 0) {
        for (int i = threadIdx.x; i < f.dim; i += blockDim.x) dst[i] = v[i];
        return;
    }
    uint8_t* b = reinterpret_cast<uint8_t*>(dst);
    if (f.fmt == 1) {
        for (int i = threadIdx.x; i < f.dim; i += blockDim.x)
            reinterpret_cast<__nv_bfloat16*>(b)[i] = __float2bfloat16_rn(v[i]);
        for (int i = 2 * f.dim + threadIdx.x; i < 4 * f.words; i += blockDim.x) b[i] = 0;
        return;
    }
    const int n = f.dim - f.rope_dim, nb = (n + 63) / 64, so = n + 2 * f.rope_dim;
    for (int k = threadIdx.x; k < nb; k += blockDim.x) {
        float amax = 1e-4f;
        for (int i = 64 * k; i < min(n, 64 * k + 64); ++i) amax = fmaxf(amax, fabsf(v[i]));
        const uint8_t e = ue8m0_ceil_dev(amax / 448.0f);
        scales[k] = e;
        b[so + k] = e;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) b[i] = f32_e4m3_dev(v[i] / ue8m0_f32(scales[i / 64]));
    for (int i = threadIdx.x; i < f.rope_dim; i += blockDim.x)
        reinterpret_cast<__nv_bfloat16*>(b + n)[i] = __float2bfloat16_rn(v[n + i]);
    for (int i = so + nb + threadIdx.x; i < 4 * f.words; i += blockDim.x) b[i] = 0;
    __syncthreads();
}

__device__ __forceinline__ float silu_f(float x) { return x * (1.0f / (1.0f + expf(-x))); }

// One rope rotation (a, b) -> (a c - b sn, a sn + b c) with every rounding explicit (no contraction
// into fma), so every kernel that rotates (rope_pair, the bf16 and warp-per-row forms of norm_rope.cu)
// gives the same bits, and those of the CPU reference's plain float arithmetic.
__device__ __forceinline__ float2 rope_rotate(float a, float b, float c, float sn) {
    return make_float2(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn)), __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, c)));
}
// cos and (inverse: minus) sin of rope pair i at pos.
__device__ __forceinline__ float2 rope_cs(const float* inv_freq, int64_t pos, int i, bool inverse) {
    const float ang = float(pos) * inv_freq[i];
    return make_float2(cosf(ang), inverse ? -sinf(ang) : sinf(ang));
}

// Rotates interleaved pairs of the trailing rope_dim dims of v[dim] (shared or global memory).
__device__ __forceinline__ void rope_pair(float* v, int dim, int rope_dim, const float* inv_freq, int64_t pos, int i,
                                          bool inverse) {
    float* r = v + (dim - rope_dim);
    const float2 cs = rope_cs(inv_freq, pos, i, inverse);
    const float2 o = rope_rotate(r[2 * i], r[2 * i + 1], cs.x, cs.y);
    r[2 * i] = o.x;
    r[2 * i + 1] = o.y;
}

}  // namespace dsv4::cuda
