// mHC (spec §2.2) fused with the RMSNorm it feeds: mixing logits, Sinkhorn, collapse and norm in
// one CTA per token; the expand as a separate elementwise pass; the final head collapse + norm.
// With a mix workspace (MhcArgs::mix_ws) the (2+n)n mixing dot products over n*d and the sum of
// squares run first over T x ((2+n)n + 1) CTAs (mhc_mix_kernel): one CTA per token would stream the
// 1.5 MB f32 mixing matrix of a Flash layer through a single SM (measured: 228 us per call at batch 1,
// half of the whole decode step).
// Thread roles: 256 threads per token; warps compute the (2+n)n mixing dot products over n*d
// (double accumulation like the reference) unless a workspace holds them already, thread 0 runs
// the Sinkhorn iterations on the n x n matrix (warp 0 with shuffles for n = 4), then all threads collapse
// and normalise.
// Shared memory: d floats (collapsed row) + coefficients + 32 doubles. Bound: memory (X and fn are
// read once per token); the Sinkhorn is a few hundred serial flops.
#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
constexpr int kMaxMix = 80;        // (2+n)n for n <= 8
constexpr int kMaxMixChunks = 64;  // chunk partials per token (mhc_mix_chunks caps here)

__device__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

// Sinkhorn for n = 4 by one warp: lane l < 16 holds C[l / 4][l % 4]; each normalisation gathers its
// row (or column) with shuffles and sums it in the serial order ((a + b) + c) + d, then divides, so
// the result is bit-identical to the serial loops. Why: on one thread the 20 iterations are ~640
// dependent divisions (measured: mhc_pre's second kernel ~35 us per call at every batch size).
// All 32 lanes must call it; lanes >= 16 shadow lanes - 16 and write nothing.
__device__ void sinkhorn_warp4(float* C, int iters, float eps) {
    const int lane = threadIdx.x & 31, e = lane & 15, j = e >> 2, k = e & 3;
    float c = C[e];
    for (int it = 0; it < iters; ++it) {
        if (it > 0) {
            const float r0 = __shfl_sync(0xffffffffu, c, 4 * j + 0), r1 = __shfl_sync(0xffffffffu, c, 4 * j + 1);
            const float r2 = __shfl_sync(0xffffffffu, c, 4 * j + 2), r3 = __shfl_sync(0xffffffffu, c, 4 * j + 3);
            c /= (((r0 + r1) + r2) + r3) + eps;
        }
        const float c0 = __shfl_sync(0xffffffffu, c, 0 + k), c1 = __shfl_sync(0xffffffffu, c, 4 + k);
        const float c2 = __shfl_sync(0xffffffffu, c, 8 + k), c3 = __shfl_sync(0xffffffffu, c, 12 + k);
        c /= (((c0 + c1) + c2) + c3) + eps;
    }
    __syncwarp();
    if (lane < 16) C[e] = c;
    __syncwarp();
}

// mix[row, r] = fn[r] . X[t] for r < n_mix, mix[row, n_mix] = |X[t]|^2 (double); grid (rows, n_mix + 1).
__global__ void mhc_mix_kernel(const float* __restrict__ X, const int32_t* __restrict__ rows, MhcArgs a, int n_mix) {
    dev::pdl_begin();
    __shared__ double red[32];
    const int64_t width = int64_t(a.n) * a.d;
    const int64_t t = rows ? rows[blockIdx.x] : blockIdx.x;
    const float* x = X + t * width;
    const int r = blockIdx.y;
    const float* f = r < n_mix ? a.fn + int64_t(r) * width : x;
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) acc += double(f[i]) * x[i];
    acc = block_sum_d(acc, red);
    if (threadIdx.x == 0) a.mix_ws[int64_t(blockIdx.x) * (n_mix + 1) + r] = acc;
}

// Chunked form, grid (rows, chunks): CTA (t, c) computes all NM + 1 partial sums over elements
// [c*ch, min((c+1)*ch, n d)) of token t (ch = ceil(n d / chunks), at least 256), written to
// ws[(t*chunks + c)*(NM+1) + r]; mhc_kernel adds the chunks in order (deterministic). Why: the
// grid (rows, NM + 1) form runs 25 CTAs at batch 1, each a long chain of dependent loads
// (measured: ~68 us per mhc_pre call on the 16384-wide Flash row); here each thread issues NM + 1
// independent loads per element and 32-64 CTAs share a token.
constexpr int kMixThreads = 256;
constexpr int kMixChunk = 512;
template <int NM>
__global__ void __launch_bounds__(kMixThreads)
    mhc_mix_chunk_kernel(const float* __restrict__ X, const int32_t* __restrict__ rows, MhcArgs a, int64_t ch) {
    dev::pdl_begin();
    __shared__ double red[kMixThreads / 32][NM + 1];
    const int64_t width = int64_t(a.n) * a.d;
    const int64_t t = rows ? rows[blockIdx.x] : blockIdx.x;
    const float* x = X + t * width;
    const int64_t i0 = int64_t(blockIdx.y) * ch;
    const int64_t i1 = i0 + ch < width ? i0 + ch : width;
    double acc[NM + 1];
#pragma unroll
    for (int r = 0; r <= NM; ++r) acc[r] = 0.0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += kMixThreads) {
        const float xv = x[i];
        float fv[NM];
#pragma unroll
        for (int r = 0; r < NM; ++r) fv[r] = __ldg(a.fn + int64_t(r) * width + i);
#pragma unroll
        for (int r = 0; r < NM; ++r) acc[r] += double(fv[r]) * xv;
        acc[NM] += double(xv) * xv;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r <= NM; ++r) {
        const double v = warp_sum_d(acc[r]);
        if (lane == 0) red[warp][r] = v;
    }
    __syncthreads();
    if (threadIdx.x <= NM) {
        double s = 0.0;
        for (int w = 0; w < kMixThreads / 32; ++w) s += red[w][threadIdx.x];
        a.mix_ws[(int64_t(blockIdx.x) * gridDim.y + blockIdx.y) * (NM + 1) + threadIdx.x] = s;
    }
}

// Token-group form for larger batches, grid (chunks, ceil(T / kMixTokensPerCta)): the CTA stages
// its chunk of the NM mixing rows in shared memory once and each warp runs 2 tokens over it (lanes
// stride the chunk; per-lane sums in element order, then a warp tree), writing the same chunk
// partials as mhc_mix_chunk_kernel. Why: the per-token form re-reads the 1.5 MB f32 mixing matrix
// from L2 once per token (100 MB per call at batch 64: ~42 us per mhc_pre, docs/perf/ledger.md E16);
// here once per 16 tokens.
constexpr int kMixTokensPerCta = 16;   // 8 warps x 2 tokens
constexpr int kMixMaxChunkTok = 1024;  // elements per chunk this form stages (NM 24: 96 KB)
template <int NM>
__global__ void __launch_bounds__(kMixThreads)
    mhc_mix_tokens_kernel(const float* __restrict__ X, const int32_t* __restrict__ rows, MhcArgs a, int64_t ch, int T) {
    dev::pdl_begin();
    extern __shared__ __align__(16) float fs[];  // [NM][ch]
    const int64_t width = int64_t(a.n) * a.d;
    const int64_t i0 = int64_t(blockIdx.x) * ch;
    const int len = int(i0 + ch < width ? ch : width - i0);
    // Staged 16 bytes at a time (launch_mix guarantees alignment: width, ch % 4 == 0), in batches of
    // 8 independent loads per thread: a load-then-store loop would be a chain of NM ch / 256
    // dependent round trips to DRAM.
    constexpr int kBatch = 8;
    const int len4 = len / 4, n4 = NM * len4;
    for (int j0 = threadIdx.x; j0 < n4; j0 += kMixThreads * kBatch) {
        float4 v[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int j = j0 + b * kMixThreads;
            v[b] = j < n4 ? __ldg(reinterpret_cast<const float4*>(a.fn + int64_t(j / len4) * width + i0) + j % len4)
                          : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int j = j0 + b * kMixThreads;
            if (j < n4) reinterpret_cast<float4*>(fs + (j / len4) * ch)[j % len4] = v[b];
        }
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tb = blockIdx.y * kMixTokensPerCta + 2 * warp;  // this warp's first token slot
    if (tb >= T) return;
    const bool two = tb + 1 < T;
    const int64_t ta = rows ? rows[tb] : tb, tc = two ? (rows ? rows[tb + 1] : tb + 1) : ta;
    const float* xa = X + ta * width + i0;
    const float* xc = X + tc * width + i0;
    double acc[2][NM + 1];
#pragma unroll
    for (int r = 0; r <= NM; ++r) acc[0][r] = acc[1][r] = 0.0;
    // x in batches of 8 elements per lane, loaded before use (independent L2 round trips).
    for (int i0l = lane; i0l < len; i0l += 32 * 8) {
        float xva[8], xvc[8];
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            const int i = i0l + 32 * b;
            xva[b] = i < len ? xa[i] : 0.0f;
            xvc[b] = i < len ? xc[i] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            const int i = i0l + 32 * b;
            if (i >= len) break;
            const double va = xva[b], vc = xvc[b];
#pragma unroll
            for (int r = 0; r < NM; ++r) {
                const double f = fs[r * ch + i];
                acc[0][r] += f * va;
                acc[1][r] += f * vc;
            }
            acc[0][NM] += va * va;
            acc[1][NM] += vc * vc;
        }
    }
#pragma unroll
    for (int k = 0; k < 2; ++k)
#pragma unroll
        for (int r = 0; r <= NM; ++r) acc[k][r] = warp_sum_d(acc[k][r]);
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            if (k == 1 && !two) break;
            double* out = a.mix_ws + (int64_t(tb + k) * gridDim.x + blockIdx.x) * (NM + 1);
#pragma unroll
            for (int r = 0; r <= NM; ++r) out[r] = acc[k][r];
        }
    }
}

// FP64 tensor-core (mma m8n8k4) form for prefill-sized steps, grid (chunks, ceil(T / 256)): the
// CTA stages its chunk of the 24 mixing rows in shared memory (f32; rows padded by 16 floats so the
// 8 lanes of a 128-bit load phase hit distinct banks) and each warp runs 32 tokens (4 m-tiles of 8)
// against the 24 rows (3 n-tiles of 8) over the chunk, 16 elements at a time: lane (g, q) = (lane / 4,
// lane % 4) loads elements 4q .. 4q + 3 of its token rows and mixing rows, and mma step j feeds
// element 4q + j as the fragment's k = q (the k order inside a chunk is relabelled the same way on
// both sides, so every product meets its own pair). Products of two floats are exact in double, so
// the partials (same layout as mhc_mix_chunk_kernel) differ from the CUDA-core forms only in the
// order of the double additions. Why: those forms issue ~1.6 G double FMAs and ~0.9 G f32 -> f64
// conversions per 4K-token call on the CUDA cores (ledger E33: 0.56 ms per call, 22.5 ms of a
// 20-layer 4K prefill step).
constexpr int kDmmaWarps = 8;
constexpr int kDmmaTokensPerCta = kDmmaWarps * 32;
constexpr int kDmmaPad = 16;
constexpr int kDmmaMinTokens = 1024;  // prefill chunks; decode batches keep the forms above (E16)

__device__ __forceinline__ void dmma_m8n8k4(double (&c)[2], double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
                 : "+d"(c[0]), "+d"(c[1])
                 : "d"(a), "d"(b));
}

__device__ __forceinline__ float f4_at(const float4& v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

__global__ void __launch_bounds__(kDmmaWarps * 32, 2)
    mhc_mix_dmma_kernel(const float* __restrict__ X, MhcArgs a, int ch, int T) {
    dev::pdl_begin();
    constexpr int NM = 24;
    extern __shared__ __align__(16) float fs[];  // [NM][ch + kDmmaPad]
    const int64_t width = int64_t(a.n) * a.d;
    const int64_t i0 = int64_t(blockIdx.x) * ch;
    const int stride = ch + kDmmaPad;
    const int len4 = ch / 4, n4 = NM * len4;
    for (int j0 = threadIdx.x; j0 < n4; j0 += kDmmaWarps * 32 * 8) {  // 8 independent 16-B loads per thread
        float4 v[8];
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            const int j = j0 + b * kDmmaWarps * 32;
            v[b] = j < n4 ? __ldg(reinterpret_cast<const float4*>(a.fn + int64_t(j / len4) * width + i0) + j % len4)
                          : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            const int j = j0 + b * kDmmaWarps * 32;
            if (j < n4) reinterpret_cast<float4*>(fs + (j / len4) * stride)[j % len4] = v[b];
        }
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int tb = blockIdx.y * kDmmaTokensPerCta + warp * 32;
    if (tb >= T) return;
    const float* xr[4];
    bool valid[4];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
        const int t = tb + mt * 8 + g;
        valid[mt] = t < T;
        xr[mt] = X + int64_t(valid[mt] ? t : tb) * width + i0 + 4 * q;
    }
    const float* fr[3];
#pragma unroll
    for (int nt = 0; nt < 3; ++nt) fr[nt] = fs + (nt * 8 + g) * stride + 4 * q;
    double acc[4][3][2], ss[4];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
        ss[mt] = 0.0;
#pragma unroll
        for (int nt = 0; nt < 3; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = 0.0;
    }
    // X is loaded one step ahead (nx) so its DRAM latency runs under the previous step's mmas. Why:
    // loading and consuming in the same step left ~1 TB/s (E50: 112 us per call at 2K tokens).
    float4 nx[4];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
        nx[mt] = valid[mt] ? __ldg(reinterpret_cast<const float4*>(xr[mt])) : make_float4(0, 0, 0, 0);
    for (int k0 = 0; k0 < ch; k0 += 16) {
        float4 xv[4], fv[3];
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) xv[mt] = nx[mt];
        if (k0 + 16 < ch) {
#pragma unroll
            for (int mt = 0; mt < 4; ++mt)
                nx[mt] = valid[mt] ? __ldg(reinterpret_cast<const float4*>(xr[mt] + k0 + 16)) : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int nt = 0; nt < 3; ++nt) fv[nt] = *reinterpret_cast<const float4*>(fr[nt] + k0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            double av[4], bv[3];
#pragma unroll
            for (int mt = 0; mt < 4; ++mt) {
                av[mt] = double(f4_at(xv[mt], j));
                ss[mt] = fma(av[mt], av[mt], ss[mt]);
            }
#pragma unroll
            for (int nt = 0; nt < 3; ++nt) bv[nt] = double(f4_at(fv[nt], j));
#pragma unroll
            for (int mt = 0; mt < 4; ++mt)
#pragma unroll
                for (int nt = 0; nt < 3; ++nt) dmma_m8n8k4(acc[mt][nt], av[mt], bv[nt]);
        }
    }
    // Accumulator layout (m8n8k4 f64): lane holds C[g][2q], C[g][2q + 1]: token g of the m-tile,
    // mixing rows 2q, 2q + 1 of the n-tile. The sum of squares: the quad's four k residues.
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
        double s = ss[mt];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        if (!valid[mt]) continue;
        double* out = a.mix_ws + (int64_t(tb + mt * 8 + g) * gridDim.x + blockIdx.x) * (NM + 1);
#pragma unroll
        for (int nt = 0; nt < 3; ++nt) {
            out[nt * 8 + 2 * q] = acc[mt][nt][0];
            out[nt * 8 + 2 * q + 1] = acc[mt][nt][1];
        }
        if (q == 0) out[NM] = s;
    }
}

// Prefetched form (kPrefetch): the token's X row is loaded into registers at the very start,
// kPrefetchF4 float4 per thread (n = 4, d = 4096, 256 threads), so its ~1 us of DRAM latency runs
// under the serial part (partials, logits, softmax) instead of after it. Why: prefill steps run the
// unstaged form (kMaxStagedTokens) at ~1.5 TB/s (E35 op profile: 7.4 ms of a 4K step for 40 x 268 MB).
// Same arithmetic as the other forms (u in the same expression and stream order, the norm's sum of
// squares over shared memory in their thread order): bit-identical xn and coefficients.
constexpr int kPrefetchThreads = 256, kPrefetchD = 4096, kPrefetchF4 = 4 * kPrefetchD / 4 / kPrefetchThreads;

// X: [T, n, d]; coeffs: [T, 24] (pre n, post n, comb n*n); xn: [T, d]. head: rows != null.
template <bool kHead, bool kPrefetch = false>
__global__ void __launch_bounds__(256, kPrefetch ? 2 : 1)
    mhc_kernel(const float* __restrict__ X, const int32_t* __restrict__ rows, MhcArgs a, float* __restrict__ coeffs,
               float* __restrict__ xn, int chunks, bool staged) {
    dev::pdl_begin();
    static_assert(!kPrefetch || !kHead, "the head's rows are few: it keeps the staged form");
    extern __shared__ __align__(16) float u[];  // [d] collapse; staged: then x [n d], norm [d]
    __shared__ double red[32];
    __shared__ float m[kMaxMix];
    __shared__ float pre[8], post[8], C[64];
    const int n = a.n, d = a.d;
    const int64_t width = int64_t(n) * d;
    const int64_t t = kHead ? rows[blockIdx.x] : blockIdx.x;
    const float* x = X + t * width;
    // Stream j's float4 f of the feature axis is element 4 j + c of xr for f = threadIdx.x + 256 c.
    float4 xr[kPrefetch ? kPrefetchF4 : 1];
    if constexpr (kPrefetch) {
#pragma unroll
        for (int b = 0; b < kPrefetchF4; ++b)
            xr[b] = __ldg(reinterpret_cast<const float4*>(x) + threadIdx.x + kPrefetchThreads * b);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int n_mix = kHead ? n : (2 + n) * n, nm1 = n_mix + 1;
    // staged: the token's X row and the norm weight are copied to shared memory first, in batches
    // of 8 independent 16-B loads per thread, so the collapse and the final scaling read no global
    // memory. Without it, their loops (16 rounds of loads each at d = 4096, the norm weight cold in
    // DRAM) were the bulk of a ~45 us call at batch 1.
    float* xs = u + d;
    float* ns = xs + width;
    // The chunk partials of the mixing dots (<= 64 x 25 doubles) are loaded into registers first, so
    // their round trip overlaps the staging below instead of following it.
    __shared__ double
        part[kMaxMixChunks * 25 > kMaxMix + 1 ? kMaxMixChunks * 25 : kMaxMix + 1];  // chunks x (n_mix + 1)
    constexpr int kPartPerThread = 8;  // 8 x 256 threads >= kMaxMixChunks * 25
    double pv[kPartPerThread];
    if (a.mix_ws) {
        const double* mw = a.mix_ws + int64_t(blockIdx.x) * chunks * nm1;
#pragma unroll
        for (int b = 0; b < kPartPerThread; ++b) {
            const int j = int(threadIdx.x) + b * int(blockDim.x);
            pv[b] = j < chunks * nm1 ? mw[j] : 0.0;
        }
    }
    if (staged) {
        auto copy4 = [&](const float* src, float* dst, int64_t n4) {
            const float4* s4 = reinterpret_cast<const float4*>(src);
            float4* d4 = reinterpret_cast<float4*>(dst);
            for (int64_t j0 = threadIdx.x; j0 < n4; j0 += int64_t(blockDim.x) * 8) {
                float4 v[8];
#pragma unroll
                for (int b = 0; b < 8; ++b) {
                    const int64_t j = j0 + int64_t(b) * blockDim.x;
                    if (j < n4) v[b] = s4[j];
                }
#pragma unroll
                for (int b = 0; b < 8; ++b) {
                    const int64_t j = j0 + int64_t(b) * blockDim.x;
                    if (j < n4) d4[j] = v[b];
                }
            }
        };
        copy4(x, xs, width / 4);
        copy4(a.norm, ns, d / 4);
    }
    const float* xc = staged ? xs : x;
    const float* nc = staged ? ns : a.norm;
    // Every global operand of the serial part below is staged here by many threads at once: read
    // one at a time by thread 0 they formed a chain of dependent L2 round trips (~35 us per call).
    __shared__ float sbase[kMaxMix], sscale[3];
    for (int r = threadIdx.x; r < n_mix; r += blockDim.x) sbase[r] = a.base[r];
    if (threadIdx.x < (kHead ? 1 : 3)) sscale[threadIdx.x] = a.scale[threadIdx.x];
    if (a.mix_ws) {  // dot products precomputed by mhc_mix_kernel / mhc_mix_chunk_kernel (chunk partials)
        __shared__ double ss;
#pragma unroll
        for (int b = 0; b < kPartPerThread; ++b) {
            const int j = int(threadIdx.x) + b * int(blockDim.x);
            if (j < chunks * nm1) part[j] = pv[b];
        }
        __syncthreads();
        for (int r = threadIdx.x; r <= n_mix; r += blockDim.x) {
            double v = 0.0;
#pragma unroll 8
            for (int c = 0; c < chunks; ++c) v += part[c * nm1 + r];  // same order; loads issued together
            if (r < n_mix)
                m[r] = float(v);
            else
                ss = v;
        }
        __syncthreads();
        const float rho = 1.0f / sqrtf(float(ss / double(width)) + a.rms_eps);
        for (int r = threadIdx.x; r < n_mix; r += blockDim.x) m[r] *= rho;
    } else {
        double ss = 0.0;
        for (int64_t i = threadIdx.x; i < width; i += blockDim.x) ss += double(x[i]) * x[i];
        ss = block_sum_d(ss, red);
        const float rho = 1.0f / sqrtf(float(ss / double(width)) + a.rms_eps);
        for (int r = warp; r < n_mix; r += nw) {
            double acc = 0.0;
            const float* f = a.fn + int64_t(r) * width;
            for (int64_t i = lane; i < width; i += 32) acc += double(f[i]) * x[i];
            acc = warp_sum_d(acc);
            if (lane == 0) m[r] = float(acc) * rho;
        }
    }
    __syncthreads();
    // pre (warp 0), post (warp 1) and the softmax rows of the comb logits (warp 2) in parallel.
    if (threadIdx.x < n) pre[threadIdx.x] = sigmoid_f(m[threadIdx.x] * sscale[0] + sbase[threadIdx.x]) + a.hc_eps;
    if (!kHead && threadIdx.x >= 32 && threadIdx.x < 32 + n) {
        const int j = threadIdx.x - 32;
        post[j] = 2.0f * sigmoid_f(m[n + j] * sscale[1] + sbase[n + j]);
    }
    if (!kHead && threadIdx.x >= 64 && threadIdx.x < 64 + n) {
        const int j = threadIdx.x - 64;
        float mx = kNegInf;
        for (int k = 0; k < n; ++k) {
            C[j * n + k] = m[2 * n + j * n + k] * sscale[2] + sbase[2 * n + j * n + k];
            mx = fmaxf(mx, C[j * n + k]);
        }
        float sum = 0.0f;
        for (int k = 0; k < n; ++k) sum += (C[j * n + k] = expf(C[j * n + k] - mx));
        for (int k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / sum + a.hc_eps;
    }
    __syncthreads();
    // n = 4: the last warp runs the Sinkhorn and writes the coefficients while the other warps
    // collapse and normalise (their reduction syncs only them, on barrier 1), so the Sinkhorn's
    // ~40 dependent divisions are off the path of xn. Otherwise thread 0 does it serially first.
    const bool sk_warp = !kHead && n == 4;
    const int ct = sk_warp ? int(blockDim.x) - 32 : int(blockDim.x);  // collapse threads
    auto write_coeffs = [&]() {
        float* c = coeffs + t * (2 * n + n * n);
        for (int j = 0; j < n; ++j) c[j] = pre[j];
        for (int j = 0; j < n; ++j) c[n + j] = post[j];
        for (int j = 0; j < n * n; ++j) c[2 * n + j] = C[j];
    };
    if constexpr (kPrefetch) {  // every thread collapses its features into u before the roles split
#pragma unroll
        for (int c = 0; c < kPrefetchF4 / 4; ++c) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float4 v = xr[4 * j + c];
                acc.x += pre[j] * v.x;
                acc.y += pre[j] * v.y;
                acc.z += pre[j] * v.z;
                acc.w += pre[j] * v.w;
            }
            reinterpret_cast<float4*>(u)[threadIdx.x + kPrefetchThreads * c] = acc;
        }
        __syncthreads();
    }
    if (sk_warp && warp == nw - 1) {
        sinkhorn_warp4(C, a.sinkhorn_iters, a.hc_eps);
        if (lane == 0) write_coeffs();
        return;
    }
    if (threadIdx.x == 0) {
        if (!kHead) {
            if (n != 4)
                for (int it = 0; it < a.sinkhorn_iters; ++it) {
                    if (it > 0)
                        for (int j = 0; j < n; ++j) {
                            float s = 0.0f;
                            for (int k = 0; k < n; ++k) s += C[j * n + k];
                            for (int k = 0; k < n; ++k) C[j * n + k] /= (s + a.hc_eps);
                        }
                    for (int k = 0; k < n; ++k) {
                        float s = 0.0f;
                        for (int j = 0; j < n; ++j) s += C[j * n + k];
                        for (int j = 0; j < n; ++j) C[j * n + k] /= (s + a.hc_eps);
                    }
                }
            if (n != 4) write_coeffs();
        }
    }
    double su = 0.0;
    if constexpr (kPrefetch) {
        for (int i = threadIdx.x; i < d; i += ct) su += double(u[i]) * u[i];
    } else {
#pragma unroll 4
        for (int i = threadIdx.x; i < d; i += ct) {
            float acc = 0.0f;
            if (n == 4) {  // unrolled (same order): the four stream loads issue together
#pragma unroll
                for (int j = 0; j < 4; ++j) acc += pre[j] * xc[int64_t(j) * d + i];
            } else {
                for (int j = 0; j < n; ++j) acc += pre[j] * xc[int64_t(j) * d + i];
            }
            u[i] = acc;
            su += double(acc) * acc;
        }
    }
    // Sum over the ct collapse threads (warps 0 .. ct / 32 - 1), in warp order.
    su = warp_sum_d(su);
    if (lane == 0) red[warp] = su;
    asm volatile("bar.sync 1, %0;" ::"r"(ct) : "memory");
    su = 0.0;
    for (int w = 0; w < ct / 32; ++w) su += red[w];
    const float inv = 1.0f / sqrtf(float(su / double(d)) + a.rms_eps);
    float* o = xn + int64_t(blockIdx.x) * d;
    for (int i = threadIdx.x; i < d; i += ct) o[i] = u[i] * inv * nc[i];
}

// X: [T, n, d] in place; y: [T, d]; coeffs: [T, 2n + n*n]
// Grid (T, ceil(d / blockDim)): one thread per (token, feature).
__global__ void mhc_post_kernel(float* X, const float* __restrict__ y, const float* __restrict__ coeffs, int n, int d) {
    dev::pdl_begin();
    const int64_t t = blockIdx.x;
    const float* c = coeffs + t * (2 * n + n * n);
    float* x = X + t * int64_t(n) * d;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < d; i += gridDim.y * blockDim.x) {
        float xs[8];
        for (int j = 0; j < n; ++j) xs[j] = x[int64_t(j) * d + i];
        const float yv = y[t * d + i];
        for (int k = 0; k < n; ++k) {
            float acc = __fmul_rn(c[n + k], yv);  // explicit roundings: every expand form gives these bits
            for (int j = 0; j < n; ++j) acc = __fmaf_rn(c[2 * n + j * n + k], xs[j], acc);
            x[int64_t(k) * d + i] = acc;
        }
    }
}

// mhc_post_kernel for n = 4 and d % 4 == 0 with 16-byte aligned X and y: 4 features per thread as
// float4, the coefficients in registers; the same roundings in the same order (one product, then n
// fused multiply-adds, written as intrinsics in all three expand forms so the compiler's contraction
// choices cannot make them differ), so the same bits.
// Why: the generic form kept its n-long stream array in local memory and ran at ~2 TB/s on a
// 4K-token prefill step (docs/perf/ledger.md E35).
__global__ void __launch_bounds__(256)
    mhc_post4_kernel(float* X, const float* __restrict__ y, const float* __restrict__ coeffs, int d) {
    dev::pdl_begin();
    constexpr int n = 4;
    const int64_t t = blockIdx.x;
    const int i4 = int(blockIdx.y) * blockDim.x + threadIdx.x;
    if (4 * i4 >= d) return;
    const float* c = coeffs + t * (2 * n + n * n);
    float cp[n], cr[n * n];
#pragma unroll
    for (int k = 0; k < n; ++k) cp[k] = __ldg(c + n + k);
#pragma unroll
    for (int j = 0; j < n * n; ++j) cr[j] = __ldg(c + 2 * n + j);
    float4* x = reinterpret_cast<float4*>(X + t * int64_t(n) * d) + i4;
    const int d4 = d / 4;
    float4 xs[n];
#pragma unroll
    for (int j = 0; j < n; ++j) xs[j] = x[int64_t(j) * d4];
    const float4 yv = reinterpret_cast<const float4*>(y + t * d)[i4];
#pragma unroll
    for (int k = 0; k < n; ++k) {
        float4 acc =
            make_float4(__fmul_rn(cp[k], yv.x), __fmul_rn(cp[k], yv.y), __fmul_rn(cp[k], yv.z), __fmul_rn(cp[k], yv.w));
#pragma unroll
        for (int j = 0; j < n; ++j) {
            const float w = cr[j * n + k];
            acc.x = __fmaf_rn(w, xs[j].x, acc.x);
            acc.y = __fmaf_rn(w, xs[j].y, acc.y);
            acc.z = __fmaf_rn(w, xs[j].z, acc.z);
            acc.w = __fmaf_rn(w, xs[j].w, acc.w);
        }
        x[int64_t(k) * d4] = acc;
    }
}

// mhc_post fused with the next mhc_pre's mixing dots (T <= 8), grid (T, chunks): CTA (t, c) owns
// features [c F, (c + 1) F) of all n streams, thread (k, i) = (threadIdx.x / F, c F + threadIdx.x % F).
// It expands X[t, k, i] exactly as mhc_post_kernel (same operation order) and adds its element's
// products with the next site's mixing rows to the chunk partials (the apply kernel sums `chunks`
// partials per token in order; which elements form a chunk does not matter to it). Why: at batch 1
// the expand and the mixing dots are two latency-bound launches per mHC site, and the mixing
// kernel re-reads the X the expand just wrote.
template <int NM>
__global__ void __launch_bounds__(1024) mhc_post_mix_kernel(float* __restrict__ X, const float* __restrict__ y,
                                                            const float* __restrict__ coeffs, MhcArgs a, int F) {
    dev::pdl_begin();
    __shared__ double red[32][NM + 1];
    const int n = a.n, d = a.d;
    const int64_t t = blockIdx.x, width = int64_t(n) * d;
    const int k = int(threadIdx.x) / F, i = int(blockIdx.y) * F + int(threadIdx.x) % F;
    const int64_t e = int64_t(k) * d + i;  // element of the flattened row
    float fv[NM];                          // the next site's mixing rows at e: independent of X, loaded first
#pragma unroll
    for (int r = 0; r < NM; ++r) fv[r] = __ldg(a.fn + int64_t(r) * width + e);
    float* x = X + t * width;
    const float* cf = coeffs + t * (2 * n + n * n);
    float xs[8];
    for (int j = 0; j < n; ++j) xs[j] = x[int64_t(j) * d + i];
    const float yv = y[t * d + i];
    float acc = __fmul_rn(cf[n + k], yv);
    for (int j = 0; j < n; ++j) acc = __fmaf_rn(cf[2 * n + j * n + k], xs[j], acc);
    __syncthreads();  // every read of this CTA's features precedes the in-place writes
    x[e] = acc;
    double p[NM + 1];
#pragma unroll
    for (int r = 0; r < NM; ++r) p[r] = double(fv[r]) * acc;
    p[NM] = double(acc) * acc;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int r = 0; r <= NM; ++r) {
        const double v = warp_sum_d(p[r]);
        if (lane == 0) red[warp][r] = v;
    }
    __syncthreads();
    if (threadIdx.x <= NM) {
        double sum = 0.0;
        for (int w = 0; w < nw; ++w) sum += red[w][threadIdx.x];
        a.mix_ws[(t * gridDim.y + blockIdx.y) * (NM + 1) + threadIdx.x] = sum;
    }
}
}  // namespace

int mhc_mix_chunks(int T, const MhcArgs& a) {
    if (!a.mix_ws || a.n != 4 || T <= 0) return 1;
    const int64_t width = int64_t(a.n) * a.d;
    // Chunks of 256 elements up to 8 tokens (one element per thread: at batch 1 the 16384-wide
    // Flash row then spreads over 64 CTAs), 512 for decode batches. From kDmmaMinTokens (1024,
    // prefill: the FP64 tensor-core form, 256 tokens per CTA) chunks of 256 below 2048 tokens, 512
    // below 4096, else 1024 (kMixMaxChunkTok): about 256 CTAs (E50: 1024-element chunks left 128 CTAs
    // at 2K tokens). There the wish is halved until the workspace holds it, so the chunks still
    // divide the row evenly (the tensor-core form needs that; a room of, say, 43 chunks would not).
    const int64_t chunk = T <= 8     ? kMixChunk / 2
                          : T < 1024 ? kMixChunk
                          : T < 2048 ? kMixChunk / 2
                          : T < 4096 ? kMixChunk
                                     : 2 * kMixChunk;
    int64_t want = (width + chunk - 1) / chunk;
    const int64_t room = (a.mix_ws_rows > 0 ? a.mix_ws_rows : T) / T;
    if (T >= kDmmaMinTokens)
        while (want > room && want % 2 == 0) want /= 2;
    int64_t c = want < room ? want : room;
    if (c > kMaxMixChunks) c = kMaxMixChunks;
    return c < 2 ? 1 : int(c);
}

namespace {
// Dynamic shared memory of mhc_kernel; *staged when x and the norm weight fit beside the collapse
// (and are 16-B aligned for the vector copies), for up to kMaxStagedTokens tokens. Why the cap:
// staging is for the latency of a few tokens; a prefill step has thousands of CTAs, and the 80 KB
// each holds staged limits an SM to two of them (E33: 0.23 ms per call at 4K tokens).
constexpr int kMaxStagedTokens = 512;
size_t mhc_smem(const float* X, int T, const MhcArgs& a, bool* staged) {
    const size_t plain = sizeof(float) * size_t(a.d);
    const size_t full = sizeof(float) * (size_t(a.n) * a.d + 2 * size_t(a.d));
    *staged = T <= kMaxStagedTokens && a.d % 4 == 0 && reinterpret_cast<uintptr_t>(X) % 16 == 0 &&
              reinterpret_cast<uintptr_t>(a.norm) % 16 == 0 && full <= 160 * 1024;
    return *staged ? full : plain;
}

// Launches the mixing dot products (when a workspace is given); returns the chunk count used.
cudaError_t launch_mix(const float* X, const int32_t* rows, int T, const MhcArgs& a, bool head, cudaStream_t st,
                       int* chunks) {
    *chunks = 1;
    if (!a.mix_ws) return cudaSuccess;
    const int n_mix = head ? a.n : (2 + a.n) * a.n;
    const int c = mhc_mix_chunks(T, a);
    if (c > 1) {
        *chunks = c;
        // Fewer chunks than n d / 512 when the workspace is short (prefill): wider chunks, same cover.
        const int64_t width = int64_t(a.n) * a.d, ch = (width + c - 1) / c;
        const bool aligned = reinterpret_cast<uintptr_t>(a.fn) % 16 == 0 && reinterpret_cast<uintptr_t>(X) % 16 == 0;
        if (!head && !rows && T >= kDmmaMinTokens && ch <= kMixMaxChunkTok && ch % 16 == 0 && width % 4 == 0 &&
            ch * c == width && aligned) {
            const int smem = int(sizeof(float) * 24 * size_t(ch + kDmmaPad));
            cudaError_t e =
                cudaFuncSetAttribute(mhc_mix_dmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
            if (e != cudaSuccess) return e;
            const dim3 grid(unsigned(c), unsigned((T + kDmmaTokensPerCta - 1) / kDmmaTokensPerCta));
            mhc_mix_dmma_kernel<<<grid, kDmmaWarps * 32, smem, st>>>(X, a, int(ch), T);
        } else if (T > 8 && ch <= kMixMaxChunkTok && ch % 4 == 0 && width % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(a.fn) % 16 ==
                       0) {  // token groups share each staged chunk of the mixing rows
            const dim3 grid(unsigned(c), unsigned((T + kMixTokensPerCta - 1) / kMixTokensPerCta));
            const int smem = int(sizeof(float) * size_t(head ? 4 : 24) * size_t(ch));
            cudaError_t e =
                head ? cudaFuncSetAttribute(mhc_mix_tokens_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)
                     : cudaFuncSetAttribute(mhc_mix_tokens_kernel<24>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            smem);
            if (e != cudaSuccess) return e;
            if (head)
                mhc_mix_tokens_kernel<4><<<grid, kMixThreads, smem, st>>>(X, rows, a, ch, T);
            else
                mhc_mix_tokens_kernel<24><<<grid, kMixThreads, smem, st>>>(X, rows, a, ch, T);
        } else if (head) {
            mhc_mix_chunk_kernel<4><<<dim3(unsigned(T), unsigned(c)), kMixThreads, 0, st>>>(X, rows, a, ch);
        } else {
            mhc_mix_chunk_kernel<24><<<dim3(unsigned(T), unsigned(c)), kMixThreads, 0, st>>>(X, rows, a, ch);
        }
    } else {
        mhc_mix_kernel<<<dim3(unsigned(T), unsigned(n_mix + 1)), 256, 0, st>>>(X, rows, a, n_mix);
    }
    return cudaGetLastError();
}
}  // namespace

cudaError_t mhc_pre_mix(const float* X, int T, const MhcArgs& a, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    if (a.n > 8) return cudaErrorInvalidValue;
    int chunks = 1;
    return launch_mix(X, nullptr, T, a, false, st, &chunks);
}

cudaError_t mhc_pre_apply(const float* X, int T, const MhcArgs& a, float* coeffs, float* xn, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    if (a.n > 8) return cudaErrorInvalidValue;
    const int chunks = a.mix_ws ? mhc_mix_chunks(T, a) : 1;
    bool staged = false;
    const size_t smem = mhc_smem(X, T, a, &staged);
    cudaError_t e = cudaSuccess;
    if (staged && (e = cudaFuncSetAttribute(mhc_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(smem))) != cudaSuccess)
        return e;
    if (!staged && a.n == 4 && a.d == kPrefetchD && reinterpret_cast<uintptr_t>(X) % 16 == 0) {
        mhc_kernel<false, true><<<T, kPrefetchThreads, smem, st>>>(X, nullptr, a, coeffs, xn, chunks, false);
        return cudaGetLastError();
    }
    mhc_kernel<false><<<T, 256, smem, st>>>(X, nullptr, a, coeffs, xn, chunks, staged);
    return cudaGetLastError();
}

cudaError_t mhc_pre(const float* X, int T, const MhcArgs& a, float* coeffs, float* xn, cudaStream_t st) {
    const cudaError_t e = mhc_pre_mix(X, T, a, st);
    return e != cudaSuccess ? e : mhc_pre_apply(X, T, a, coeffs, xn, st);
}

cudaError_t mhc_post(float* X, const float* y, const float* coeffs, int T, int n, int d, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    if (n == 4 && d % 4 == 0 && reinterpret_cast<uintptr_t>(X) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0) {
        mhc_post4_kernel<<<dim3(unsigned(T), unsigned((d / 4 + 255) / 256)), 256, 0, st>>>(X, y, coeffs, d);
        return cudaGetLastError();
    }
    mhc_post_kernel<<<dim3(unsigned(T), unsigned((d + 255) / 256)), 256, 0, st>>>(X, y, coeffs, n, d);
    return cudaGetLastError();
}

bool mhc_post_mix_fusable(int T, const MhcArgs& next) {
    if (T <= 0 || T > 8 || next.n != 4 || !next.mix_ws) return false;
    const int c = mhc_mix_chunks(T, next);
    if (c < 2 || next.d % c) return false;
    const int threads = next.n * (next.d / c);
    return threads % 32 == 0 && threads <= 1024;
}

cudaError_t mhc_post_mix(float* X, const float* y, const float* coeffs, int T, const MhcArgs& next, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    if (!mhc_post_mix_fusable(T, next)) return cudaErrorInvalidValue;
    const int c = mhc_mix_chunks(T, next), F = next.d / c;
    mhc_post_mix_kernel<24><<<dim3(unsigned(T), unsigned(c)), unsigned(next.n * F), 0, st>>>(X, y, coeffs, next, F);
    return cudaGetLastError();
}

cudaError_t mhc_head(const float* X, const int32_t* rows, int R, const MhcArgs& a, float* out, cudaStream_t st) {
    if (R <= 0) return cudaSuccess;
    int chunks = 1;
    cudaError_t e = launch_mix(X, rows, R, a, true, st, &chunks);
    if (e != cudaSuccess) return e;
    bool staged = false;
    const size_t smem = mhc_smem(X, R, a, &staged);
    if (staged && (e = cudaFuncSetAttribute(mhc_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(smem))) != cudaSuccess)
        return e;
    mhc_kernel<true><<<R, 256, smem, st>>>(X, rows, a, nullptr, out, chunks, staged);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
