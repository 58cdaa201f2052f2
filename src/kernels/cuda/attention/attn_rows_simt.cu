// Glue between the runner's paged decode state and the fast split-KV decode attention
// (kernels/cuda/attention/sparse_decode.h), per token step t (ops.h "attention/attn_rows_simt.cu"):
//   build_row_lists  one CTA per sequence: its row count (window + CSA selection / all HCA rows),
//                    its CSR start (sum of the counts of the sequences before it: O(B^2) integer
//                    adds, trivial for B <= a few hundred, and no second launch), then the pool
//                    offsets of its rows (64-bit, B09), in bytes (fp8) or bf16 elements.
//   q_rows_bf16      q of each sequence's token t, f32 -> bf16 (RNE), dense [B, H*D].
//   attn_out_rows    bf16 output -> f32 with the inverse RoPE of position p (spec §2.4).
// Fixed-capacity buffers and per-sequence guards (t >= n_tok: zero rows) keep the launches valid
// inside CUDA graphs with padded batches (B03). Bound: latency (a few KB per step).
#include <cuda_bf16.h>

#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {

struct SeqRows {
    int64_t p = 0;
    int n_win = 0, n = 0;
};

__device__ __forceinline__ SeqRows seq_rows(const StepPlan& plan, const RowListArgs& a, int s) {
    SeqRows r;
    if (a.t >= plan.n_tok[s]) return r;
    r.p = plan.start_pos[s] + a.t;
    r.n_win = int(r.p + 1 < int64_t(a.W) ? r.p + 1 : int64_t(a.W));
    int n_comp = 0;
    if (a.ratio > 0) n_comp = a.csa ? a.n_sel[s] : int((r.p + 1) / a.ratio);
    r.n = r.n_win + n_comp;
    return r;
}

__global__ void row_list_kernel(StepPlan plan, PagePool pool, RowListArgs a) {
    dev::pdl_begin();
    __shared__ int64_t red[32];
    const int s = blockIdx.x;
    int64_t before = 0;
    for (int j = threadIdx.x; j < s; j += blockDim.x) before += seq_rows(plan, a, j).n;
    for (int o = 16; o > 0; o >>= 1) before += __shfl_xor_sync(0xffffffffu, before, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = before;
    __syncthreads();
    int64_t start = 0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) start += red[w];
    const SeqRows r = seq_rows(plan, a, s);
    int64_t n = r.n;
    if (start > a.capacity) start = a.capacity;
    if (start + n > a.capacity) n = a.capacity - start;  // never with the runner's sizing; stays in bounds
    if (threadIdx.x == 0) {
        a.row_start[s] = int32_t(start);
        if (s == plan.n_seqs - 1) a.row_start[s + 1] = int32_t(start + n);
    }
    const int32_t* table = seq_table(plan, s);
    const int64_t per_word = 4 / a.unit_bytes;
    const int32_t words = pool.main.words;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        int64_t word;
        if (j < r.n_win) {
            const int64_t pos = r.p - r.n_win + 1 + j;
            if (a.stage_from && pos >= a.stage_from[s]) {
                word = a.stage_word + (int64_t(plan.tok_begin[s]) + a.t - (r.p - pos)) * words;
            } else {
                const int64_t e = a.ring_off + (pos % a.W) * words;  // state area element
                word = int64_t(table[e / pool.page_elems]) * pool.page_elems + e % pool.page_elems;
            }
        } else {
            const int64_t w = a.csa ? a.sel[int64_t(s) * a.topk + (j - r.n_win)] : (j - r.n_win);
            word = comp_row_word(pool, table, a.ratio, a.row_off, words, w);
        }
        a.offsets[start + j] = word * per_word;
    }
}

// Grid (B, ceil(hd / 2048)): 8 consecutive elements per thread, all loads issued before the
// stores. Why: one 256-thread CTA per sequence walked the 32768 q values of a Flash token in 128
// dependent load/store rounds (~30 us per layer at batch 1, measured with the op profiler).
constexpr int kQbThreads = 256, kQbPerThread = 8, kQbPerCta = kQbThreads * kQbPerThread;
__global__ void q_bf16_kernel(StepPlan plan, int t, const float* q, int hd, __nv_bfloat16* qb) {
    dev::pdl_begin();
    const int s = blockIdx.x;
    const bool live = t < plan.n_tok[s];
    const float* src = q + (int64_t(plan.tok_begin[s]) + t) * hd;
    __nv_bfloat16* dst = qb + int64_t(s) * hd;
    const int i0 = blockIdx.y * kQbPerCta + threadIdx.x * kQbPerThread;
    float v[kQbPerThread];
#pragma unroll
    for (int j = 0; j < kQbPerThread; ++j) v[j] = live && i0 + j < hd ? src[i0 + j] : 0.0f;
#pragma unroll
    for (int j = 0; j < kQbPerThread; ++j)
        if (i0 + j < hd) dst[i0 + j] = __float2bfloat16_rn(v[j]);
}

__global__ void out_rows_kernel(StepPlan plan, int t, const __nv_bfloat16* ob, int H, int D, const float* inv_freq,
                                int rope_dim, float* out) {
    dev::pdl_begin();
    extern __shared__ float o[];  // [D]
    const int s = blockIdx.x, h = blockIdx.y;
    if (t >= plan.n_tok[s]) return;
    const int64_t tok = plan.tok_begin[s] + t;
    const int64_t p = plan.start_pos[s] + t;
    const __nv_bfloat16* src = ob + (int64_t(s) * H + h) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) o[i] = __bfloat162float(src[i]);
    __syncthreads();
    for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) rope_pair(o, D, rope_dim, inv_freq, p, i, true);
    __syncthreads();
    for (int i = threadIdx.x; i < D; i += blockDim.x) out[(tok * H + h) * D + i] = o[i];
}

}  // namespace

cudaError_t build_row_lists(const StepPlan& plan, const PagePool& pool, const RowListArgs& a, cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    if (a.unit_bytes != 1 && a.unit_bytes != 2 && a.unit_bytes != 4) return cudaErrorInvalidValue;
    row_list_kernel<<<plan.n_seqs, 256, 0, st>>>(plan, pool, a);
    return cudaGetLastError();
}

cudaError_t q_rows_bf16(const StepPlan& plan, int t, const float* q, int hd, void* qb, cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    q_bf16_kernel<<<dim3(unsigned(plan.n_seqs), unsigned((hd + kQbPerCta - 1) / kQbPerCta)), kQbThreads, 0, st>>>(
        plan, t, q, hd, static_cast<__nv_bfloat16*>(qb));
    return cudaGetLastError();
}

cudaError_t attn_out_rows(const StepPlan& plan, int t, const void* ob, int H, int D, const float* inv_freq,
                          int rope_dim, float* out, cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    if (D > 1024) return cudaErrorInvalidValue;
    out_rows_kernel<<<dim3(plan.n_seqs, H), 128, sizeof(float) * D, st>>>(
        plan, t, static_cast<const __nv_bfloat16*>(ob), H, D, inv_freq, rope_dim, out);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
