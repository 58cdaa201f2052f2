// Lightning indexer (spec §2.8) scores over a sequence's compressed index rows and an exact,
// deterministic top-k (B08): rank(i) = #{j : key_j > key_i or (key_j == key_i and j < i)}, NaN
// keys ranking as -inf (B12), -0 equal to +0; i is selected at position rank(i) when rank(i) < k.
// Same selection and order as ref::topk_indices. Also the greedy argmax used for sampling.
//
// Scores (IH <= 64, ID <= 128: the tiled double GEMM below, indexer_score_tiled_kernel; otherwise):
// grid (B, key chunks of kKeysPerCta); the token's queries [IH, ID] sit in shared memory
// (rows padded to ID + 1 floats: lanes on different heads hit different banks); a warp stages one
// key row and each lane owns heads lane, lane + 32, ... (double accumulation like the reference),
// one warp reduction per key. Chunks past a sequence's n_c exit at once, so the grid can be sized
// for the longest context at graph-capture time.
// Top-k: one CTA per row. A 4-pass 8-bit radix select finds the k-th largest key T (keys mapped to
// order-preserving uint32); rows above T and the lowest-index ties at T are gathered (k of them),
// then ranked among themselves — any row that beats a selected row is itself selected, so that
// rank is the global rank. O(n) passes + O(k^2 / threads) ranking; k above kRadixMaxK (a shared-
// memory bound) falls back to the O(n^2) rank pass.
#include "kernels/cuda/ops/common.cuh"

namespace dsv4::cuda {

namespace {
constexpr int kKeysPerCta = 64;
constexpr int kScoreThreads = 256;
constexpr int kTopkThreads = 1024;
constexpr int kRadixMaxK = 2048;

__device__ __forceinline__ float topk_key(float s) { return isnan(s) ? kNegInf : s; }

// Order-preserving map float -> uint32 (larger float, larger key); -0 folds onto +0 so that the
// two compare equal as floats do.
__device__ __forceinline__ uint32_t ordered_key(float s) {
    s = topk_key(s);
    if (s == 0.0f) s = 0.0f;
    const uint32_t b = __float_as_uint(s);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// O(n^2) rank pass: ranks scores[n] and writes the k best indices into idx[k], best first.
__device__ void block_topk_rank(const float* scores, int n, int k, int32_t* idx) {
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

// Radix-select top-k (k <= kRadixMaxK, k <= n); all threads of the block take part.
__device__ void block_topk_radix(const float* scores, int n, int k, int32_t* idx) {
    __shared__ uint32_t hist[256];
    __shared__ uint32_t s_prefix, s_mask;
    __shared__ int s_krem, s_gt, s_base;
    __shared__ int warp_cnt[kTopkThreads / 32];
    // Selected rows as (key << 32 | ~index): one 64-bit compare orders by key, then lower index.
    __shared__ uint64_t cand[kRadixMaxK];
    if (threadIdx.x == 0) s_prefix = 0, s_mask = 0, s_krem = k, s_gt = 0, s_base = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        const uint32_t prefix = s_prefix, mask = s_mask;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const uint32_t u = ordered_key(scores[i]);
            if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
        }
        __syncthreads();
        // The bin holding the krem-th largest key, scanning from bin 255 down: warp 0 splits the 256
        // bins into 32 runs of 8 (lane l: bins 255-8l .. 248-8l), scans the run sums across lanes,
        // and the first lane whose inclusive sum reaches krem walks its own 8 bins. Same bin as
        // the serial walk (which a single thread took ~4 us per pass to do).
        if (threadIdx.x < 32) {
            const int lane = threadIdx.x, hi = 255 - 8 * lane, krem = s_krem;
            int run = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) run += int(hist[hi - j]);
            int inc = run;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int v = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += v;
            }
            const unsigned hit = __ballot_sync(0xffffffffu, inc >= krem);
            if (lane == (hit ? __ffs(hit) - 1 : 31)) {
                int cum = inc - run, b = hi;
                for (; b > 0; --b) {
                    if (cum + int(hist[b]) >= krem) break;
                    cum += int(hist[b]);
                }
                s_krem = krem - cum;
                s_prefix = prefix | (uint32_t(b) << shift);
                s_mask = mask | (255u << shift);
            }
        }
        __syncthreads();
    }
    const uint32_t T = s_prefix;  // the k-th largest key; s_krem rows equal to T are still needed
    const int krem = s_krem;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const uint32_t u = ordered_key(scores[i]);
        if (u > T) {
            const int pos = atomicAdd(&s_gt, 1);
            cand[pos] = (uint64_t(u) << 32) | uint32_t(~uint32_t(i));
        }
    }
    __syncthreads();
    const int n_gt = k - krem;  // == s_gt
    // Ties at T in index order: block-wide exclusive scan of the tie flags, chunk by chunk.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int c0 = 0; c0 < n && s_base < krem; c0 += blockDim.x) {
        const int i = c0 + threadIdx.x;
        const bool tie = i < n && ordered_key(scores[i]) == T;
        const unsigned m = __ballot_sync(0xffffffffu, tie);
        if (lane == 0) warp_cnt[warp] = __popc(m);
        __syncthreads();
        int before = s_base;
        for (int w = 0; w < warp; ++w) before += warp_cnt[w];
        before += __popc(m & ((1u << lane) - 1u));
        if (tie && before < krem) cand[n_gt + before] = (uint64_t(T) << 32) | uint32_t(~uint32_t(i));
        __syncthreads();
        if (threadIdx.x == 0)
            for (int w = 0; w < nw; ++w) s_base += warp_cnt[w];
        __syncthreads();
    }
    // Rank among the k selected rows (distinct as packed pairs). Two threads per row when k is at
    // most half the block, each counting half of the others; the loop is unrolled so the shared
    // loads pipeline.
    __syncthreads();
    const int split = 2 * k <= int(blockDim.x) ? 2 : 1;
    const int c = int(threadIdx.x) / split, half = int(threadIdx.x) % split;
    int rank = 0;
    uint64_t me = 0;
    if (c < k) {
        me = cand[c];
        const int d0 = half * ((k + 1) / 2), d1 = split == 1 ? k : (half == 0 ? (k + 1) / 2 : k);
#pragma unroll 8
        for (int d = d0; d < d1; ++d) rank += cand[d] > me;
    }
    if (split == 2) rank += __shfl_xor_sync(0xffffffffu, rank, 1);
    if (c < k && half == 0) idx[rank] = int32_t(~uint32_t(me));
    if (split == 1)
        for (int cc = c + int(blockDim.x); cc < k; cc += blockDim.x) {
            const uint64_t m2 = cand[cc];
            int r2 = 0;
#pragma unroll 8
            for (int d = 0; d < k; ++d) r2 += cand[d] > m2;
            idx[r2] = int32_t(~uint32_t(m2));
        }
}

__device__ void block_topk(const float* scores, int n, int k, int32_t* idx) {
    if (k > n) k = n;
    if (k <= 0) return;
    if (k <= kRadixMaxK && blockDim.x == kTopkThreads) block_topk_radix(scores, n, k, idx);
    else block_topk_rank(scores, n, k, idx);
}

__global__ void indexer_score_kernel(StepPlan plan, PagePool pool, IndexerArgs a) {
    const int s = blockIdx.x;
    if (a.t >= plan.n_tok[s]) return;
    const int64_t p = plan.start_pos[s] + a.t;
    const int64_t n_c = (p + 1) / a.ratio;
    const int64_t w0 = int64_t(blockIdx.y) * kKeysPerCta;
    if (w0 >= n_c) return;
    extern __shared__ float sm[];
    const int ldq = a.ID + 1;
    float* qs = sm;                                   // [IH, ID + 1]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float* kw = sm + int64_t(a.IH) * ldq + int64_t(warp) * a.ID;  // this warp's key row [ID]
    const int64_t tok = plan.tok_begin[s] + a.t;
    const float* q = a.q + tok * int64_t(a.IH) * a.ID;
    const float* hw = a.w + tok * a.IH;
    for (int i = threadIdx.x; i < a.IH * a.ID; i += blockDim.x) qs[(i / a.ID) * ldq + i % a.ID] = q[i];
    __syncthreads();
    const int32_t* table = plan.page_table + int64_t(s) * plan.pt_stride;
    float* scores = a.scores + int64_t(s) * a.max_rows;
    const int64_t w_end = n_c < w0 + kKeysPerCta ? n_c : w0 + kKeysPerCta;
    for (int64_t w = w0 + warp; w < w_end; w += nw) {
        for (int i = lane; i < a.ID; i += 32) kw[i] = load_row(pool, table, a.ratio, a.idx_row_off, pool.index, w, i);
        __syncwarp();
        double acc = 0.0;
        for (int h = lane; h < a.IH; h += 32) {
            const float* qh = qs + h * ldq;
            double dot = 0.0;
            for (int i = 0; i < a.ID; ++i) dot += double(qh[i]) * double(kw[i]);
            acc += double(hw[h]) * fmax(0.0, dot);
        }
        acc = warp_sum_d(acc);
        if (lane == 0) scores[w] = float(acc);
        __syncwarp();
    }
}

// Tiled form of the scores for IH <= 64 heads, ID <= 128: a CTA scores 64 keys against all heads
// as a small double GEMM [64 heads x ID] x [ID x 64 keys]. Thread (ty, tx) of 16 x 16 owns heads
// 4ty..4ty+3 and keys tx, tx+16, tx+32, tx+48 (16 accumulators: one broadcast 32-B load of q and
// four conflict-free 8-B loads of k per 16 DFMA). q and k are converted to double once, in shared
// memory. Why: the warp-per-key form converts every operand f32 -> f64 inside the inner loop and
// was issue-bound at ~122 us per CSA layer at batch 1 (8K context) and ~650 us at batch 64.
// Padded heads (h >= IH) have q = 0 and weight 0, contributing exactly 0. Each head's dot is summed
// over i in order with exact products (f32 x f32 fits a double), as the reference does; the sum
// over heads is regrouped (4 per thread, then 16 partials in order), a difference far below the
// final rounding to f32.
constexpr int kTileKeys = 64, kTileHeads = 64, kTileMaxID = 128;
constexpr int kQStride = kTileHeads + 2;  // doubles per i row of q (16-B aligned rows)
constexpr int kKStride = kTileKeys + 1;   // doubles per i row of k (fewer bank conflicts on the transpose)
constexpr size_t kTileSmem = sizeof(double) * (size_t(kTileMaxID) * kQStride + size_t(kTileMaxID) * kKStride +
                                               size_t(16) * kTileKeys);

__global__ void __launch_bounds__(256) indexer_score_tiled_kernel(StepPlan plan, PagePool pool, IndexerArgs a) {
    const int s = blockIdx.x;
    if (a.t >= plan.n_tok[s]) return;
    const int64_t p = plan.start_pos[s] + a.t;
    const int64_t n_c = (p + 1) / a.ratio;
    if (int64_t(blockIdx.y) * kTileKeys >= n_c) return;
    extern __shared__ __align__(16) double dsm[];
    double* qs = dsm;                              // [ID][kQStride]: qs[i][h]
    double* ks = qs + kTileMaxID * kQStride;       // [ID][kKStride]: ks[i][key]
    double* red = ks + kTileMaxID * kKStride;      // [16][64]
    __shared__ const float* rowp[kTileKeys];
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int ID = a.ID, IH = a.IH;
    const int64_t tok = plan.tok_begin[s] + a.t;
    const float* q = a.q + tok * int64_t(IH) * ID;
    const int32_t* table = plan.page_table + int64_t(s) * plan.pt_stride;
    const float* hw = a.w + tok * IH;
    constexpr int kBatch = 8;
    // Staging in batches of 8 independent loads per thread (element-at-a-time loads behind a
    // page-table lookup were a chain of dependent round trips that dominated the tile). q is
    // staged once per CTA; the CTA then walks key tiles blockIdx.y, blockIdx.y + gridDim.y, ...
    // (the grid is bounded by a few waves, not by the longest context: CTAs with nothing to do
    // still cost a launch slot each, and there were B x max_context / 256 of them).
    for (int j0 = tid; j0 < kTileHeads * ID; j0 += 256 * kBatch) {
        float v[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int j = j0 + b * 256, h = j / ID;
            v[b] = j < kTileHeads * ID && h < IH ? q[j] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int j = j0 + b * 256;
            if (j < kTileHeads * ID) qs[(j % ID) * kQStride + j / ID] = double(v[b]);
        }
    }
    double wh[4];
#pragma unroll
    for (int h = 0; h < 4; ++h) wh[h] = 4 * ty + h < IH ? double(hw[4 * ty + h]) : 0.0;
    for (int64_t w0 = int64_t(blockIdx.y) * kTileKeys; w0 < n_c; w0 += int64_t(gridDim.y) * kTileKeys) {
        const int64_t n_keys = n_c - w0 < kTileKeys ? n_c - w0 : kTileKeys;
        __syncthreads();  // the previous tile's ks / red reads are done
        if (tid < kTileKeys)
            rowp[tid] = tid < n_keys ? comp_row_ptr(pool, table, a.ratio, a.idx_row_off, pool.index.words, w0 + tid)
                                     : nullptr;
        __syncthreads();
        for (int j0 = tid; j0 < kTileKeys * ID; j0 += 256 * kBatch) {
            float v[kBatch];
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int j = j0 + b * 256, key = j / ID;
                v[b] = j < kTileKeys * ID && key < n_keys ? row_elem(rowp[key], pool.index, j % ID) : 0.0f;
            }
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int j = j0 + b * 256;
                if (j < kTileKeys * ID) ks[(j % ID) * kKStride + j / ID] = double(v[b]);
            }
        }
        __syncthreads();
        double acc[4][4];
#pragma unroll
        for (int h = 0; h < 4; ++h)
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[h][k] = 0.0;
        for (int i = 0; i < ID; ++i) {
            const double2 q01 = *reinterpret_cast<const double2*>(qs + i * kQStride + 4 * ty);
            const double2 q23 = *reinterpret_cast<const double2*>(qs + i * kQStride + 4 * ty + 2);
            const double qv[4] = {q01.x, q01.y, q23.x, q23.y};
            double kv[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) kv[k] = ks[i * kKStride + tx + 16 * k];
#pragma unroll
            for (int h = 0; h < 4; ++h)
#pragma unroll
                for (int k = 0; k < 4; ++k) acc[h][k] = fma(qv[h], kv[k], acc[h][k]);
        }
        double part[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
        for (int h = 0; h < 4; ++h)
#pragma unroll
            for (int k = 0; k < 4; ++k) part[k] += wh[h] * fmax(0.0, acc[h][k]);
#pragma unroll
        for (int k = 0; k < 4; ++k) red[ty * kTileKeys + tx + 16 * k] = part[k];
        __syncthreads();
        if (tid < n_keys) {
            double sc = 0.0;
            for (int g = 0; g < 16; ++g) sc += red[g * kTileKeys + tid];
            a.scores[int64_t(s) * a.max_rows + w0 + tid] = float(sc);
        }
    }
}

__global__ void indexer_topk_kernel(StepPlan plan, IndexerArgs a) {
    const int s = blockIdx.x;
    if (a.t >= plan.n_tok[s]) return;
    const int64_t p = plan.start_pos[s] + a.t;
    const int64_t n_c = (p + 1) / a.ratio;
    const int k = int(n_c < int64_t(a.topk) ? n_c : int64_t(a.topk));
    block_topk(a.scores + int64_t(s) * a.max_rows, int(n_c), k, a.sel + int64_t(s) * a.topk);
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

cudaError_t indexer_scores(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.max_rows <= 0) return cudaSuccess;
    if (a.IH <= kTileHeads && a.ID <= kTileMaxID) {
        cudaError_t e = cudaFuncSetAttribute(indexer_score_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(kTileSmem));
        if (e != cudaSuccess) return e;
        int dev = 0, sms = 132;
        if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
        if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
        // One CTA per SM (shared memory): about 4 waves over the batch, never more than the tiles.
        const int64_t tiles = (a.max_rows + kTileKeys - 1) / kTileKeys;
        int64_t gy = (4 * int64_t(sms) + plan.n_seqs - 1) / plan.n_seqs;
        gy = gy < 1 ? 1 : (gy > tiles ? tiles : gy);
        indexer_score_tiled_kernel<<<dim3(unsigned(plan.n_seqs), unsigned(gy)), 256, kTileSmem, st>>>(plan, pool, a);
        return cudaGetLastError();
    }
    const size_t smem = sizeof(float) * (size_t(a.IH) * size_t(a.ID + 1) + size_t(kScoreThreads / 32) * size_t(a.ID));
    if (smem > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(indexer_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   int(smem));
        if (e != cudaSuccess) return e;
    }
    const dim3 grid(unsigned(plan.n_seqs), unsigned((a.max_rows + kKeysPerCta - 1) / kKeysPerCta));
    indexer_score_kernel<<<grid, kScoreThreads, smem, st>>>(plan, pool, a);
    return cudaGetLastError();
}

cudaError_t indexer_select(const StepPlan& plan, const IndexerArgs& a, cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.max_rows <= 0) return cudaSuccess;
    indexer_topk_kernel<<<plan.n_seqs, kTopkThreads, 0, st>>>(plan, a);
    return cudaGetLastError();
}

cudaError_t indexer_topk(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, cudaStream_t st) {
    const cudaError_t e = indexer_scores(plan, pool, a, st);
    return e != cudaSuccess ? e : indexer_select(plan, a, st);
}

cudaError_t topk_rows(const float* scores, int R, int n, int k, int32_t* idx, cudaStream_t st) {
    if (R <= 0 || k <= 0) return cudaSuccess;
    topk_rows_kernel<<<R, kTopkThreads, 0, st>>>(scores, n, k, idx);
    return cudaGetLastError();
}

cudaError_t argmax_rows(const float* logits, int R, int64_t V, int32_t* out, cudaStream_t st) {
    if (R <= 0) return cudaSuccess;
    argmax_kernel<<<R, 256, 0, st>>>(logits, V, out);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
