// MoE glue kernels for decode on sm90: routing, permutation, combine. All tiny and latency-bound;
// they exist so that the expert GEMV (moe_expert_sm90.cu) reads a fixed workspace.
//
// route:   one warp per token, lane owns experts lane + 32j; sqrt(softplus) scores, bias added
//          for selection only, NaN ranks below every number, ties to the lowest index, k rounds
//          of warp arg-max. Hash layers take the ids from tid2eid.
// permute: one CTA; shared-memory histogram, block-wide exclusive scan of (count, active flag)
//          (one expert per thread), atomic slots (row order within an expert is arbitrary;
//          results do not depend on it).
// route+permute (small batches, docs/perf/ledger.md E11): one CTA routes every token (warp per token) into
//          shared memory and permutes in the same launch: one kernel and one launch gap less per
//          MoE layer, and slots in (token, k) order within each expert (deterministic).
// combine: grid (d / 1024, tokens), one float4 per thread; fixed slot order, so the output is
//          deterministic.
#include <cmath>

#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/moe/moe_sm90.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::sm90 {
namespace {

constexpr int kMaxExpertsPerLane = 32;   // n_experts <= 1024
constexpr int kFusedExpertsPerLane = 8;  // fused route+permute: n_experts <= 256 (64 registers a thread)

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Routes token t with the calling (whole) warp; lane 0 writes topk_ids / topk_w and, when
// non-null, the shared copies s_ids / s_w [t * top_k + r]. JMAX: experts per lane (n_experts <= 32 JMAX).
template <int JMAX>
__device__ void route_token(const MoeRouteArgs& a, int t, int lane, int* s_ids, float* s_w) {
    const int J = (a.n_experts + 31) / 32;
    float s[JMAX], key[JMAX];
#pragma unroll
    for (int j = 0; j < JMAX; ++j) {
        if (j >= J) break;
        const int e = lane + 32 * j;
        if (e >= a.n_experts) {  // no expert: ranks below every real one (ties go to the lower index)
            s[j] = 0.0f;
            key[j] = -INFINITY;
            continue;
        }
        s[j] = sqrtf(softplus(a.logits[int64_t(t) * a.n_experts + e]));
        const float kv = s[j] + (a.bias ? a.bias[e] : 0.0f);
        key[j] = isnan(kv) ? -INFINITY : kv;
    }
    int ids[8];
    float sel[8];
    uint32_t used = 0;
#pragma unroll
    for (int r = 0; r < 8; ++r) {  // top_k <= 8; unrolled so ids / sel stay in registers
        if (r >= a.top_k) break;
        int id;
        if (a.tid2eid) {
            id = a.tid2eid[int64_t(a.token_ids[t]) * a.top_k + r];
        } else {
            float bk = -INFINITY;
            int bi = 0x7fffffff;
#pragma unroll
            for (int j = 0; j < JMAX; ++j) {
                if (j >= J) break;
                const int e = lane + 32 * j;
                if (used & (1u << j)) continue;
                if (key[j] > bk || (key[j] == bk && e < bi)) {
                    bk = key[j];
                    bi = e;
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ok = __shfl_xor_sync(0xffffffffu, bk, o);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (ok > bk || (ok == bk && oi < bi)) {
                    bk = ok;
                    bi = oi;
                }
            }
            id = bi;
            if ((id & 31) == lane) used |= 1u << (id >> 5);
        }
        // Score of the chosen expert from its owner lane.
        float mine = 0.0f;
#pragma unroll
        for (int j = 0; j < JMAX; ++j)
            if (j < J && lane + 32 * j == id) mine = s[j];
        sel[r] = __shfl_sync(0xffffffffu, mine, id & 31);
        ids[r] = id;
    }
    if (lane == 0) {
        float sum = 0.0f;
#pragma unroll
        for (int r = 0; r < 8; ++r)
            if (r < a.top_k) sum += isfinite(sel[r]) ? sel[r] : 0.0f;
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            if (r >= a.top_k) break;
            float w = a.route_scale * (a.norm_topk ? sel[r] / (sum + 1e-20f) : sel[r]);
            if (!isfinite(w)) w = 0.0f;
            a.topk_ids[int64_t(t) * a.top_k + r] = ids[r];
            a.topk_w[int64_t(t) * a.top_k + r] = w;
            if (s_ids) {
                s_ids[t * a.top_k + r] = ids[r];
                s_w[t * a.top_k + r] = w;
            }
        }
    }
}

__global__ void __launch_bounds__(128) moe_route_kernel(MoeRouteArgs a) {
    dev::pdl_begin();
    const int t = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (t >= a.n_tokens) return;
    route_token<kMaxExpertsPerLane>(a, t, threadIdx.x & 31, nullptr, nullptr);
}

// Block-wide exclusive scan of one int2 per thread (blockDim.x == 1024, all threads call it);
// returns the exclusive prefix, *total the sum. `wsum` is 32 int2 of shared scratch.
__device__ int2 block_exclusive_scan(int2 v, int2* wsum, int2* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int2 inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int x = __shfl_up_sync(0xffffffffu, inc.x, o), y = __shfl_up_sync(0xffffffffu, inc.y, o);
        if (lane >= o) {
            inc.x += x;
            inc.y += y;
        }
    }
    if (lane == 31) wsum[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        int2 w = wsum[lane], wi = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int x = __shfl_up_sync(0xffffffffu, wi.x, o), y = __shfl_up_sync(0xffffffffu, wi.y, o);
            if (lane >= o) {
                wi.x += x;
                wi.y += y;
            }
        }
        wsum[lane] = make_int2(wi.x - w.x, wi.y - w.y);  // exclusive prefix of the warp totals
        if (lane == 31) wsum[32] = wi;
    }
    __syncthreads();
    const int2 base = wsum[warp];
    *total = wsum[32];
    return make_int2(base.x + inc.x - v.x, base.y + inc.y - v.y);
}

// Histogram -> counts, offsets (exclusive scan), active list; cnt [n_experts] holds the counts
// on entry and the running slot of each expert on exit. Called by all 1024 threads.
__device__ void permute_offsets(const MoePermuteArgs& a, int* cnt, int2* wsum) {
    const int e = threadIdx.x;
    const int c = e < a.n_experts ? cnt[e] : 0;
    int2 total;
    const int2 ex = block_exclusive_scan(make_int2(c, c > 0 ? 1 : 0), wsum, &total);
    if (e < a.n_experts) {
        a.expert_offset[e] = ex.x;
        a.expert_count[e] = c;
        cnt[e] = ex.x;
        if (a.active_experts && c > 0) a.active_experts[ex.y] = e;
    }
    if (e == 0) {
        a.expert_offset[a.n_experts] = total.x;
        if (a.n_active) *a.n_active = total.y;
    }
}

__global__ void __launch_bounds__(1024) moe_permute_kernel(MoePermuteArgs a) {
    dev::pdl_begin();
    __shared__ int cnt[1024];
    __shared__ int2 wsum[33];
    const int n = a.n_tokens * a.top_k;
    for (int e = threadIdx.x; e < a.n_experts; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = a.topk_ids[i];
        if (e >= 0 && e < a.n_experts) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    permute_offsets(a, cnt, wsum);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = a.topk_ids[i];
        if (e < 0 || e >= a.n_experts) continue;
        const int p = atomicAdd(&cnt[e], 1);
        a.perm_token[p] = i / a.top_k;
        a.perm_dst[p] = i;
        a.perm_w[p] = a.topk_w[i];
    }
}

// Fused route + permute for n_tokens * top_k <= kFusedRows and n_experts <= 256 (one CTA of 1024
// threads, so at most 64 registers a thread: the routing keeps 8 experts a lane). Measured
// (docs/perf/ledger.md E11): -13 us per layer at B = 1..16 (36..96 rows), +5 us (within the noise) at
// B = 64 (384 rows: two routing rounds per warp and the quadratic rank loop), hence 128.
constexpr int kFusedRows = 128;
__global__ void __launch_bounds__(1024) moe_route_permute_kernel(MoeRouteArgs r, MoePermuteArgs a) {
    dev::pdl_begin();
    __shared__ int cnt[1024];
    __shared__ int2 wsum[33];
    __shared__ int s_ids[kFusedRows];
    __shared__ float s_w[kFusedRows];
    const int n = a.n_tokens * a.top_k;
    for (int e = threadIdx.x; e < a.n_experts; e += blockDim.x) cnt[e] = 0;
    for (int t = threadIdx.x >> 5; t < r.n_tokens; t += 32)
        route_token<kFusedExpertsPerLane>(r, t, threadIdx.x & 31, s_ids, s_w);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = s_ids[i];
        if (e >= 0 && e < a.n_experts) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    permute_offsets(a, cnt, wsum);  // cnt[e] = first slot of expert e from here on
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = s_ids[i];
        if (e < 0 || e >= a.n_experts) continue;
        int rank = 0;  // earlier rows of the same expert: slots in (token, k) order
        for (int j = 0; j < i; ++j) rank += s_ids[j] == e;
        const int p = cnt[e] + rank;
        a.perm_token[p] = i / a.top_k;
        a.perm_dst[p] = i;
        a.perm_w[p] = s_w[i];
    }
}

__device__ __forceinline__ void add4(float4& s, const float4 v) {
    s.x += v.x;
    s.y += v.y;
    s.z += v.z;
    s.w += v.w;
}
// Columns 4c .. 4c + 3 of token t summed over its top_k expert rows of y, in slot order k = 0 ..
// top_k - 1 (both combine kernels, so their sums round alike).
__device__ __forceinline__ float4 combine_routed4(const MoeCombineArgs& a, int t, int c) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k = 0; k < a.top_k; ++k)
        add4(s, reinterpret_cast<const float4*>(a.y + (int64_t(t) * a.top_k + k) * a.d)[c]);
    return s;
}

// f32 variant: shared and out f32 (the f32 CUDA runner), same slot order.
__global__ void __launch_bounds__(256) moe_combine_f32_kernel(MoeCombineArgs a) {
    dev::pdl_begin();
    const float* sh = static_cast<const float*>(a.shared);
    for (int t = blockIdx.y; t < a.n_tokens; t += gridDim.y)  // gridDim.y <= 65535
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < a.d / 4; c += gridDim.x * blockDim.x) {
            float4 s = combine_routed4(a, t, c);
            if (sh) add4(s, reinterpret_cast<const float4*>(sh + int64_t(t) * a.d)[c]);
            reinterpret_cast<float4*>(static_cast<float*>(a.out) + int64_t(t) * a.d)[c] = s;
        }
}

__global__ void __launch_bounds__(256) moe_combine_kernel(MoeCombineArgs a) {
    dev::pdl_begin();
    const __nv_bfloat16* sh = static_cast<const __nv_bfloat16*>(a.shared);
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out);
    for (int t = blockIdx.y; t < a.n_tokens; t += gridDim.y)  // gridDim.y <= 65535
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < a.d / 4; c += gridDim.x * blockDim.x) {
            float4 s = combine_routed4(a, t, c);
            if (sh) {
                const uint2 v = reinterpret_cast<const uint2*>(sh + int64_t(t) * a.d)[c];
                const float2 f0 = dev::unpack_bf16x2(v.x), f1 = dev::unpack_bf16x2(v.y);
                add4(s, make_float4(f0.x, f0.y, f1.x, f1.y));
            }
            reinterpret_cast<uint2*>(out + int64_t(t) * a.d)[c] =
                make_uint2(dev::pack_bf16x2(s.x, s.y), dev::pack_bf16x2(s.z, s.w));
        }
}

}  // namespace

cudaError_t moe_route_run(const MoeRouteArgs& a, cudaStream_t stream) {
    moe_route_kernel<<<(a.n_tokens + 3) / 4, 128, 0, stream>>>(a);
    return cudaGetLastError();
}
cudaError_t moe_permute_run(const MoePermuteArgs& a, cudaStream_t stream) {
    moe_permute_kernel<<<1, 1024, 0, stream>>>(a);
    return cudaGetLastError();
}
bool moe_route_permute_fused(const MoeRouteArgs& r, const MoePermuteArgs& p) {
    return r.n_tokens == p.n_tokens && r.top_k == p.top_k && r.n_experts == p.n_experts && r.topk_ids == p.topk_ids &&
           r.topk_w == p.topk_w && int64_t(r.n_tokens) * r.top_k <= kFusedRows &&
           r.n_experts <= 32 * kFusedExpertsPerLane;
}
cudaError_t moe_route_permute_run(const MoeRouteArgs& r, const MoePermuteArgs& p, cudaStream_t stream) {
    if (r.n_tokens <= 0) return moe_permute_run(p, stream);
    if (!moe_route_permute_fused(r, p)) {
        const cudaError_t e = moe_route_run(r, stream);
        return e != cudaSuccess ? e : moe_permute_run(p, stream);
    }
    moe_route_permute_kernel<<<1, 1024, 0, stream>>>(r, p);
    return cudaGetLastError();
}
cudaError_t moe_combine_run(const MoeCombineArgs& a, cudaStream_t stream) {
    // One float4 of d per thread: grid (d / 1024, tokens), so a small batch still spreads over
    // several SMs (docs/perf/ledger.md E11; was one CTA per token).
    const dim3 grid((a.d / 4 + 255) / 256, a.n_tokens < 65535 ? a.n_tokens : 65535);
    if (a.f32)
        moe_combine_f32_kernel<<<grid, 256, 0, stream>>>(a);
    else
        moe_combine_kernel<<<grid, 256, 0, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda::sm90
