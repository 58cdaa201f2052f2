// Decode-time state on the GPU (spec §3): state reset, the sliding-window ring write (rows in the
// pool's format: f32, bf16 or the FP8 584-byte layout, model/kv_rows.h) and the gated-pooling
// compressors (token-at-a-time state machine of src/kernels/ref/compressor.cpp),
// emitting a normalised, roped compressed row exactly when a window closes ((p+1) % r == 0).
// Thread roles: one CTA (256 threads) per sequence handles its token step t; threads stride the
// state rows / channels; a block reduction gives the entry's RMSNorm.
// Shared memory: one entry (dim floats, dynamic) + 32 doubles. Bound: memory / latency (tiny
// amounts of data per token; the pooling reads kappa*r*kappa*c state elements per closed window).
// State elements are addressed through the page table (state areas may straddle pages).
#include "kernels/cuda/ops/compressor.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
__global__ void reset_zero_kernel(StepPlan plan, PagePool pool, int64_t state_elems) {
    dev::pdl_begin();
    const int s = blockIdx.y;
    if (plan.n_tok[s] <= 0 || plan.start_pos[s] != 0) return;
    const int32_t* table = seq_table(plan, s);
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < state_elems;
         e += int64_t(gridDim.x) * blockDim.x)
        *state_ptr(pool, table, e) = 0.0f;
}
__global__ void reset_gate_kernel(StepPlan plan, PagePool pool, const int64_t* off, const int64_t* len, int n_ranges) {
    dev::pdl_begin();
    const int s = blockIdx.y;
    if (plan.n_tok[s] <= 0 || plan.start_pos[s] != 0) return;
    const int32_t* table = seq_table(plan, s);
    for (int r = 0; r < n_ranges; ++r)
        for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < len[r];
             e += int64_t(gridDim.x) * blockDim.x)
            *state_ptr(pool, table, off[r] + e) = kNegInf;
}

// Pushes token p's kv/gate into compressor c; on a window end writes the finished row.
__device__ void compressor_step(const CompressorArgs& c, const PagePool& pool, const int32_t* table, int64_t tok,
                                int64_t p, const float* inv_freq, int rope_dim, float eps, float* entry, double* red) {
    const int r = c.ratio, dim = c.dim;
    const int64_t width = int64_t(c.overlap ? 2 : 1) * dim;
    const int64_t row = (c.overlap ? r : 0) + p % r;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
        *state_ptr(pool, table, c.kv_off + row * width + i) = c.kv[tok * width + i];
        *state_ptr(pool, table, c.gate_off + row * width + i) = c.gate[tok * width + i] + c.ape[(p % r) * width + i];
    }
    __syncthreads();
    if ((p + 1) % r != 0) return;  // uniform across the block
    emit_compressed_row(c, pool, table, p / r, inv_freq, rope_dim, eps, entry, red,
                        [&](int j, int ch, float* g, float* v) {
                            const int64_t off = int64_t(j) * width + int64_t(slot_half(c, j)) * dim + ch;
                            *g = *state_ptr(pool, table, c.gate_off + off);
                            *v = *state_ptr(pool, table, c.kv_off + off);
                        });
    if (c.overlap) {
        for (int64_t i = threadIdx.x; i < int64_t(r) * width; i += blockDim.x) {
            *state_ptr(pool, table, c.kv_off + i) = *state_ptr(pool, table, c.kv_off + int64_t(r) * width + i);
            *state_ptr(pool, table, c.gate_off + i) = *state_ptr(pool, table, c.gate_off + int64_t(r) * width + i);
        }
    }
    __syncthreads();
}

__global__ void write_rows_kernel(const float* src, const int64_t* dst_words, float* base, RowFormat f) {
    dev::pdl_begin();
    extern __shared__ float v[];
    const int64_t r = blockIdx.x;
    for (int i = threadIdx.x; i < f.dim; i += blockDim.x) v[i] = src[r * f.dim + i];
    __syncthreads();
    store_row_block(v, base + dst_words[r], f);
}

__global__ void kv_step_kernel(StepPlan plan, PagePool pool, KvStepArgs a) {
    dev::pdl_begin();
    extern __shared__ float entry[];
    __shared__ double red[32];
    const int s = blockIdx.x;
    if (a.t >= plan.n_tok[s]) return;
    const int32_t* table = seq_table(plan, s);
    const int64_t tok = plan.tok_begin[s] + a.t;
    const int64_t p = plan.start_pos[s] + a.t;
    const int64_t ring_row = a.ring_off + (p % a.W) * pool.main.words;
    if (pool.main.fmt == 0) {  // f32 ring rows may straddle state pages
        for (int i = threadIdx.x; i < a.D; i += blockDim.x) *state_ptr(pool, table, ring_row + i) = a.kv[tok * a.D + i];
    } else {  // packed rows lie inside one page (KvLayout)
        for (int i = threadIdx.x; i < a.D; i += blockDim.x) entry[i] = a.kv[tok * a.D + i];
        __syncthreads();
        store_row_block(entry, state_ptr(pool, table, ring_row), pool.main);
        __syncthreads();
    }
    for (int c = 0; c < a.n_comp; ++c)
        compressor_step(a.comp[c], pool, table, tok, p, a.rope_inv_freq, a.rope_dim, a.eps, entry, red);
}
}  // namespace

cudaError_t reset_state(const StepPlan& plan, const PagePool& pool, int64_t state_elems, const int64_t* gate_off,
                        const int64_t* gate_len, int n_ranges, cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    dim3 grid(64, plan.n_seqs);
    reset_zero_kernel<<<grid, 256, 0, st>>>(plan, pool, state_elems);
    DSV4_LAUNCH_RET();
    if (n_ranges > 0) reset_gate_kernel<<<grid, 256, 0, st>>>(plan, pool, gate_off, gate_len, n_ranges);
    return cudaGetLastError();
}

cudaError_t kv_step(const StepPlan& plan, const PagePool& pool, const KvStepArgs& a, cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    int max_dim = a.D > 1 ? a.D : 1;  // the entry buffer also stages packed ring rows
    for (int c = 0; c < a.n_comp; ++c) max_dim = max_dim > a.comp[c].dim ? max_dim : a.comp[c].dim;
    kv_step_kernel<<<plan.n_seqs, 256, sizeof(float) * max_dim, st>>>(plan, pool, a);
    return cudaGetLastError();
}

cudaError_t write_kv_rows(const float* src, int64_t n, const int64_t* dst_words, float* base, const RowFormat& f,
                          cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    if (n > INT32_MAX || f.dim <= 0 || f.dim - f.rope_dim > 64 * 64) return cudaErrorInvalidValue;
    write_rows_kernel<<<unsigned(n), 128, sizeof(float) * size_t(f.dim), st>>>(src, dst_words, base, f);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
