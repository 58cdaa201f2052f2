// Lightning indexer (spec §2.8) scores over a sequence's compressed index rows and an exact,
// deterministic top-k (B08): rank(i) = #{j : key_j > key_i or (key_j == key_i and j < i)}, NaN
// keys ranking as -inf (B12); i is selected at position rank(i) when rank(i) < k. Same selection
// and order as ref::topk_indices. Also the greedy argmax used for sampling.
// Thread roles: one CTA (256 threads) per sequence; warps score rows (lanes split the head dim,
// double accumulation like the reference), then every thread ranks candidates.
// Shared memory: 32 doubles. Bound: the rank pass is O(n^2) compares per sequence — fine for the
// row counts of the tests (hundreds), a radix select is needed for million-token contexts.
#include "kernels/cuda/ops/common.cuh"

namespace dsv4::cuda {

namespace {
__device__ __forceinline__ float topk_key(float s) { return isnan(s) ? kNegInf : s; }

// Ranks scores[n] and writes the k best indices into idx[k], best first.
__device__ void block_topk(const float* scores, int n, int k, int32_t* idx) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float ki = topk_key(scores[i]);
        int rank = 0;
        for (int j = 0; j < n && rank < k; ++j) {
            const float kj = topk_key(scores[j]);
            rank += (kj > ki) || (kj == ki && j < i);
        }
        if (rank < k) idx[rank] = i;
    }
}

__global__ void indexer_kernel(StepPlan plan, PagePool pool, IndexerArgs a) {
    const int s = blockIdx.x;
    if (a.t >= plan.n_tok[s]) return;
    const int32_t* table = plan.page_table + int64_t(s) * plan.pt_stride;
    const int64_t tok = plan.tok_begin[s] + a.t;
    const int64_t p = plan.start_pos[s] + a.t;
    const int64_t n_c = (p + 1) / a.ratio;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float* scores = a.scores + int64_t(s) * a.max_rows;
    const float* q = a.q + tok * int64_t(a.IH) * a.ID;
    const float* hw = a.w + tok * a.IH;
    for (int64_t w = warp; w < n_c; w += nw) {
        double acc = 0.0;
        for (int h = 0; h < a.IH; ++h) {
            double dot = 0.0;
            for (int i = lane; i < a.ID; i += 32) dot += double(q[h * a.ID + i]) * load_row(pool, table, a.ratio, a.idx_row_off, pool.index, w, i);
            dot = warp_sum_d(dot);
            acc += double(hw[h]) * fmax(0.0, dot);
        }
        if (lane == 0) scores[w] = float(acc);
    }
    __syncthreads();
    const int k = int(n_c < int64_t(a.topk) ? n_c : int64_t(a.topk));
    block_topk(scores, int(n_c), k, a.sel + int64_t(s) * a.topk);
    if (threadIdx.x == 0) a.n_sel[s] = k;
}

__global__ void topk_rows_kernel(const float* scores, int n, int k, int32_t* idx) {
    block_topk(scores + int64_t(blockIdx.x) * n, n, k, idx + int64_t(blockIdx.x) * k);
}

// logits: [R, V]; out: [R]. Reduction over (value, index) pairs: larger value, then lower index.
__global__ void argmax_kernel(const float* logits, int64_t V, int32_t* out) {
    __shared__ float bv[32];
    __shared__ int32_t bi[32];
    const float* x = logits + int64_t(blockIdx.x) * V;
    float best = kNegInf;
    int32_t besti = -1;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
        const float v = x[i];
        if (!isnan(v) && (besti < 0 || v > best)) best = v, besti = int32_t(i);
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, besti, o);
        if (oi >= 0 && (besti < 0 || ov > best || (ov == best && oi < besti))) best = ov, besti = oi;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) bv[warp] = best, bi[warp] = besti;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < int(blockDim.x >> 5); ++w)
            if (bi[w] >= 0 && (besti < 0 || bv[w] > best || (bv[w] == best && bi[w] < besti))) best = bv[w], besti = bi[w];
        out[blockIdx.x] = besti < 0 ? 0 : besti;
    }
}
}  // namespace

cudaError_t indexer_topk(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    indexer_kernel<<<plan.n_seqs, 256, 0, st>>>(plan, pool, a);
    return cudaGetLastError();
}

cudaError_t topk_rows(const float* scores, int R, int n, int k, int32_t* idx, cudaStream_t st) {
    if (R <= 0 || k <= 0) return cudaSuccess;
    topk_rows_kernel<<<R, 256, 0, st>>>(scores, n, k, idx);
    return cudaGetLastError();
}

cudaError_t argmax_rows(const float* logits, int R, int64_t V, int32_t* out, cudaStream_t st) {
    if (R <= 0) return cudaSuccess;
    argmax_kernel<<<R, 256, 0, st>>>(logits, V, out);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
