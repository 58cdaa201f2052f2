// Synthetic weights and KV rows on the GPU (see synth.h). Thread roles: grid-stride loops, one
// element (or one packed byte) per thread iteration; the KV fill runs one CTA per (page, region)
// with threads striding the region's bytes. Bound: HBM write bandwidth (the 20-layer proxy's
// ~74 GB are written in well under a second). Randomness: splitmix64 of (seed, index), so values
// do not depend on the launch shape.
#include <cuda_bf16.h>

#include "kernels/cuda/synth/synth.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::synth {

namespace {
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ uint64_t rnd(uint64_t seed, uint64_t i) {
    return mix64(seed * 0x9e3779b97f4a7c15ull + mix64(i + 0x632be59bd9b4e019ull));
}
// Uniform [0, 1) from the top 24 bits.
__device__ __forceinline__ float unit(uint64_t r) { return float(r >> 40) * (1.0f / 16777216.0f); }
__device__ __forceinline__ uint16_t bf16_bits(float v) {
    const __nv_bfloat16 b = __float2bfloat16_rn(v);
    return *reinterpret_cast<const uint16_t*>(&b);
}
// e4m3: sign | exponent field 5..8 | 3 random mantissa bits (exponent 8 with mantissa 7 is 3.75, not NaN).
__device__ __forceinline__ uint8_t e4m3_code(uint64_t r) {
    return uint8_t((r & 0x80u) | ((5u + ((r >> 8) & 3u)) << 3) | ((r >> 16) & 7u));
}

constexpr int kThreads = 256;
int grid_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return int(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

__global__ void f32_kernel(float* p, int64_t n, uint64_t seed, float lo, float hi) {
    dev::pdl_begin();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        p[i] = lo + (hi - lo) * unit(rnd(seed, i));
}
__global__ void bf16_kernel(uint16_t* p, int64_t n, uint64_t seed, float amp) {
    dev::pdl_begin();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        p[i] = bf16_bits(amp * (2.0f * unit(rnd(seed, i)) - 1.0f));
}
__global__ void e4m3_kernel(uint8_t* p, int64_t n, uint64_t seed) {
    dev::pdl_begin();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        p[i] = e4m3_code(rnd(seed, i));
}
__global__ void ue8m0_kernel(uint8_t* p, int64_t n, uint64_t seed, int lo, int hi, int64_t first) {
    dev::pdl_begin();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        p[i] = uint8_t(lo + int(rnd(seed, first + i) % uint64_t(hi - lo + 1)));
}
__global__ void bytes_kernel(uint8_t* p, int64_t n, uint64_t seed, int64_t first) {
    dev::pdl_begin();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        p[i] = uint8_t(rnd(seed, first + i) >> 24);
}
// Row v: k distinct experts (start + j * step) mod hot, step odd and < hot (distinct when hot is a
// power of two; otherwise step 1).
__global__ void tid2eid_kernel(int32_t* p, int64_t V, int k, int hot, uint64_t seed) {
    dev::pdl_begin();
    const bool pow2 = (hot & (hot - 1)) == 0;
    for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < V; v += int64_t(gridDim.x) * blockDim.x) {
        const uint64_t r = rnd(seed, v);
        const int start = int(r % uint64_t(hot));
        const int step = pow2 && hot > 1 ? int(((r >> 32) % uint64_t(hot)) | 1u) : 1;
        for (int j = 0; j < k; ++j) p[v * k + j] = int32_t((start + int64_t(j) * step) % hot);
    }
}

__global__ void round_bf16_kernel(float* p, int64_t n) {
    dev::pdl_begin();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        p[i] = __bfloat162float(__float2bfloat16_rn(p[i]));
}

// One CTA per (page, region): threads stride the region's rows and bytes.
__global__ void kv_fill_kernel(uint8_t* base, int64_t page_bytes, const int32_t* pages, int64_t n_pages,
                               const KvFillRegion* regions, uint64_t seed) {
    dev::pdl_begin();
    const int64_t pi = blockIdx.x;
    if (pi >= n_pages) return;
    const KvFillRegion g = regions[blockIdx.y];
    uint8_t* page = base + int64_t(pages[pi]) * page_bytes;
    const uint64_t s = seed ^ mix64(uint64_t(pages[pi]) * 131 + blockIdx.y);
    for (int32_t row = 0; row < g.count; ++row) {
        uint8_t* r = page + g.byte_off + int64_t(row) * g.stride;
        const uint64_t rs = mix64(s + uint64_t(row));
        switch (g.kind) {
            case KvFillKind::kF32:
                for (int i = threadIdx.x; i < g.dim; i += blockDim.x)
                    reinterpret_cast<float*>(r)[i] = 2.0f * unit(rnd(rs, i)) - 1.0f;
                break;
            case KvFillKind::kBf16:
                for (int i = threadIdx.x; i < g.dim; i += blockDim.x)
                    reinterpret_cast<uint16_t*>(r)[i] = bf16_bits(2.0f * unit(rnd(rs, i)) - 1.0f);
                break;
            case KvFillKind::kFp8Row584: {
                const int nope = g.dim - 64, n_scales = nope / 64;
                for (int i = threadIdx.x; i < nope; i += blockDim.x) r[i] = e4m3_code(rnd(rs, i));
                for (int i = threadIdx.x; i < 64; i += blockDim.x)
                    reinterpret_cast<uint16_t*>(r + nope)[i] = bf16_bits(2.0f * unit(rnd(rs, nope + i)) - 1.0f);
                for (int i = threadIdx.x; i < n_scales; i += blockDim.x)
                    r[nope + 128 + i] = uint8_t(124 + rnd(rs, g.dim + i) % 5);
                for (int64_t i = nope + 128 + n_scales + threadIdx.x; i < g.stride; i += blockDim.x) r[i] = 0;
                break;
            }
            case KvFillKind::kFp8Row132:
                for (int i = threadIdx.x; i < g.dim; i += blockDim.x) r[i] = e4m3_code(rnd(rs, i));
                if (threadIdx.x == 0) *reinterpret_cast<float*>(r + g.dim) = 0.5f + 1.5f * unit(rnd(rs, g.dim));
                break;
        }
    }
}
}  // namespace

cudaError_t fill_f32(float* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    f32_kernel<<<grid_for(n), kThreads, 0, st>>>(p, n, seed, lo, hi);
    return cudaGetLastError();
}
cudaError_t fill_bf16(void* p, int64_t n, uint64_t seed, float amp, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    bf16_kernel<<<grid_for(n), kThreads, 0, st>>>(static_cast<uint16_t*>(p), n, seed, amp);
    return cudaGetLastError();
}
cudaError_t fill_e4m3(void* p, int64_t n, uint64_t seed, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    e4m3_kernel<<<grid_for(n), kThreads, 0, st>>>(static_cast<uint8_t*>(p), n, seed);
    return cudaGetLastError();
}
cudaError_t fill_ue8m0(void* p, int64_t n, uint64_t seed, int lo, int hi, cudaStream_t st, int64_t first) {
    if (n <= 0) return cudaSuccess;
    lo = lo < 0 ? 0 : (lo > 254 ? 254 : lo);
    hi = hi < lo ? lo : (hi > 254 ? 254 : hi);
    ue8m0_kernel<<<grid_for(n), kThreads, 0, st>>>(static_cast<uint8_t*>(p), n, seed, lo, hi, first);
    return cudaGetLastError();
}
cudaError_t fill_mxfp4(void* p, int64_t n_bytes, uint64_t seed, cudaStream_t st, int64_t first) {
    if (n_bytes <= 0) return cudaSuccess;
    bytes_kernel<<<grid_for(n_bytes), kThreads, 0, st>>>(static_cast<uint8_t*>(p), n_bytes, seed, first);
    return cudaGetLastError();
}
cudaError_t fill_tid2eid(int32_t* p, int64_t V, int k, int hot, uint64_t seed, cudaStream_t st) {
    if (V <= 0 || k <= 0 || hot < k) return cudaErrorInvalidValue;
    tid2eid_kernel<<<grid_for(V), kThreads, 0, st>>>(p, V, k, hot, seed);
    return cudaGetLastError();
}
cudaError_t round_to_bf16(float* p, int64_t n, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    round_bf16_kernel<<<grid_for(n), kThreads, 0, st>>>(p, n);
    return cudaGetLastError();
}
cudaError_t fill_kv_pages(void* base, int64_t page_bytes, const int32_t* pages, int64_t n_pages,
                          const KvFillRegion* regions, int n_regions, uint64_t seed, cudaStream_t st) {
    if (n_pages <= 0 || n_regions <= 0) return cudaSuccess;
    if (n_pages > 0x7fffffffLL || n_regions > 65535) return cudaErrorInvalidValue;
    kv_fill_kernel<<<dim3(unsigned(n_pages), unsigned(n_regions)), kThreads, 0, st>>>(
        static_cast<uint8_t*>(base), page_bytes, pages, n_pages, regions, seed);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda::synth
