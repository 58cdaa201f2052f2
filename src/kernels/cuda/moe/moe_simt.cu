// MoE (spec §2.9) on the GPU: routing (sqrt(softplus) scores, bias top-k or tid2eid hash, NaN-safe
// weights: B12), token permutation (expert histogram, offsets, permuted slots), expert GEMMs on
// checkpoint-format weights (MXFP4 / FP8-block / BF16 dequantised in the kernel) with the SwiGLU
// clamp, and the combine. The order of assignments within an expert depends on atomics, but every
// assignment is computed independently and combined per token in k order: results are exact and
// run-to-run identical.
// Thread roles: route — one thread per token; permutation — one thread per assignment (counts
// and cursors by atomics), one thread for the E-long scan; expert GEMMs — grid (expert, column
// tile), warp per output column looping over the expert's tokens, lanes striding K.
// Shared memory: none. Bound: expert weight bandwidth at decode.
// cuda::moe_experts / moe_combine (fast_path.cpp) use the MXFP4 decode kernels (kernels/cuda/moe)
// when they are legal and these kernels otherwise.
#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/ops/simt.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
constexpr int kWarps = 8;

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void route_kernel(MoeArgs a) {
    dev::pdl_begin();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= a.T) return;
    const float* lg = a.logits + int64_t(t) * a.E;
    int32_t* ids = a.ids + int64_t(t) * a.K;
    float* wts = a.wts + int64_t(t) * a.K;
    if (a.tid2eid) {
        for (int k = 0; k < a.K; ++k) ids[k] = a.tid2eid[int64_t(a.tokens[t]) * a.K + k];
    } else {
        for (int k = 0; k < a.K; ++k) {
            int best = -1;
            float bk = kNegInf;
            for (int e = 0; e < a.E; ++e) {
                bool taken = false;
                for (int j = 0; j < k; ++j) taken |= ids[j] == e;
                if (taken) continue;
                float key = sqrtf(softplus_f(lg[e])) + a.bias[e];
                if (isnan(key)) key = kNegInf;
                if (best < 0 || key > bk) best = e, bk = key;
            }
            ids[k] = best;
        }
    }
    double sum = 0.0;
    for (int k = 0; k < a.K; ++k) {
        const float s = sqrtf(softplus_f(lg[ids[k]]));
        sum += isfinite(s) ? s : 0.0f;
    }
    for (int k = 0; k < a.K; ++k) {
        const float s = sqrtf(softplus_f(lg[ids[k]]));
        float w = a.route_scale;
        if (a.norm_topk)
            w *= float(s / (sum + 1e-20));
        else
            w *= s;
        if (!isfinite(w)) w = 0.0f;
        wts[k] = w;
    }
}

__global__ void count_kernel(MoeArgs a) {
    dev::pdl_begin();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.T * a.K) atomicAdd(&a.counts[a.ids[i]], 1);
}
__global__ void scan_kernel(MoeArgs a) {
    dev::pdl_begin();
    int32_t* cursor = a.counts + a.E;
    int32_t* off = a.counts + 2 * a.E;
    int acc = 0;
    for (int e = 0; e < a.E; ++e) {
        off[e] = acc;
        cursor[e] = 0;
        acc += a.counts[e];
    }
    off[a.E] = acc;
}
__global__ void scatter_kernel(MoeArgs a) {
    dev::pdl_begin();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.T * a.K) return;
    const int e = a.ids[i];
    const int pos = a.counts[2 * a.E + e] + atomicAdd(&a.counts[a.E + e], 1);
    a.perm[pos] = i;
    a.slot[i] = pos;
}

// h[j, i] = silu(min(W1 x, lim)) * clamp(W3 x) * weight for the expert's permuted rows j.
__global__ void expert_up_kernel(MoeArgs a) {
    dev::pdl_begin();
    const int e = blockIdx.x, lane = threadIdx.x & 31;
    const int i = blockIdx.y * kWarps + (threadIdx.x >> 5);
    if (i >= a.I) return;
    const int32_t* off = a.counts + 2 * a.E;
    for (int j = off[e]; j < off[e + 1]; ++j) {
        const int asg = a.perm[j];
        const float* x = a.x + int64_t(asg / a.K) * a.d;
        float g = 0.0f, u = 0.0f;
        for (int k = lane; k < a.d; k += 32) {
            g += w_at(a.w1, e, i, k) * x[k];
            u += w_at(a.w3, e, i, k) * x[k];
        }
        g = warp_sum(g);
        u = warp_sum(u);
        if (lane == 0) {
            if (a.limit > 0) {
                g = fminf(g, a.limit);
                u = fminf(fmaxf(u, -a.limit), a.limit);
            }
            a.h[int64_t(j) * a.I + i] = silu_f(g) * u * a.wts[asg];
        }
    }
}

// yp[j, n] = W2[n, :] . h[j, :]
__global__ void expert_down_kernel(MoeArgs a) {
    dev::pdl_begin();
    const int e = blockIdx.x, lane = threadIdx.x & 31;
    const int n = blockIdx.y * kWarps + (threadIdx.x >> 5);
    if (n >= a.d) return;
    const int32_t* off = a.counts + 2 * a.E;
    for (int j = off[e]; j < off[e + 1]; ++j) {
        const float* h = a.h + int64_t(j) * a.I;
        float acc = 0.0f;
        for (int k = lane; k < a.I; k += 32) acc += w_at(a.w2, e, n, k) * h[k];
        acc = warp_sum(acc);
        if (lane == 0) a.yp[int64_t(j) * a.d + n] = acc;
    }
}

__global__ void combine_kernel(MoeArgs a, const float* shared, float* out) {
    dev::pdl_begin();
    const int t = blockIdx.x;
    for (int n = threadIdx.x; n < a.d; n += blockDim.x) {
        float y = 0.0f;
        for (int k = 0; k < a.K; ++k) {
            // Expert parallel: ids hold local ids, ep_count for another rank's expert (row not computed).
            if (a.ep_count > 0 && a.ids[t * a.K + k] == a.ep_count) continue;
            y += a.yp[int64_t(a.slot[t * a.K + k]) * a.d + n];
        }
        out[int64_t(t) * a.d + n] = shared ? y + shared[int64_t(t) * a.d + n] : y;
    }
}

// One CTA per assignment (see moe_ep_localize).
__global__ void ep_localize_kernel(int32_t* ids, int first, int count, int drop, float* zero_rows, int d) {
    dev::pdl_begin();
    const int i = blockIdx.x;
    const int e = ids[i];
    __syncthreads();  // every thread has read ids[i] before thread 0 rewrites it
    const bool local = e >= first && e < first + count;
    if (threadIdx.x == 0) ids[i] = local ? e - first : drop;
    if (!local && zero_rows)
        for (int c = threadIdx.x; c < d; c += blockDim.x) zero_rows[int64_t(i) * d + c] = 0.0f;
}
}  // namespace

cudaError_t moe_experts_simt(const MoeArgs& a, cudaStream_t st) {
    if (a.T <= 0) return cudaSuccess;
    route_kernel<<<(a.T + 127) / 128, 128, 0, st>>>(a);
    DSV4_LAUNCH_RET();
    const int n = a.T * a.K;
    // Expert parallel: local ids, other ranks' experts in one extra bucket (index ep_count) that
    // the permutation fills but no expert kernel computes; counts [3E+1] holds ep_count + 1 buckets.
    MoeArgs b = a;
    int n_compute = a.E;
    if (a.ep_count > 0) {
        DSV4_CUDA_RET(moe_ep_localize(a.ids, n, a.ep_first, a.ep_count, a.ep_count, nullptr, 0, st));
        b.E = a.ep_count + 1;
        n_compute = a.ep_count;
    }
    DSV4_CUDA_RET(cudaMemsetAsync(b.counts, 0, sizeof(int32_t) * b.E, st));
    count_kernel<<<(n + 255) / 256, 256, 0, st>>>(b);
    DSV4_LAUNCH_RET();
    scan_kernel<<<1, 1, 0, st>>>(b);
    DSV4_LAUNCH_RET();
    scatter_kernel<<<(n + 255) / 256, 256, 0, st>>>(b);
    DSV4_LAUNCH_RET();
    expert_up_kernel<<<dim3(n_compute, (a.I + kWarps - 1) / kWarps), kWarps * 32, 0, st>>>(b);
    DSV4_LAUNCH_RET();
    expert_down_kernel<<<dim3(n_compute, (a.d + kWarps - 1) / kWarps), kWarps * 32, 0, st>>>(b);
    return cudaGetLastError();
}

cudaError_t moe_ep_localize(int32_t* ids, int n, int first, int count, int drop, float* zero_rows, int d,
                            cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    ep_localize_kernel<<<n, 128, 0, st>>>(ids, first, count, drop, zero_rows, d);
    return cudaGetLastError();
}

cudaError_t moe_combine_simt(const MoeArgs& a, const float* shared, float* out, cudaStream_t st) {
    if (a.T <= 0) return cudaSuccess;
    combine_kernel<<<a.T, 128, 0, st>>>(a, shared, out);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
