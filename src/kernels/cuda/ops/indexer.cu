// Lightning indexer (spec §2.8) top-k: an exact, deterministic top-k (B08) over the scores of
// indexer_scores.cu: rank(i) = #{j : key_j > key_i or (key_j == key_i and j < i)}, NaN keys ranking
// as -inf (B12), -0 equal to +0; i is selected at position rank(i) when rank(i) < k; with at most k
// rows, all of them in index order, unscored. Same selection and order as ref::index_select. Also
// the greedy argmax used for sampling.
//
// Top-k: one CTA per row. A 4-pass 8-bit radix select finds the k-th largest key T (keys mapped to
// order-preserving uint32); rows above T and the lowest-index ties at T are gathered (k of them),
// then sorted among themselves (bitonic) — any row that beats a selected row is itself selected, so
// their order is the global rank order. O(n) passes + O(k log^2 k / threads) sorting; k above
// kRadixMaxK (a shared-memory bound) falls back to the O(n^2) rank pass.
#include <algorithm>

#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/ops/indexer_filter.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
constexpr int kTopkThreads = 1024;  // the most a top-k block may have (long rows: sampling's vocabulary)
// Rows of up to kCached x 256 = 2,048 keys (the indexer's up to an 8K context; topk_rows' short rows)
// use 256 threads: a row's top-k is a chain of ~60 block barriers (radix passes, tie scan, sort), so
// several rows per SM overlap one another's barriers; at 1,024 threads one row per SM ran,
// latency-bound (ncu, ledger E53: -71% at 4K tokens). The indexer keeps 256 for longer contexts too
// (its keys are then re-read from L2 in each pass; not measured there).
constexpr int kShortRowThreads = 256;
constexpr int kCached = 8;  // keys per thread held in registers by block_topk_radix
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

// O(n^2) rank pass: ranks scores[n] and writes the k best indices into idx[k], best first (as ids[i]
// when ids is given: the scores of a candidate list, indexer_filter.h).
__device__ void block_topk_rank(const float* scores, int n, int k, int32_t* idx, const int32_t* ids) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float ki = topk_key(scores[i]);
        int rank = 0;
        for (int j = 0; j < n && rank < k; ++j) {
            const float kj = topk_key(scores[j]);
            rank += (kj > ki) || (kj == ki && j < i);
        }
        if (rank < k) idx[rank] = ids ? ids[i] : i;
    }
}

// The k-th largest of n keys (1 <= k <= n) by a 4-pass 8-bit radix select: key_of(j, i) is the key of
// element i = threadIdx.x + j blockDim.x. Returns the key T; *krem_out = how many rows equal to T belong
// to the k largest. All threads of the block take part; every thread gets T and *krem.
template <class KeyOf>
__device__ uint32_t block_radix_kth(const KeyOf& key_of, int n, int k, int* krem_out) {
    __shared__ uint32_t hist[256];
    __shared__ uint32_t s_prefix, s_mask;
    __shared__ int s_krem;
    if (threadIdx.x == 0) s_prefix = 0, s_mask = 0, s_krem = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        const uint32_t prefix = s_prefix, mask = s_mask;
        for (int i = threadIdx.x, j = 0; i < n; i += blockDim.x, ++j) {
            const uint32_t u = key_of(j, i);
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
    *krem_out = s_krem;
    return s_prefix;
}

// Radix-select top-k (k <= kRadixMaxK, k <= n); all threads of the block take part. ids: as block_topk_rank.
__device__ void block_topk_radix(const float* scores, int n, int k, int32_t* idx, const int32_t* ids) {
    __shared__ int s_gt, s_base;
    __shared__ int warp_cnt[kTopkThreads / 32];
    // Selected rows as (key << 32 | ~index): one 64-bit compare orders by key, then lower index.
    __shared__ uint64_t cand[kRadixMaxK];
    if (threadIdx.x == 0) s_gt = 0, s_base = 0;
    // Up to kCached keys per thread stay in registers for all six passes over the row (element
    // threadIdx.x + j blockDim.x in kc[j]), loaded at once: re-reading scores from L2 in every pass
    // was a chain of ~12 dependent round trips per row. Longer rows read them again each pass.
    const bool cached = n <= kCached * int(blockDim.x);
    uint32_t kc[kCached];
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
        const int i = int(threadIdx.x) + j * int(blockDim.x);
        kc[j] = cached && i < n ? ordered_key(scores[i]) : 0u;
    }
    // Key of element i = threadIdx.x + j blockDim.x (j < kCached when cached).
    auto key_of = [&](int j, int i) -> uint32_t {
        if (cached) {
            uint32_t v = 0;
#pragma unroll
            for (int jj = 0; jj < kCached; ++jj) v = jj == j ? kc[jj] : v;
            return v;
        }
        return ordered_key(scores[i]);
    };
    int krem = 0;
    const uint32_t T = block_radix_kth(key_of, n, k, &krem);  // rows equal to T: krem still needed
    for (int i = threadIdx.x, j = 0; i < n; i += blockDim.x, ++j) {
        const uint32_t u = key_of(j, i);
        if (u > T) {
            const int pos = atomicAdd(&s_gt, 1);
            cand[pos] = (uint64_t(u) << 32) | uint32_t(~uint32_t(i));
        }
    }
    __syncthreads();
    const int n_gt = k - krem;  // == s_gt
    // Ties at T in index order: block-wide exclusive scan of the tie flags, chunk by chunk.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int c0 = 0, j = 0; c0 < n && s_base < krem; c0 += blockDim.x, ++j) {
        const int i = c0 + threadIdx.x;
        const bool tie = i < n && key_of(j, i) == T;
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
    // Order the k selected rows best first: a bitonic sort (descending) of the packed pairs, padded
    // with zeros (below every packed pair: a key is at least ordered_key(-inf) > 0) to a power of two.
    // The pairs are distinct, so the order is the rank order. Why: the O(k^2) rank count it replaces
    // (every row compared with every other, 262,144 compares at k = 512) was about 30% of the indexer's
    // prefill time (ncu, ledger E53); the sort is 45 steps of k/2 compare-exchanges at k = 512.
    __syncthreads();
    int P = 1;
    while (P < k) P <<= 1;
    for (int i = k + int(threadIdx.x); i < P; i += blockDim.x) cand[i] = 0;
    __syncthreads();
    for (int len = 2; len <= P; len <<= 1)
        for (int j = len >> 1; j > 0; j >>= 1) {
            for (int pr = threadIdx.x; pr < P / 2; pr += blockDim.x) {
                const int i = ((pr & ~(j - 1)) << 1) | (pr & (j - 1)), l = i + j;
                const bool desc = (i & len) == 0;
                const uint64_t x = cand[i], y = cand[l];
                if ((x < y) == desc) cand[i] = y, cand[l] = x;
            }
            __syncthreads();
        }
    for (int r = threadIdx.x; r < k; r += blockDim.x) {
        const int32_t i = int32_t(~uint32_t(cand[r]));
        idx[r] = ids ? ids[i] : i;
    }
}

__device__ void block_topk(const float* scores, int n, int k, int32_t* idx, const int32_t* ids = nullptr) {
    if (k > n) k = n;
    if (k <= 0) return;
    if (k <= kRadixMaxK && blockDim.x % 32 == 0 && blockDim.x <= kTopkThreads)
        block_topk_radix(scores, n, k, idx, ids);
    else
        block_topk_rank(scores, n, k, idx, ids);
}

// f.lo null: over the entry's score row. Else the filtered form (indexer_filter.h): over the exact
// scores of its candidate list (positions 0 .. n_cand of the score row), mapped back to row ids; the
// list is in row order, so ties still go to the lowest row.
__global__ void indexer_topk_kernel(StepPlan plan, IndexerArgs a, IndexerFilter f) {
    dev::pdl_begin();
    const int s = blockIdx.x;
    if (a.t >= plan.n_tok[s]) return;
    const int64_t p = plan.start_pos[s] + a.t;
    const int64_t n_c = (p + 1) / a.ratio;
    const int k = int(n_c < int64_t(a.topk) ? n_c : int64_t(a.topk));
    int32_t* sel = a.sel + int64_t(s) * a.topk;
    if (n_c <= a.topk) {  // all rows, in index order, unscored (ref::index_select)
        for (int i = threadIdx.x; i < k; i += blockDim.x) sel[i] = i;
    } else {
        const float* row = a.scores + int64_t(s) * a.max_rows;
        if (f.lo)
            block_topk(row, f.n_cand[s], k, sel, reinterpret_cast<const int32_t*>(f.lo) + int64_t(s) * a.max_rows);
        else
            block_topk(row, int(n_c), k, sel);
    }
    if (threadIdx.x == 0) a.n_sel[s] = k;
}

// Step 2 of the filtered scores (indexer_filter.h): T = the k-th largest lower bound; the rows whose
// upper bound (in the score row) is not below T (NaN bounds included) are listed, in row order, in the
// lower bounds' storage.
__global__ void indexer_candidates_kernel(StepPlan plan, IndexerArgs a, IndexerFilter f) {
    dev::pdl_begin();
    const int s = blockIdx.x;
    if (a.t >= plan.n_tok[s]) return;
    const int64_t n_c = (plan.start_pos[s] + a.t + 1) / a.ratio;
    if (n_c <= a.topk) return;  // all selected, unscored (indexer_select)
    const int n = int(n_c);
    const float* hi = a.scores + int64_t(s) * a.max_rows;
    const float* lo = f.lo + int64_t(s) * a.max_rows;
    int krem = 0;
    const uint32_t T = block_radix_kth([&](int, int i) { return ordered_key(lo[i]); }, n, a.topk, &krem);
    __shared__ int s_count;
    __shared__ int warp_cnt[kTopkThreads / 32];
    if (threadIdx.x == 0) s_count = 0;
    __syncthreads();  // every thread is past its last read of lo: the list takes its storage
    int32_t* list = reinterpret_cast<int32_t*>(f.lo) + int64_t(s) * a.max_rows;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int c0 = 0; c0 < n; c0 += blockDim.x) {
        const int i = c0 + threadIdx.x;
        bool cand = false;
        if (i < n) {
            const float h = hi[i];
            cand = isnan(h) || ordered_key(h) >= T;
        }
        const unsigned m = __ballot_sync(0xffffffffu, cand);
        if (lane == 0) warp_cnt[warp] = __popc(m);
        __syncthreads();
        int before = s_count, total = 0;
        for (int w = 0; w < nw; ++w) before += w < warp ? warp_cnt[w] : 0, total += warp_cnt[w];
        if (cand) list[before + __popc(m & ((1u << lane) - 1u))] = i;
        __syncthreads();  // warp_cnt and s_count read by every thread before they change
        if (threadIdx.x == 0) s_count += total;
    }
    __syncthreads();
    if (threadIdx.x == 0) f.n_cand[s] = s_count;
}

__global__ void topk_rows_kernel(const float* scores, int n, int k, int32_t* idx) {
    dev::pdl_begin();
    block_topk(scores + int64_t(blockIdx.x) * n, n, k, idx + int64_t(blockIdx.x) * k);
}

// logits: [R, V]; out: [R]. Reduction over (value, index) pairs: larger value, then lower index.
__global__ void argmax_kernel(const float* logits, int64_t V, int32_t* out) {
    dev::pdl_begin();
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
            if (bi[w] >= 0 && (besti < 0 || bv[w] > best || (bv[w] == best && bi[w] < besti)))
                best = bv[w], besti = bi[w];
        out[blockIdx.x] = besti < 0 ? 0 : besti;
    }
}

// The split form: each (row, part) CTA reduces one slice of the row to a 64-bit key whose order is
// the pair order (value bits made monotonic in the high word, ~index in the low word: larger value,
// then lower index; -0 counted as +0; NaN never a key, so key 0 means "no number"), then one warp per
// row takes the largest key. Why: one CTA per row reads a 129,280-wide vocabulary row with a single
// SM's latency chain (196 us at batch 1 on the H100, ledger E59); split over kArgmaxParts CTAs the
// row is read by the whole GPU.
__device__ __forceinline__ unsigned long long argmax_key(float v, int64_t i) {
    uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (static_cast<unsigned long long>(u) << 32) | (0xFFFFFFFFull - static_cast<unsigned long long>(i));
}

__global__ void argmax_part_kernel(const float* logits, int64_t V, int parts, unsigned long long* ws) {
    dev::pdl_begin();
    __shared__ unsigned long long warp_best[32];
    const int row = blockIdx.y, part = blockIdx.x;
    const int64_t len = (V + parts - 1) / parts, lo = int64_t(part) * len, hi = lo + len < V ? lo + len : V;
    const float* x = logits + int64_t(row) * V;
    unsigned long long best = 0;
#pragma unroll 4
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const float v = x[i];
        if (!isnan(v)) best = max(best, argmax_key(v, i));
    }
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < int(blockDim.x >> 5); ++w) best = max(best, warp_best[w]);
        ws[int64_t(row) * parts + part] = best;
    }
}

__global__ void argmax_join_kernel(const unsigned long long* ws, int parts, int32_t* out) {
    dev::pdl_begin();
    const int row = blockIdx.x;
    unsigned long long best = 0;
    for (int p = threadIdx.x; p < parts; p += 32) best = max(best, ws[int64_t(row) * parts + p]);
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    if (threadIdx.x == 0) out[row] = best == 0 ? 0 : int32_t(0xFFFFFFFFull - (best & 0xFFFFFFFFull));
}
}  // namespace

cudaError_t indexer_select(const StepPlan& plan, const IndexerArgs& a, cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.max_rows <= 0) return cudaSuccess;
    indexer_topk_kernel<<<plan.n_seqs, kShortRowThreads, 0, st>>>(plan, a, IndexerFilter{});
    return cudaGetLastError();
}

cudaError_t indexer_select_listed(const StepPlan& plan, const IndexerArgs& a, const IndexerFilter& f, cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.max_rows <= 0) return cudaSuccess;
    if (!f.lo || !f.n_cand) return cudaErrorInvalidValue;
    indexer_topk_kernel<<<plan.n_seqs, kShortRowThreads, 0, st>>>(plan, a, f);
    return cudaGetLastError();
}

cudaError_t indexer_candidates(const StepPlan& plan, const IndexerArgs& a, const IndexerFilter& f, cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.max_rows <= 0) return cudaSuccess;
    indexer_candidates_kernel<<<plan.n_seqs, kShortRowThreads, 0, st>>>(plan, a, f);
    return cudaGetLastError();
}

cudaError_t indexer_topk(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, cudaStream_t st) {
    const cudaError_t e = indexer_scores(plan, pool, a, st);
    return e != cudaSuccess ? e : indexer_select(plan, a, st);
}

cudaError_t topk_rows(const float* scores, int R, int n, int k, int32_t* idx, cudaStream_t st) {
    if (R <= 0 || k <= 0) return cudaSuccess;
    const int threads = n <= kCached * kShortRowThreads ? kShortRowThreads : kTopkThreads;
    topk_rows_kernel<<<R, threads, 0, st>>>(scores, n, k, idx);
    return cudaGetLastError();
}

cudaError_t argmax_rows(const float* logits, int R, int64_t V, int32_t* out, cudaStream_t st, unsigned long long* ws) {
    if (R <= 0) return cudaSuccess;
    if (!ws || V > 0xFFFFFFFFll) {
        argmax_kernel<<<R, 256, 0, st>>>(logits, V, out);
        return cudaGetLastError();
    }
    // Slices of about 2,048 entries (8 per thread of 256), at most kArgmaxParts of them (129,280: 64 x 2,020).
    const int parts = int(std::min<int64_t>(kArgmaxParts, std::max<int64_t>(1, (V + 2047) / 2048)));
    argmax_part_kernel<<<dim3(unsigned(parts), unsigned(R)), 256, 0, st>>>(logits, V, parts, ws);
    DSV4_LAUNCH_RET();
    argmax_join_kernel<<<R, 32, 0, st>>>(ws, parts, out);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
