// RMSNorm (weighted or not) fused with RoPE / inverse RoPE on rows, plus small elementwise ops.
// Thread roles: one CTA (128 threads) per row; threads stride the row, a block reduction (double,
// as the reference) gives the norm, then threads rotate the rope pairs. Shared memory: the row
// (n floats, dynamic) + 32 doubles. Bound: memory (one read, one write per element).
#include <type_traits>

#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
// x: [rows, ldx] f32; y: [rows, ldy] f32; weight: [n] or null; inv_freq: [rope_dim/2] or null;
// pos: [rows / rows_per_token] int32
template <bool kBf16Out>
__global__ void norm_rope_kernel(const float* x, int64_t ldx, void* y, int64_t ldy, int n, bool do_norm,
                                 const float* __restrict__ weight, float eps, const float* __restrict__ inv_freq,
                                 int rope_dim, const int32_t* __restrict__ pos, int rows_per_token, bool inverse) {
    dev::pdl_begin();
    extern __shared__ float row[];
    __shared__ double red[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * ldx;
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i];
        row[i] = v;
        ss = __fma_rn(double(v), double(v), ss);  // explicit: norm_rope512_kernel repeats it
    }
    if (do_norm) {
        ss = block_sum_d(ss, red);
        const float inv = 1.0f / sqrtf(float(ss / double(n)) + eps);
        for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = weight ? row[i] * inv * weight[i] : row[i] * inv;
    }
    __syncthreads();
    if (inv_freq) {
        const int64_t p = pos[r / rows_per_token];
        for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x)
            rope_pair(row, n, rope_dim, inv_freq, p, i, inverse);
        __syncthreads();
    }
    if constexpr (kBf16Out) {
        // Same f32 values as the f32 form, rounded once (what q_rows_bf16 does to the f32 row).
        __nv_bfloat16* yr = static_cast<__nv_bfloat16*>(y) + r * ldy;
        for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __float2bfloat16_rn(row[i]);
    } else {
        float* yr = static_cast<float*>(y) + r * ldy;
        for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = row[i];
    }
}

// norm_rope_kernel for rows of n = 512 (q heads, K=V rows), rope_dim 0 or 64, launched with 128
// threads: one warp per row, lane l holding elements l + 32 m (m = w + 4 k: the elements virtual
// thread l + 32 w of the 128-thread form strides over), so the double sum of squares is formed in
// exactly that kernel's order (per virtual thread, then each virtual warp's shuffle tree, then the
// four warps in order) and the row gives the same bits. Why: the 128-thread form staged the row in
// shared memory with three block barriers and ran at ~1.8 TB/s on the 4K-token q (E35).
// TIn: float, or __nv_bfloat16 (norm_rope_bf16: the q rows the prefill GEMM wrote as bf16; each warp
// reads its whole row before writing, so x may be y).
template <bool kBf16Out, typename TIn = float>
__global__ void __launch_bounds__(256)
    norm_rope512_kernel(const TIn* x, int64_t ldx, void* y, int64_t ldy, int64_t rows, bool do_norm,
                        const float* __restrict__ weight, float eps, const float* __restrict__ inv_freq,
                        const int32_t* __restrict__ pos, int rows_per_token, bool inverse) {
    dev::pdl_begin();
    constexpr int n = 512;
    const int lane = threadIdx.x & 31;
    const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const TIn* xr = x + r * ldx;
    float v[16];  // v[w + 4 k] = element lane + 32 w + 128 k
#pragma unroll
    for (int m = 0; m < 16; ++m) {
        if constexpr (std::is_same_v<TIn, float>)
            v[m] = xr[lane + 32 * m];
        else
            v[m] = __bfloat162float(xr[lane + 32 * m]);
    }
    if (do_norm) {
        double part[4];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            double ss = 0.0;
#pragma unroll
            for (int k = 0; k < 4; ++k) ss = __fma_rn(double(v[w + 4 * k]), double(v[w + 4 * k]), ss);
            part[w] = warp_sum_d(ss);
        }
        double ss = 0.0;
#pragma unroll
        for (int w = 0; w < 4; ++w) ss += part[w];
        const float inv = 1.0f / sqrtf(float(ss / double(n)) + eps);
#pragma unroll
        for (int m = 0; m < 16; ++m) v[m] = weight ? v[m] * inv * weight[lane + 32 * m] : v[m] * inv;
    }
    if (inv_freq) {  // rope dims 448 .. 511: m = 14 (rope index lane), 15 (32 + lane); pairs in lanes l, l ^ 1
        const int64_t p = pos[r / rows_per_token];
#pragma unroll
        for (int m = 14; m < 16; ++m) {
            const int ri = (m - 14) * 32 + lane;
            const float other = __shfl_xor_sync(0xffffffffu, v[m], 1);
            const float2 cs = rope_cs(inv_freq, p, ri >> 1, inverse);
            const float2 o = (ri & 1) ? rope_rotate(other, v[m], cs.x, cs.y) : rope_rotate(v[m], other, cs.x, cs.y);
            v[m] = (ri & 1) ? o.y : o.x;
        }
    }
    if constexpr (kBf16Out) {
        __nv_bfloat16* yr = static_cast<__nv_bfloat16*>(y) + r * ldy;
#pragma unroll
        for (int m = 0; m < 16; ++m) yr[lane + 32 * m] = __float2bfloat16_rn(v[m]);
    } else {
        float* yr = static_cast<float*>(y) + r * ldy;
#pragma unroll
        for (int m = 0; m < 16; ++m) yr[lane + 32 * m] = v[m];
    }
}

// Whether norm_rope512_kernel takes a call: n 512, rope on 64 dims or none.
bool norm_rope512_ok(int n, const float* inv_freq, int rope_dim) { return n == 512 && (!inv_freq || rope_dim == 64); }

// Inverse RoPE in place on the trailing rope_dim dims of bf16 rows of width n: only those dims
// change, through f32 and back (attn_out_rows followed by round_to_bf16 gives the same bits). One
// thread per (token, pair) walks the token's rows_per_token rows (the heads share the angle): one
// cos/sin per pair and token instead of one per row, the same values and operations per element.
// Why: with a thread per row and pair the sines and cosines bound the kernel (55 us per layer on
// 4K tokens x 64 heads, ~8x its bytes at the copy rate; ledger E53).
__global__ void rope_rows_bf16_kernel(__nv_bfloat16* y, int64_t rows, int n, const float* __restrict__ inv_freq,
                                      int rope_dim, const int32_t* __restrict__ pos, int rows_per_token, bool inverse) {
    dev::pdl_begin();
    const int half = rope_dim / 2;
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t tok = i / half;
    const int j = int(i % half);
    const int64_t r0 = tok * rows_per_token;
    if (r0 >= rows) return;
    const float2 cs = rope_cs(inv_freq, int64_t(pos[tok]), j, inverse);  // as rope_pair
    const int64_t r_end = r0 + rows_per_token < rows ? r0 + rows_per_token : rows;
#pragma unroll 8
    for (int64_t r = r0; r < r_end; ++r) {
        __nv_bfloat162* pr = reinterpret_cast<__nv_bfloat162*>(y + r * n + (n - rope_dim)) + j;
        const float2 v = __bfloat1622float2(*pr);
        const float2 o = rope_rotate(v.x, v.y, cs.x, cs.y);
        *pr = __floats2bfloat162_rn(o.x, o.y);
    }
}

// out[i] = bf16(x[i]) round-to-nearest-even, 4 per thread (n % 4 == 0, 16-B aligned x, 8-B out).
__global__ void round_bf16_kernel(const float4* __restrict__ x, int64_t n4, uint2* __restrict__ out) {
    dev::pdl_begin();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const float4 v = x[i];
    const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    out[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
    dev::pdl_begin();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

__global__ void swiglu_kernel(const float* a, const float* b, float* h, int64_t n, float lim) {
    dev::pdl_begin();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = a[i], u = b[i];
    if (lim > 0) {
        g = fminf(g, lim);
        u = fminf(fmaxf(u, -lim), lim);
    }
    h[i] = silu_f(g) * u * 1.0f;
}
}  // namespace

cudaError_t norm_rope(const float* x, int64_t ldx, float* y, int64_t ldy, int rows, int n, bool do_norm,
                      const float* weight, float eps, const float* inv_freq, int rope_dim, const int32_t* pos,
                      int rows_per_token, bool inverse, cudaStream_t st) {
    if (rows <= 0) return cudaSuccess;
    if (norm_rope512_ok(n, inv_freq, rope_dim)) {
        norm_rope512_kernel<false><<<unsigned((rows + 7) / 8), 256, 0, st>>>(x, ldx, y, ldy, rows, do_norm, weight, eps,
                                                                             inv_freq, pos, rows_per_token, inverse);
        return cudaGetLastError();
    }
    norm_rope_kernel<false><<<rows, 128, sizeof(float) * n, st>>>(x, ldx, y, ldy, n, do_norm, weight, eps, inv_freq,
                                                                  rope_dim, pos, rows_per_token, inverse);
    return cudaGetLastError();
}

cudaError_t norm_rope_block_form(const float* x, int64_t ldx, float* y, int64_t ldy, int rows, int n, bool do_norm,
                                 const float* weight, float eps, const float* inv_freq, int rope_dim,
                                 const int32_t* pos, int rows_per_token, bool inverse, cudaStream_t st) {
    if (rows <= 0) return cudaSuccess;
    norm_rope_kernel<false><<<rows, 128, sizeof(float) * n, st>>>(x, ldx, y, ldy, n, do_norm, weight, eps, inv_freq,
                                                                  rope_dim, pos, rows_per_token, inverse);
    return cudaGetLastError();
}

cudaError_t norm_rope_to_bf16(const float* x, int64_t ldx, void* y, int64_t ldy, int rows, int n, bool do_norm,
                              const float* weight, float eps, const float* inv_freq, int rope_dim, const int32_t* pos,
                              int rows_per_token, cudaStream_t st) {
    if (rows <= 0) return cudaSuccess;
    if (norm_rope512_ok(n, inv_freq, rope_dim)) {
        norm_rope512_kernel<true><<<unsigned((rows + 7) / 8), 256, 0, st>>>(x, ldx, y, ldy, rows, do_norm, weight, eps,
                                                                            inv_freq, pos, rows_per_token, false);
        return cudaGetLastError();
    }
    norm_rope_kernel<true><<<rows, 128, sizeof(float) * n, st>>>(x, ldx, y, ldy, n, do_norm, weight, eps, inv_freq,
                                                                 rope_dim, pos, rows_per_token, false);
    return cudaGetLastError();
}

cudaError_t norm_rope_bf16(void* y, int64_t ldy, int rows, int n, bool do_norm, const float* weight, float eps,
                           const float* inv_freq, int rope_dim, const int32_t* pos, int rows_per_token,
                           cudaStream_t st) {
    if (rows <= 0) return cudaSuccess;
    if (!norm_rope512_ok(n, inv_freq, rope_dim)) return cudaErrorInvalidValue;
    const auto* x = static_cast<const __nv_bfloat16*>(y);
    norm_rope512_kernel<true, __nv_bfloat16><<<unsigned((rows + 7) / 8), 256, 0, st>>>(
        x, ldy, y, ldy, rows, do_norm, weight, eps, inv_freq, pos, rows_per_token, false);
    return cudaGetLastError();
}

cudaError_t rope_rows_bf16(void* y, int64_t rows, int n, const float* inv_freq, int rope_dim, const int32_t* pos,
                           int rows_per_token, bool inverse, cudaStream_t st) {
    if (rows <= 0 || rope_dim <= 0) return cudaSuccess;
    if (rope_dim % 2 || rope_dim > n || n % 2 || reinterpret_cast<uintptr_t>(y) % 4 || rows_per_token <= 0)
        return cudaErrorInvalidValue;
    const int64_t pairs = (rows + rows_per_token - 1) / rows_per_token * (rope_dim / 2);
    rope_rows_bf16_kernel<<<unsigned((pairs + 255) / 256), 256, 0, st>>>(
        static_cast<__nv_bfloat16*>(y), rows, n, inv_freq, rope_dim, pos, rows_per_token, inverse);
    return cudaGetLastError();
}

cudaError_t round_to_bf16(const float* x, int64_t n, void* out, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    if (n % 4 || reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(out) % 8)
        return cudaErrorInvalidValue;
    const int64_t n4 = n / 4;
    round_bf16_kernel<<<unsigned((n4 + 255) / 256), 256, 0, st>>>(reinterpret_cast<const float4*>(x), n4,
                                                                  static_cast<uint2*>(out));
    return cudaGetLastError();
}

cudaError_t scale_inplace(float* x, int64_t n, float s, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    scale_kernel<<<unsigned((n + 255) / 256), 256, 0, st>>>(x, n, s);
    return cudaGetLastError();
}

namespace {
__global__ void add_broadcast_rows_kernel(float* X, const float* e, int64_t n, int copies, int d) {
    dev::pdl_begin();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t t = i / (int64_t(copies) * d), c = i % d;
    X[i] += e[t * d + c];
}
}  // namespace

cudaError_t add_broadcast_rows(float* X, const float* e, int T, int copies, int d, cudaStream_t st) {
    const int64_t n = int64_t(T) * copies * d;
    if (n <= 0) return cudaSuccess;
    add_broadcast_rows_kernel<<<unsigned((n + 255) / 256), 256, 0, st>>>(X, e, n, copies, d);
    return cudaGetLastError();
}

cudaError_t swiglu(const float* a, const float* b, float* h, int64_t n, float lim, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    swiglu_kernel<<<unsigned((n + 255) / 256), 256, 0, st>>>(a, b, h, n, lim);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
