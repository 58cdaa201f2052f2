// Hopper warpgroup MMA (wgmma) helpers for the sm90a kernels: the A operand from registers (the
// "RS" form, for weights dequantised in registers), B from shared memory through a matrix
// descriptor, f32 accumulators. PTX ISA 8.0 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
// Instructions": the A register fragment of warp w of the warpgroup is rows 16w .. 16w + 15 in the
// mma.m16n8k16 A layout (a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)), and
// the accumulators are, per 8 columns i, d[4i..4i+3] = (g, 8i+2t), (g, 8i+2t+1), (g+8, 8i+2t),
// (g+8, 8i+2t+1). Header-only, device code only; needs sm_90a.
#pragma once

#include <cstdint>

namespace dsv4::cuda::dev {

// Shared-memory matrix descriptor for a K-major bf16 tile stored with the 128-byte swizzle: rows of
// 64 bf16 (128 B), 8-row atoms of 1,024 B (stride byte offset), 16-byte unit u of row r at unit
// u ^ (r & 7). The tile must start 1,024-byte aligned; advancing the start by 32 B selects the next
// 16 k of the 64 held per row.
__device__ __forceinline__ uint64_t wgmma_desc_k128(uint32_t smem_byte_addr) {
    uint64_t d = 0;
    d |= uint64_t((smem_byte_addr & 0x3FFFF) >> 4);
    d |= uint64_t(16 >> 4) << 16;    // leading byte offset: unused for swizzled K-major, 1 by convention
    d |= uint64_t(1024 >> 4) << 32;  // stride byte offset: 8 rows of 128 B
    d |= uint64_t(1) << 62;          // 128-byte swizzle
    return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy shared-memory writes (cp.async, st.shared) made visible to the async proxy that
// wgmma reads through; each writing thread runs it after its writes landed, before the barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving register reads/writes of v across wgmma issue / wait points.
__device__ __forceinline__ void wgmma_pin(float& v) { asm volatile("" : "+f"(v)::"memory"); }

// The register-A wgmma of every width 8 .. 128: wgmma_rs_n.cuh (generated).

// Descriptor of an MN-major ("transposed") bf16 operand stored with the 128-byte swizzle: 8-row K
// groups of 64 MN elements (1,024 B atoms, stride byte offset 1,024) and `mn_atom_stride` bytes from
// one 64-element MN block to the next (leading byte offset). The same bytes as a K-major tile of
// those rows (wgmma_desc_k128), so one staged tile serves as K (S = Q K^T) and as V (O = P V).
__device__ __forceinline__ uint64_t wgmma_desc_mn128(uint32_t smem_byte_addr, uint32_t mn_atom_stride) {
    uint64_t d = 0;
    d |= uint64_t((smem_byte_addr & 0x3FFFF) >> 4);
    d |= uint64_t((mn_atom_stride & 0x3FFFF) >> 4) << 16;
    d |= uint64_t(1024 >> 4) << 32;
    d |= uint64_t(1) << 62;
    return d;
}

// D[64 x 32] += A[64 x 16] * B[16 x 32], both from shared memory (K-major descriptors).
__device__ __forceinline__ void wgmma_ss_m64n32k16(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

// D[64 x 128] += A[64 x 16] (K-major) * B[16 x 128] (MN-major descriptor), both from shared memory.
__device__ __forceinline__ void wgmma_ss_m64n128k16_tb(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
        "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
        "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, "
        "1, 1, 0, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

}  // namespace dsv4::cuda::dev
