// Split-KV sink attention for one query token per sequence (decode, and each token step of a
// prefill chunk): rows = the window (ring) + compressed rows (HCA all, CSA the indexer's top-k).
// K = V = the shared latent row (one KV head), so a CTA stages rows once for several heads.
// Thread roles: grid (seq, head block, split); one warp per head of the block; lanes own D/32
// dims of q and of the accumulator; the CTA cooperatively stages BLOCK_T rows in shared memory,
// then each warp runs an online softmax over them. The combine kernel (grid seq x head, D
// threads) merges split partials by log-sum-exp, folds in the sink and applies the inverse RoPE.
// Shared memory: BLOCK_T x D floats (split kernel); D floats (combine). Bound: memory (each row
// is read once per CTA); splits keep the SMs busy at small batch (TARGET_CTAS, attn_variants.h).
#include "kernels/cuda/attention/attn_variants.h"
#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
constexpr int kMaxDPerLane = 16;  // D <= 512

struct RowSet {
    int64_t p = 0;
    int n_win = 0, n_rows = 0;
};

__device__ __forceinline__ RowSet row_set(const StepPlan& plan, const AttnArgs& a, int s) {
    RowSet r;
    r.p = plan.start_pos[s] + a.t;
    r.n_win = int(r.p + 1 < int64_t(a.W) ? r.p + 1 : int64_t(a.W));
    int n_comp = 0;
    if (a.ratio > 0) n_comp = a.csa ? a.n_sel[s] : int((r.p + 1) / a.ratio);
    r.n_rows = r.n_win + n_comp;
    return r;
}

__global__ void attn_split_kernel(StepPlan plan, PagePool pool, AttnArgs a, int hpc, int block_t, int splits) {
    dev::pdl_begin();
    extern __shared__ float tile[];  // [block_t, D]
    const int s = blockIdx.x, hb = blockIdx.y, split = blockIdx.z;
    if (a.t >= plan.n_tok[s]) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = hb * hpc + warp;
    const int D = a.D, dpl = D / 32;
    const int32_t* table = seq_table(plan, s);
    const RowSet rs = row_set(plan, a, s);
    const int chunk = (rs.n_rows + splits - 1) / splits;
    const int begin = split * chunk, end = min(rs.n_rows, begin + chunk);
    const int64_t tok = plan.tok_begin[s] + a.t;
    float q[kMaxDPerLane], acc[kMaxDPerLane];
    for (int j = 0; j < dpl; ++j) {
        q[j] = a.q[(tok * a.H + h) * D + lane + 32 * j];
        acc[j] = 0.0f;
    }
    float m = kNegInf, l = 0.0f;
    for (int t0 = begin; t0 < end; t0 += block_t) {
        const int nt = min(block_t, end - t0);
        for (int idx = threadIdx.x; idx < nt * D; idx += blockDim.x) {
            const int j = t0 + idx / D, i = idx % D;
            float v;
            if (j < rs.n_win) {
                const int64_t pos = rs.p - rs.n_win + 1 + j;
                v = ring_elem(pool, table, a.ring_off, pos % a.W, i);
            } else {
                const int64_t w = a.csa ? a.sel[int64_t(s) * a.topk + (j - rs.n_win)] : (j - rs.n_win);
                v = load_row(pool, table, a.ratio, a.row_off, pool.main, w, i);
            }
            tile[idx] = v;
        }
        __syncthreads();
        for (int r = 0; r < nt; ++r) {
            const float* row = tile + r * D;
            float dot = 0.0f;
            for (int j = 0; j < dpl; ++j) dot += q[j] * row[lane + 32 * j];
            dot = warp_sum(dot) * a.scale;
            const float mn = fmaxf(m, dot);
            const float corr = expf(m - mn);  // m = -inf: 0
            const float pr = expf(dot - mn);
            l = l * corr + pr;
            for (int j = 0; j < dpl; ++j) acc[j] = acc[j] * corr + pr * row[lane + 32 * j];
            m = mn;
        }
        __syncthreads();
    }
    const int64_t part = (int64_t(s) * a.H + h) * splits + split;
    for (int j = 0; j < dpl; ++j) a.part_acc[part * D + lane + 32 * j] = acc[j];
    if (lane == 0) {
        a.part_ml[part * 2] = m;
        a.part_ml[part * 2 + 1] = l;
    }
}

__global__ void attn_combine_kernel(StepPlan plan, AttnArgs a, int splits) {
    dev::pdl_begin();
    extern __shared__ float o[];  // [D]
    const int s = blockIdx.x, h = blockIdx.y;
    if (a.t >= plan.n_tok[s]) return;
    const int64_t tok = plan.tok_begin[s] + a.t;
    const int64_t p = plan.start_pos[s] + a.t;
    const int64_t base = (int64_t(s) * a.H + h) * splits;
    float m = a.sink[h];
    for (int sp = 0; sp < splits; ++sp) m = fmaxf(m, a.part_ml[(base + sp) * 2]);
    if (m == kNegInf) {
        for (int i = threadIdx.x; i < a.D; i += blockDim.x) o[i] = 0.0f;
    } else {
        float den = expf(a.sink[h] - m);
        for (int sp = 0; sp < splits; ++sp)
            den += a.part_ml[(base + sp) * 2 + 1] * expf(a.part_ml[(base + sp) * 2] - m);
        for (int i = threadIdx.x; i < a.D; i += blockDim.x) {
            float num = 0.0f;
            for (int sp = 0; sp < splits; ++sp)
                num += a.part_acc[(base + sp) * a.D + i] * expf(a.part_ml[(base + sp) * 2] - m);
            o[i] = num / den;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < a.rope_dim / 2; i += blockDim.x)
        rope_pair(o, a.D, a.rope_dim, a.inv_freq, p, i, true);
    __syncthreads();
    for (int i = threadIdx.x; i < a.D; i += blockDim.x) a.out[(tok * a.H + h) * a.D + i] = o[i];
}
}  // namespace

cudaError_t attn_decode(const StepPlan& plan, const PagePool& pool, const AttnArgs& a, const AttnVariant& v, int splits,
                        cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    if (a.D % 32 != 0 || a.D > 32 * kMaxDPerLane) return cudaErrorInvalidValue;
    const int hpc = attn_heads_per_cta(v, a.H);
    dim3 grid(plan.n_seqs, a.H / hpc, splits);
    const size_t smem = sizeof(float) * size_t(v.block_t) * a.D;
    if (smem > 48 * 1024)
        DSV4_CUDA_RET(cudaFuncSetAttribute(attn_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    attn_split_kernel<<<grid, hpc * 32, smem, st>>>(plan, pool, a, hpc, v.block_t, splits);
    DSV4_LAUNCH_RET();
    attn_combine_kernel<<<dim3(plan.n_seqs, a.H), 128, sizeof(float) * a.D, st>>>(plan, a, splits);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
