// RMSNorm (weighted or not) fused with RoPE / inverse RoPE on rows, plus small elementwise ops.
// Thread roles: one CTA (128 threads) per row; threads stride the row, a block reduction (double,
// as the reference) gives the norm, then threads rotate the rope pairs. Shared memory: the row
// (n floats, dynamic) + 32 doubles. Bound: memory (one read, one write per element).
#include "kernels/cuda/ops/common.cuh"

namespace dsv4::cuda {

namespace {
// x: [rows, ldx] f32; y: [rows, ldy] f32; weight: [n] or null; inv_freq: [rope_dim/2] or null;
// pos: [rows / rows_per_token] int32
template <bool kBf16Out>
__global__ void norm_rope_kernel(const float* x, int64_t ldx, void* y, int64_t ldy, int n,
                                 bool do_norm, const float* __restrict__ weight, float eps,
                                 const float* __restrict__ inv_freq, int rope_dim, const int32_t* __restrict__ pos,
                                 int rows_per_token, bool inverse) {
    extern __shared__ float row[];
    __shared__ double red[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * ldx;
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i];
        row[i] = v;
        ss += double(v) * v;
    }
    if (do_norm) {
        ss = block_sum_d(ss, red);
        const float inv = 1.0f / sqrtf(float(ss / double(n)) + eps);
        for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = weight ? row[i] * inv * weight[i] : row[i] * inv;
    }
    __syncthreads();
    if (inv_freq) {
        const int64_t p = pos[r / rows_per_token];
        for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) rope_pair(row, n, rope_dim, inv_freq, p, i, inverse);
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

// Inverse RoPE in place on the trailing rope_dim dims of bf16 rows of width n: only those dims
// change, through f32 and back (attn_out_rows followed by round_to_bf16 gives the same bits).
__global__ void rope_rows_bf16_kernel(__nv_bfloat16* y, int64_t rows, int n, const float* __restrict__ inv_freq,
                                      int rope_dim, const int32_t* __restrict__ pos, int rows_per_token, bool inverse) {
    const int half = rope_dim / 2;
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * half) return;
    const int64_t r = i / half;
    const int j = int(i % half);
    __nv_bfloat162* pr = reinterpret_cast<__nv_bfloat162*>(y + r * n + (n - rope_dim)) + j;
    const float2 v = __bfloat1622float2(*pr);
    // The arithmetic of rope_pair (common.cuh) on pair j of the rope dims.
    const float ang = float(int64_t(pos[r / rows_per_token])) * inv_freq[j];
    const float c = cosf(ang), sn = inverse ? -sinf(ang) : sinf(ang);
    *pr = __floats2bfloat162_rn(v.x * c - v.y * sn, v.x * sn + v.y * c);
}

// out[i] = bf16(x[i]) round-to-nearest-even, 4 per thread (n % 4 == 0, 16-B aligned x, 8-B out).
__global__ void round_bf16_kernel(const float4* __restrict__ x, int64_t n4, uint2* __restrict__ out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const float4 v = x[i];
    const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    out[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

__global__ void swiglu_kernel(const float* a, const float* b, float* h, int64_t n, float lim) {
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
    norm_rope_kernel<false><<<rows, 128, sizeof(float) * n, st>>>(x, ldx, y, ldy, n, do_norm, weight, eps, inv_freq,
                                                                  rope_dim, pos, rows_per_token, inverse);
    return cudaGetLastError();
}

cudaError_t norm_rope_to_bf16(const float* x, int64_t ldx, void* y, int64_t ldy, int rows, int n, bool do_norm,
                              const float* weight, float eps, const float* inv_freq, int rope_dim, const int32_t* pos,
                              int rows_per_token, cudaStream_t st) {
    if (rows <= 0) return cudaSuccess;
    norm_rope_kernel<true><<<rows, 128, sizeof(float) * n, st>>>(x, ldx, y, ldy, n, do_norm, weight, eps, inv_freq,
                                                                 rope_dim, pos, rows_per_token, false);
    return cudaGetLastError();
}

cudaError_t rope_rows_bf16(void* y, int64_t rows, int n, const float* inv_freq, int rope_dim, const int32_t* pos,
                           int rows_per_token, bool inverse, cudaStream_t st) {
    if (rows <= 0 || rope_dim <= 0) return cudaSuccess;
    if (rope_dim % 2 || rope_dim > n || n % 2 || reinterpret_cast<uintptr_t>(y) % 4) return cudaErrorInvalidValue;
    const int64_t pairs = rows * (rope_dim / 2);
    rope_rows_bf16_kernel<<<unsigned((pairs + 255) / 256), 256, 0, st>>>(static_cast<__nv_bfloat16*>(y), rows, n,
                                                                         inv_freq, rope_dim, pos, rows_per_token, inverse);
    return cudaGetLastError();
}

cudaError_t round_to_bf16(const float* x, int64_t n, void* out, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    if (n % 4 || reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(out) % 8) return cudaErrorInvalidValue;
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

cudaError_t swiglu(const float* a, const float* b, float* h, int64_t n, float lim, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    swiglu_kernel<<<unsigned((n + 255) / 256), 256, 0, st>>>(a, b, h, n, lim);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
