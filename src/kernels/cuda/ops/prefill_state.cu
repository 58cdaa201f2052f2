// Batched prefill state (ops.h "prefill_state.cu"): the sliding-window rows of the step staged in
// the pool's format, the compressed rows of every window a chunk closes, the compressor state rows
// and the ring write-back, each as one launch for the whole step instead of one kv_step per token.
// Thread roles: stage_kv_rows / ring_write_chunk: one CTA per row; compress_chunk: one CTA of 256
// threads per (window, sequence, compressor), the block shape of kv_step so that the pooled rows
// are bit-identical (compressor.cuh); compress_state_chunk: one CTA per (sequence, compressor).
// Bound: memory (a few KB per token), parallel over windows where kv_step was serial over tokens.
#include "kernels/cuda/ops/compressor.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void stage_rows_kernel(PagePool pool, const float* kv, int64_t stage_word) {
    dev::pdl_begin();
    extern __shared__ float v[];
    const int64_t i = blockIdx.x;
    for (int j = threadIdx.x; j < pool.main.dim; j += blockDim.x) v[j] = kv[i * pool.main.dim + j];
    __syncthreads();
    store_row_block(v, pool.base + stage_word + i * pool.main.words, pool.main);
}

// The chunk of plan entry s as positions [p0, e) and its first token index.
struct Chunk {
    int64_t p0 = 0, e = 0, tok0 = 0;
};
__device__ __forceinline__ Chunk chunk_of(const StepPlan& plan, int s) {
    Chunk c;
    c.p0 = plan.start_pos[s];
    c.e = c.p0 + plan.n_tok[s];
    c.tok0 = plan.tok_begin[s];
    return c;
}

// Gate (ape added) and kv of channel `col` (0 .. kappa*dim) of the token at position q, from the
// chunk's projections (q >= p0) or the state rows (q < p0: the open window at chunk start, rows
// (overlap ? r : 0) + q % r, or with overlap the window before it, rows 0 .. r - 1).
__device__ __forceinline__ void slot_value(const CompressorArgs& c, const PagePool& pool, const int32_t* table,
                                           const Chunk& k, int64_t q, int64_t col, float* g, float* v) {
    const int r = c.ratio;
    const int64_t width = int64_t(c.overlap ? 2 : 1) * c.dim;
    if (q >= k.p0) {
        const int64_t tok = k.tok0 + (q - k.p0);
        *g = c.gate[tok * width + col] + c.ape[(q % r) * width + col];
        *v = c.kv[tok * width + col];
        return;
    }
    const int64_t open = (k.p0 / r) * r;  // first position of the window open at chunk start
    const int64_t row = q >= open ? (c.overlap ? r : 0) + (q - open) : q - (open - r);
    *g = *state_ptr(pool, table, c.gate_off + row * width + col);
    *v = *state_ptr(pool, table, c.kv_off + row * width + col);
}

__global__ void compress_chunk_kernel(StepPlan plan, PagePool pool, KvStepArgs a) {
    dev::pdl_begin();
    extern __shared__ float entry[];
    __shared__ double red[32];
    const int s = blockIdx.y;
    if (plan.n_tok[s] <= 0) return;
    const CompressorArgs& c = a.comp[blockIdx.z];
    const Chunk k = chunk_of(plan, s);
    const int64_t w = k.p0 / c.ratio + blockIdx.x;  // windows closing in the chunk: p0 / r .. e / r - 1
    if (w >= k.e / c.ratio) return;                 // uniform across the block
    const int32_t* table = seq_table(plan, s);
    emit_compressed_row(
        c, pool, table, w, a.rope_inv_freq, a.rope_dim, a.eps, entry, red, [&](int j, int ch, float* g, float* v) {
            slot_value(c, pool, table, k, slot_pos(c, w, j), int64_t(slot_half(c, j)) * c.dim + ch, g, v);
        });
}

// Two-phase form of compress_chunk_kernel (compress_chunk with a scratch). Why: one CTA per window
// pools all its channels with 256 threads, each walking the window's slots twice in a chain of
// loads; an HCA window (128 slots) then takes ~170 us, and a 128-token prefill step has one such
// CTA per layer on an idle GPU (ledger E33: 3.5 ms of a 34 ms 20-layer step). Phase 1 pools one
// channel per thread over many CTAs; phase 2 normalises, ropes and stores each row with the block
// shape of kv_step, so the stored rows are bit-identical to the one-kernel form.
constexpr int kPoolThreads = 128;

// The scratch row of window w of chunk k: indexed by the step token that closes the window.
__device__ __forceinline__ int64_t pooled_row(const Chunk& k, int64_t w, int r, int comp, int T) {
    return int64_t(comp) * T + k.tok0 + ((w + 1) * r - 1 - k.p0);
}

// Phase 1, grid (windows, seqs, n_comp x channel groups): pooled[row][ch] = pool_channel(...).
__global__ void __launch_bounds__(kPoolThreads)
    pool_chunk_kernel(StepPlan plan, PagePool pool, KvStepArgs a, float* pooled, int T, int ld, int groups) {
    dev::pdl_begin();
    const int s = blockIdx.y;
    if (plan.n_tok[s] <= 0) return;
    const int ci = int(blockIdx.z) / groups;
    const CompressorArgs& c = a.comp[ci];
    const int ch = (int(blockIdx.z) % groups) * kPoolThreads + int(threadIdx.x);
    const Chunk k = chunk_of(plan, s);
    const int64_t w = k.p0 / c.ratio + blockIdx.x;
    if (ch >= c.dim || w >= k.e / c.ratio) return;  // no block-wide syncs below
    const int32_t* table = seq_table(plan, s);
    float* out = pooled + pooled_row(k, w, c.ratio, ci, T) * ld + ch;
    const int64_t q0 = slot_pos(c, w, 0);  // a multiple of r: slot j's ape row is j mod r
    if (q0 >= k.p0) {
        // The whole window is in the chunk: slot j is step token tok0 + (q0 - p0) + j. The same loads
        // and adds as slot_value with the addresses stepped per slot. Why: slot_value's 64-bit modulo
        // and branches were ~65 instructions per fetch, one warp per scheduler with nothing to overlap
        // (E50's ncu: 102 us for one HCA window of 128 slots).
        const int r = c.ratio, dim = c.dim;
        const int64_t width = int64_t(c.overlap ? 2 : 1) * dim;
        const float* gate = c.gate + (k.tok0 + (q0 - k.p0)) * width + ch;
        const float* kv = c.kv + (k.tok0 + (q0 - k.p0)) * width + ch;
        const float* ape = c.ape + ch;
        *out = pool_channel(c, ch, [&](int j, int, float* g, float* v) {
            const int hi = j >= r ? 1 : 0;  // slot_half: the overlap's second window reads the upper half
            const int64_t at = int64_t(j) * width + hi * dim;
            *g = gate[at] + ape[int64_t(j - hi * r) * width + hi * dim];
            *v = kv[at];
        });
        return;
    }
    *out = pool_channel(c, ch, [&](int j, int chj, float* g, float* v) {
        slot_value(c, pool, table, k, slot_pos(c, w, j), int64_t(slot_half(c, j)) * c.dim + chj, g, v);
    });
}

// Phase 2, grid (windows, seqs, n_comp), kThreads threads (kv_step's block shape).
__global__ void emit_pooled_kernel(StepPlan plan, PagePool pool, KvStepArgs a, const float* pooled, int T, int ld) {
    dev::pdl_begin();
    extern __shared__ float entry[];
    __shared__ double red[32];
    const int s = blockIdx.y;
    if (plan.n_tok[s] <= 0) return;
    const CompressorArgs& c = a.comp[blockIdx.z];
    const Chunk k = chunk_of(plan, s);
    const int64_t w = k.p0 / c.ratio + blockIdx.x;
    if (w >= k.e / c.ratio) return;  // uniform across the block
    const float* row = pooled + pooled_row(k, w, c.ratio, int(blockIdx.z), T) * ld;
    finish_compressed_row(c, pool, seq_table(plan, s), w, a.rope_inv_freq, a.rope_dim, a.eps, entry, red,
                          [&](int ch) { return row[ch]; });
}

__global__ void compress_state_kernel(StepPlan plan, PagePool pool, KvStepArgs a) {
    dev::pdl_begin();
    const int s = blockIdx.x;
    if (plan.n_tok[s] <= 0) return;
    const CompressorArgs& c = a.comp[blockIdx.y];
    const Chunk k = chunk_of(plan, s);
    const int r = c.ratio;
    const int64_t width = int64_t(c.overlap ? 2 : 1) * c.dim;
    const int32_t* table = seq_table(plan, s);
    const int64_t open_end = (k.e / r) * r;  // first position of the window open at chunk end
    if (c.overlap && open_end / r > k.p0 / r) {
        // The chunk closed a window: rows 0 .. r-1 <- the last closed window (what kv_step's copy leaves).
        const int64_t first = open_end - r;
        for (int64_t i = threadIdx.x; i < int64_t(r) * width; i += blockDim.x) {
            const int64_t q = first + i / width, col = i % width;
            float g, v;
            slot_value(c, pool, table, k, q, col, &g, &v);
            *state_ptr(pool, table, c.gate_off + i) = g;
            *state_ptr(pool, table, c.kv_off + i) = v;
        }
    }
    __syncthreads();  // the copy read rows r .. 2r-1 that the open window's tokens overwrite
    const int64_t from = open_end > k.p0 ? open_end : k.p0;
    for (int64_t i = threadIdx.x; i < (k.e - from) * width; i += blockDim.x) {
        const int64_t q = from + i / width, col = i % width;
        float g, v;
        slot_value(c, pool, table, k, q, col, &g, &v);
        const int64_t row = (c.overlap ? r : 0) + q % r;
        *state_ptr(pool, table, c.gate_off + row * width + col) = g;
        *state_ptr(pool, table, c.kv_off + row * width + col) = v;
    }
}

__global__ void ring_write_kernel(StepPlan plan, PagePool pool, KvStepArgs a, int64_t stage_word) {
    dev::pdl_begin();
    const int s = blockIdx.x;
    const int n = plan.n_tok[s];
    const int m = n < a.W ? n : a.W;
    if (int(blockIdx.y) >= m) return;
    const Chunk k = chunk_of(plan, s);
    const int64_t q = k.e - m + blockIdx.y;
    const int32_t words = pool.main.words;
    const float* src = pool.base + stage_word + (k.tok0 + (q - k.p0)) * words;
    float* dst = state_ptr(pool, seq_table(plan, s), a.ring_off + (q % a.W) * words);  // packed rows: one page
    for (int i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

cudaError_t stage_kv_rows(const PagePool& pool, const float* kv, int T, int64_t stage_word, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    if (pool.main.fmt == 0) return cudaErrorInvalidValue;  // f32 ring rows may straddle pages: kv_step only
    stage_rows_kernel<<<unsigned(T), 128, sizeof(float) * size_t(pool.main.dim), st>>>(pool, kv, stage_word);
    return cudaGetLastError();
}

cudaError_t compress_chunk(const StepPlan& plan, const PagePool& pool, const KvStepArgs& a, int max_t, cudaStream_t st,
                           float* scratch, int T, int ld) {
    if (plan.n_seqs <= 0 || a.n_comp <= 0 || max_t <= 0) return cudaSuccess;
    int r = a.comp[0].ratio, dim = a.comp[0].dim;
    for (int c = 1; c < a.n_comp; ++c) {
        r = r < a.comp[c].ratio ? r : a.comp[c].ratio;
        dim = dim > a.comp[c].dim ? dim : a.comp[c].dim;
    }
    if (r <= 0) return cudaErrorInvalidValue;
    const unsigned windows = unsigned((max_t + r - 1) / r);
    if (scratch) {
        if (ld < dim || T <= 0) return cudaErrorInvalidValue;
        const int groups = (dim + kPoolThreads - 1) / kPoolThreads;
        pool_chunk_kernel<<<dim3(windows, unsigned(plan.n_seqs), unsigned(a.n_comp * groups)), kPoolThreads, 0, st>>>(
            plan, pool, a, scratch, T, ld, groups);
        emit_pooled_kernel<<<dim3(windows, unsigned(plan.n_seqs), unsigned(a.n_comp)), kThreads, sizeof(float) * dim,
                             st>>>(plan, pool, a, scratch, T, ld);
        return cudaGetLastError();
    }
    compress_chunk_kernel<<<dim3(windows, unsigned(plan.n_seqs), unsigned(a.n_comp)), kThreads, sizeof(float) * dim,
                            st>>>(plan, pool, a);
    return cudaGetLastError();
}

cudaError_t compress_state_chunk(const StepPlan& plan, const PagePool& pool, const KvStepArgs& a, cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.n_comp <= 0) return cudaSuccess;
    compress_state_kernel<<<dim3(unsigned(plan.n_seqs), unsigned(a.n_comp)), kThreads, 0, st>>>(plan, pool, a);
    return cudaGetLastError();
}

cudaError_t ring_write_chunk(const StepPlan& plan, const PagePool& pool, const KvStepArgs& a, int64_t stage_word,
                             cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    if (pool.main.fmt == 0 || a.W <= 0) return cudaErrorInvalidValue;
    ring_write_kernel<<<dim3(unsigned(plan.n_seqs), unsigned(a.W)), 128, 0, st>>>(plan, pool, a, stage_word);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
