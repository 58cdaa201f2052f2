// Lane-chunk decoders of the weight-streaming GEMVs: each lane reads 16 bytes of one weight row
// per step and expands them to f32 (bf16: 8 values, fp8 e4m3: 16, MXFP4 e2m1: 32), then FMAs them
// against the matching activation values held in shared memory as bf16.
#pragma once

#include "kernels/cuda/common/device_util.cuh"

namespace dsv4::cuda::ws {

template <int VPL>
__device__ __forceinline__ void load_x(const __nv_bfloat16* xs, float (&xv)[VPL]) {
#pragma unroll
    for (int i = 0; i < VPL / 8; ++i) {
        const uint4 v = *reinterpret_cast<const uint4*>(xs + 8 * i);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = dev::unpack_bf16x2(w[j]);
            xv[8 * i + 2 * j] = f.x;
            xv[8 * i + 2 * j + 1] = f.y;
        }
    }
}

__device__ __forceinline__ void decode_bf16(const uint4 v, float (&o)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 f = dev::unpack_bf16x2(w[j]);
        o[2 * j] = f.x;
        o[2 * j + 1] = f.y;
    }
}

__device__ __forceinline__ void decode_fp8(const uint4 v, float sc, float (&o)[16]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 a = dev::fp8x2_to_float2(uint16_t(w[j] & 0xffff));
        const float2 b = dev::fp8x2_to_float2(uint16_t(w[j] >> 16));
        o[4 * j] = a.x * sc;
        o[4 * j + 1] = a.y * sc;
        o[4 * j + 2] = b.x * sc;
        o[4 * j + 3] = b.y * sc;
    }
}

// 16 bytes of packed e2m1 (low nibble = even k); sc already includes the 2^14 fix-up.
__device__ __forceinline__ void decode_mxfp4(const uint4 v, float sc, float (&o)[32]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            uint32_t h = dev::e2m1x2_to_half2_bits_scaled((w[j] >> (8 * b)) & 0xffu);
            const float2 f = __half22float2(*reinterpret_cast<__half2*>(&h));
            o[8 * j + 2 * b] = f.x * sc;
            o[8 * j + 2 * b + 1] = f.y * sc;
        }
    }
}

}  // namespace dsv4::cuda::ws
