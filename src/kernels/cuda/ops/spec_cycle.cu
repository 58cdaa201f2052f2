// Speculative decoding's cycle on the device (ops.h, "spec_cycle.cu"): the plans of the MTP block's
// catch-up and draft passes written from each sequence's state header (so the host never reads the
// header, and the passes replay as graphs), the drafts moved into the verify chunk's tokens, the MTP
// ring rows the recursive drafts borrow, and the pending inputs a step leaves for the next one. The
// host form of the same cycle is RefRunner::speculative_chunk (runtime/ref_runner.cpp).
#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
constexpr int kThreads = 256;

// The sequence takes part in the cycle's MTP work: it speculates, runs in this step and is past its
// first chunk (a chunk at position 0 resets the state, whose header is stale until then).
__device__ __forceinline__ bool mtp_live(const StepPlan& plan, const SpecCycleArgs& a, int s) {
    return a.mtp[s] != 0 && plan.n_tok[s] > 0 && plan.start_pos[s] > 0;
}

__global__ void catchup_plan_kernel(StepPlan plan, PagePool pool, SpecCycleArgs a, SpecPassPlan out) {
    dev::pdl_begin();
    const int s = blockIdx.x, K1 = a.spec_tokens + 1;
    __shared__ int m_sh;
    const int32_t* table = seq_table(plan, s);
    if (threadIdx.x == 0) {
        int m = 0;
        int64_t A = 0;
        if (plan.n_tok[s] > 0 && plan.start_pos[s] > 0) {
            const int32_t len = state_word(pool, table, a.header_offset, 3);
            A = state_word(pool, table, a.header_offset, 2);
            if (a.mtp[s] && len > 0 && len <= K1 && A + len == plan.start_pos[s]) m = len;
            // Consumed here; a sequence that does not speculate keeps none (RefRunner's rule).
            set_state_word(pool, table, a.header_offset, 3, 0);
        }
        m_sh = m;
        out.tok_begin[s] = s * K1;
        out.n_tok[s] = m;
        out.start_pos[s] = m > 0 ? A : 0;
        out.logit_rows[s] = s * K1 + (m > 0 ? m - 1 : 0);
        for (int i = 0; i < K1; ++i) {
            out.pos[s * K1 + i] = int32_t(m > 0 ? A + i : 0);
            int32_t nt = 0;
            if (i + 1 < m)
                nt = int32_t(*state_ptr(pool, table, a.pending_tokens_offset + i + 1));
            else if (i + 1 == m)
                nt = plan.tokens[plan.tok_begin[s]];  // the chunk's first token (filled pending ids included)
            out.next[s * K1 + i] = nt;
        }
    }
    __syncthreads();
    const int m = m_sh;
    for (int i = 0; i < K1; ++i) {
        float* dst = out.streams + (int64_t(s) * K1 + i) * a.stream_elems;
        for (int e = threadIdx.x; e < a.stream_elems; e += blockDim.x)
            dst[e] = i < m ? *state_ptr(pool, table, a.pending_streams_offset + int64_t(i) * a.stream_elems + e) : 0.0f;
    }
}

__global__ void draft_plan_kernel(StepPlan plan, SpecCycleArgs a, SpecPassPlan out, int pass, const float* X) {
    dev::pdl_begin();
    const int s = blockIdx.x;
    const int64_t prev_row = out.logit_rows[s];  // the last pass's row of this sequence (its output streams)
    __syncthreads();                             // read by every thread before thread 0 rewrites it
    const bool on = mtp_live(plan, a, s) && a.drafts_k[s] > pass;
    const int64_t p = plan.start_pos[s] + pass - 1;
    if (threadIdx.x == 0) {
        out.tok_begin[s] = s;
        out.n_tok[s] = on ? 1 : 0;
        out.start_pos[s] = on ? p : 0;
        out.pos[s] = int32_t(on ? p : 0);
        out.logit_rows[s] = s;
        out.next[s] = a.drafts[s * a.spec_tokens + pass - 1];
    }
    const float* src = X + prev_row * a.stream_elems;
    float* dst = out.streams + int64_t(s) * a.stream_elems;
    for (int e = threadIdx.x; e < a.stream_elems; e += blockDim.x) dst[e] = src[e];
}

__global__ void take_draft_kernel(StepPlan plan, SpecCycleArgs a, const int32_t* ids, int index) {
    dev::pdl_begin();
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= plan.n_seqs || index >= a.spec_tokens) return;
    a.drafts[s * a.spec_tokens + index] = mtp_live(plan, a, s) && a.drafts_k[s] > index ? ids[s] : 0;
}

__global__ void fill_drafts_kernel(StepPlan plan, SpecCycleArgs a, int32_t* tokens) {
    dev::pdl_begin();
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= plan.n_seqs || plan.n_tok[s] <= 0) return;
    for (int j = 0; j < a.drafts_k[s]; ++j) tokens[plan.tok_begin[s] + 1 + j] = a.drafts[s * a.spec_tokens + j];
}

__global__ void mtp_ring_kernel(StepPlan plan, PagePool pool, SpecCycleArgs a, bool restore) {
    dev::pdl_begin();
    const int s = blockIdx.x, j = blockIdx.y;  // ring row of position P + j, j < k - 1
    if (!mtp_live(plan, a, s) || j >= a.drafts_k[s] - 1) return;
    const int32_t* table = seq_table(plan, s);
    const int64_t row = a.mtp_ring_offset + (plan.start_pos[s] + j) % a.mtp_ring_rows * int64_t(a.mtp_row_words);
    uint32_t* saved = a.ring_scratch + (int64_t(s) * a.spec_tokens + j) * a.mtp_row_words;
    // Word by word through the page table: an f32 ring row may straddle two state pages.
    for (int e = threadIdx.x; e < a.mtp_row_words; e += blockDim.x) {
        uint32_t* w = reinterpret_cast<uint32_t*>(state_ptr(pool, table, row + e));
        if (restore)
            *w = saved[e];
        else
            saved[e] = *w;
    }
}

__global__ void pending_write_kernel(StepPlan plan, PagePool pool, SpecCycleArgs a, const float* X) {
    dev::pdl_begin();
    const int s = blockIdx.x;
    if (a.mtp[s] == 0 || plan.n_tok[s] <= 0) return;
    const int32_t* table = seq_table(plan, s);
    const int n = plan.n_tok[s], k = a.drafts_k[s];
    // A verify chunk's positions all wait (which are kept is not known yet); other chunks leave their
    // last position waiting (the MTP pass of the step covered the ones before it).
    const int first = k > 0 ? 0 : n - 1, len = n - first;
    const int64_t t0 = plan.tok_begin[s] + first;
    if (threadIdx.x == 0) {
        set_state_word(pool, table, a.header_offset, 2, int32_t(plan.start_pos[s] + first));
        set_state_word(pool, table, a.header_offset, 3, len);
        for (int i = 0; i < len; ++i) *state_ptr(pool, table, a.pending_tokens_offset + i) = float(plan.tokens[t0 + i]);
    }
    for (int i = 0; i < len; ++i)
        for (int e = threadIdx.x; e < a.stream_elems; e += blockDim.x)
            *state_ptr(pool, table, a.pending_streams_offset + int64_t(i) * a.stream_elems + e) =
                X[(t0 + i) * a.stream_elems + e];
}

__global__ void gather_rows_kernel(const float* src, const int32_t* rows, int64_t width, float* dst) {
    dev::pdl_begin();
    const int r = blockIdx.x;
    const float* s = src + int64_t(rows[r]) * width;
    float* d = dst + int64_t(r) * width;
    for (int64_t e = threadIdx.x; e < width; e += blockDim.x) d[e] = s[e];
}
}  // namespace

cudaError_t spec_catchup_plan(const StepPlan& plan, const PagePool& pool, const SpecCycleArgs& a,
                              const SpecPassPlan& out, cudaStream_t st) {
    if (a.spec_tokens <= 0 || a.header_offset < 0) return cudaErrorInvalidValue;
    if (plan.n_seqs <= 0) return cudaSuccess;
    catchup_plan_kernel<<<unsigned(plan.n_seqs), kThreads, 0, st>>>(plan, pool, a, out);
    return cudaGetLastError();
}

cudaError_t spec_draft_plan(const StepPlan& plan, const SpecCycleArgs& a, const SpecPassPlan& out, int pass,
                            const float* X, cudaStream_t st) {
    if (pass < 1 || pass >= a.spec_tokens) return cudaErrorInvalidValue;
    if (plan.n_seqs <= 0) return cudaSuccess;
    draft_plan_kernel<<<unsigned(plan.n_seqs), kThreads, 0, st>>>(plan, a, out, pass, X);
    return cudaGetLastError();
}

cudaError_t spec_take_draft(const StepPlan& plan, const SpecCycleArgs& a, const int32_t* ids, int index,
                            cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    take_draft_kernel<<<unsigned((plan.n_seqs + 127) / 128), 128, 0, st>>>(plan, a, ids, index);
    return cudaGetLastError();
}

cudaError_t spec_fill_drafts(const StepPlan& plan, const SpecCycleArgs& a, int32_t* tokens, cudaStream_t st) {
    if (plan.n_seqs <= 0) return cudaSuccess;
    fill_drafts_kernel<<<unsigned((plan.n_seqs + 127) / 128), 128, 0, st>>>(plan, a, tokens);
    return cudaGetLastError();
}

cudaError_t spec_mtp_ring(const StepPlan& plan, const PagePool& pool, const SpecCycleArgs& a, bool restore,
                          cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.spec_tokens < 2) return cudaSuccess;
    if (!a.ring_scratch || a.mtp_ring_rows <= 0 || a.mtp_row_words <= 0) return cudaErrorInvalidValue;
    mtp_ring_kernel<<<dim3(unsigned(plan.n_seqs), unsigned(a.spec_tokens - 1)), 128, 0, st>>>(plan, pool, a, restore);
    return cudaGetLastError();
}

cudaError_t spec_pending_write(const StepPlan& plan, const PagePool& pool, const SpecCycleArgs& a, const float* X,
                               cudaStream_t st) {
    if (a.spec_tokens <= 0 || a.header_offset < 0) return cudaErrorInvalidValue;
    if (plan.n_seqs <= 0) return cudaSuccess;
    pending_write_kernel<<<unsigned(plan.n_seqs), kThreads, 0, st>>>(plan, pool, a, X);
    return cudaGetLastError();
}

cudaError_t gather_rows(const float* src, const int32_t* rows, int n, int64_t width, float* dst, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    gather_rows_kernel<<<unsigned(n), kThreads, 0, st>>>(src, rows, width, dst);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
