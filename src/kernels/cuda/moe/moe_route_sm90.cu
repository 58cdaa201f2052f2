// MoE glue kernels for decode on sm90: routing, permutation, combine. All tiny and latency-bound;
// they exist so that the expert GEMV (moe_expert_sm90.cu) reads a fixed workspace.
//
// route:   one warp per token, lane owns experts lane + 32j; sqrt(softplus) scores, bias added
//          for selection only, NaN ranks below every number, ties to the lowest index, k rounds
//          of warp arg-max. Hash layers take the ids from tid2eid.
// permute: one CTA; shared-memory histogram, serial exclusive scan, atomic slots (row order
//          within an expert is arbitrary; results do not depend on it).
// combine: one CTA per token; fixed slot order, so the output is deterministic.
#include <cmath>

#include "kernels/cuda/gemm/device_util.cuh"
#include "kernels/cuda/moe/moe_sm90.h"

namespace dsv4::cuda::sm90 {
namespace {

constexpr int kMaxExpertsPerLane = 32;  // n_experts <= 1024

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void __launch_bounds__(128) moe_route_kernel(MoeRouteArgs a) {
    const int lane = threadIdx.x & 31;
    const int t = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (t >= a.n_tokens) return;
    const int J = (a.n_experts + 31) / 32;
    float s[kMaxExpertsPerLane], key[kMaxExpertsPerLane];
#pragma unroll
    for (int j = 0; j < kMaxExpertsPerLane; ++j) {
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
    for (int r = 0; r < a.top_k; ++r) {
        int id;
        if (a.tid2eid) {
            id = a.tid2eid[int64_t(a.token_ids[t]) * a.top_k + r];
        } else {
            float bk = -INFINITY;
            int bi = 0x7fffffff;
#pragma unroll
            for (int j = 0; j < kMaxExpertsPerLane; ++j) {
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
        for (int j = 0; j < kMaxExpertsPerLane; ++j)
            if (j < J && lane + 32 * j == id) mine = s[j];
        sel[r] = __shfl_sync(0xffffffffu, mine, id & 31);
        ids[r] = id;
    }
    if (lane == 0) {
        float sum = 0.0f;
        for (int r = 0; r < a.top_k; ++r) sum += isfinite(sel[r]) ? sel[r] : 0.0f;
        for (int r = 0; r < a.top_k; ++r) {
            float w = a.route_scale * (a.norm_topk ? sel[r] / (sum + 1e-20f) : sel[r]);
            if (!isfinite(w)) w = 0.0f;
            a.topk_ids[int64_t(t) * a.top_k + r] = ids[r];
            a.topk_w[int64_t(t) * a.top_k + r] = w;
        }
    }
}

__global__ void __launch_bounds__(1024) moe_permute_kernel(MoePermuteArgs a) {
    __shared__ int cnt[1024];
    __shared__ int cur[1024];
    const int n = a.n_tokens * a.top_k;
    for (int e = threadIdx.x; e < a.n_experts; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = a.topk_ids[i];
        if (e >= 0 && e < a.n_experts) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int acc = 0, act = 0;
        for (int e = 0; e < a.n_experts; ++e) {
            cur[e] = acc;
            a.expert_offset[e] = acc;
            a.expert_count[e] = cnt[e];
            acc += cnt[e];
            if (a.active_experts && cnt[e] > 0) a.active_experts[act++] = e;
        }
        a.expert_offset[a.n_experts] = acc;
        if (a.n_active) *a.n_active = act;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = a.topk_ids[i];
        if (e < 0 || e >= a.n_experts) continue;
        const int p = atomicAdd(&cur[e], 1);
        a.perm_token[p] = i / a.top_k;
        a.perm_dst[p] = i;
        a.perm_w[p] = a.topk_w[i];
    }
}

// f32 variant: shared and out f32 (the f32 CUDA runner), same slot order.
__global__ void __launch_bounds__(256) moe_combine_f32_kernel(MoeCombineArgs a) {
    const int t = blockIdx.x;
    const float* sh = static_cast<const float*>(a.shared);
    for (int c = threadIdx.x; c < a.d / 4; c += blockDim.x) {
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int k = 0; k < a.top_k; ++k) {
            const float4 v = reinterpret_cast<const float4*>(a.y + (int64_t(t) * a.top_k + k) * a.d)[c];
            s.x += v.x;
            s.y += v.y;
            s.z += v.z;
            s.w += v.w;
        }
        if (sh) {
            const float4 v = reinterpret_cast<const float4*>(sh + int64_t(t) * a.d)[c];
            s.x += v.x;
            s.y += v.y;
            s.z += v.z;
            s.w += v.w;
        }
        reinterpret_cast<float4*>(static_cast<float*>(a.out) + int64_t(t) * a.d)[c] = s;
    }
}

__global__ void __launch_bounds__(256) moe_combine_kernel(MoeCombineArgs a) {
    const int t = blockIdx.x;
    const __nv_bfloat16* sh = static_cast<const __nv_bfloat16*>(a.shared);
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out);
    for (int c = threadIdx.x; c < a.d / 4; c += blockDim.x) {
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int k = 0; k < a.top_k; ++k) {
            const float4 v = reinterpret_cast<const float4*>(a.y + (int64_t(t) * a.top_k + k) * a.d)[c];
            s.x += v.x;
            s.y += v.y;
            s.z += v.z;
            s.w += v.w;
        }
        if (sh) {
            const uint2 v = reinterpret_cast<const uint2*>(sh + int64_t(t) * a.d)[c];
            const float2 f0 = dev::unpack_bf16x2(v.x), f1 = dev::unpack_bf16x2(v.y);
            s.x += f0.x;
            s.y += f0.y;
            s.z += f1.x;
            s.w += f1.y;
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
cudaError_t moe_combine_run(const MoeCombineArgs& a, cudaStream_t stream) {
    if (a.f32) moe_combine_f32_kernel<<<a.n_tokens, 256, 0, stream>>>(a);
    else moe_combine_kernel<<<a.n_tokens, 256, 0, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda::sm90
