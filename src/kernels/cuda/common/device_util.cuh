// Device helpers shared by the sm90 decode kernels: cp.async, ldmatrix, bf16 mma.sync, and the
// checkpoint element decoders (fp8 e4m3, fp4 e2m1, UE8M0). Header-only, device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::dev {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The first 1,024-byte aligned byte of a dynamic shared-memory array (swizzled wgmma tiles need the
// alignment), derived from the array by pointer arithmetic so that the compiler still knows it points
// to shared memory: rounding through an integer turns every later access into a generic load or store
// (ncu, ledger E37: the dequantising loads of the expert GEMM were LD, not LDS).
__device__ __forceinline__ unsigned char* align_smem_1024(unsigned char* p) {
    return p + ((1024u - (smem_addr(p) & 1023u)) & 1023u);
}

// 16-byte async copy; src_bytes 0 zero-fills the destination (masked rows).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// D[16x8] += A[16x16] (row) * B[16x8] (col), bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float2 unpack_bf16x2(uint32_t v) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}

// 8 activations at element offset i of x as 16 bytes of bf16: x is bf16, or f32 (when f32; rounded
// to nearest even while staging, so f32 callers need no conversion kernel). i must be a multiple
// of 8 and x 16-byte aligned.
__device__ __forceinline__ uint4 load_x8_bf16(const void* x, bool f32, int64_t i) {
    if (!f32) return *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(x) + i);
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(x) + i);
    const float4 a = p[0], b = p[1];
    return make_uint4(pack_bf16x2(a.x, a.y), pack_bf16x2(a.z, a.w), pack_bf16x2(b.x, b.y), pack_bf16x2(b.z, b.w));
}

// UE8M0 byte -> 2^(b-127); 255 is NaN, 0 is 2^-127 (a subnormal f32).
__device__ __forceinline__ float ue8m0(uint32_t b) {
    if (b == 0) return __uint_as_float(0x00400000u);
    if (b == 255) return __uint_as_float(0x7fc00000u);
    return __uint_as_float(b << 23);
}

// Two fp8 e4m3 codes (low byte first) -> float2.
__device__ __forceinline__ float2 fp8x2_to_float2(uint16_t v) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
    return __half22float2(*reinterpret_cast<__half2*>(&h));
}

// Byte b holding two e2m1 codes (low nibble first) -> half2 bits whose value is e2m1 * 2^-14
// (code bits placed into the fp16 exponent/mantissa; multiply by 2^14 in the scale).
__device__ __forceinline__ uint32_t e2m1x2_to_half2_bits_scaled(uint32_t byte) {
    const uint32_t v = (byte & 0xfu) | ((byte & 0xf0u) << 12);
    return ((v & 0x00070007u) << 9) | ((v & 0x00080008u) << 12);
}
constexpr float kE2m1Fix = 16384.0f;  // 2^14

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

}  // namespace dsv4::cuda::dev
