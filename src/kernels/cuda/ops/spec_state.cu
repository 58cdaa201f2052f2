// Speculative decoding's verify-chunk backup and rollback on the device (ops.h, spec_backup /
// spec_rollback): the CPU runner's model/spec_state.cpp over the same regions, through the page table.
// One CTA per (sequence, region) copies that region's rows; a second launch, one thread per sequence,
// updates the header once every CTA has read it.
#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
constexpr int kThreads = 128;

// State element e of one sequence, through its page table.
struct DevState {
    const PagePool* p;
    const int32_t* table;
    __device__ float& operator()(int64_t e) { return *state_ptr(*p, table, e); }
};

__global__ void spec_backup_kernel(StepPlan plan, PagePool pool, SpecStateArgs a) {
    dev::pdl_begin();
    const int s = blockIdx.x, r = blockIdx.y;
    const int64_t n = plan.n_tok[s];
    if (n <= 0 || n > a.spec_tokens + 1) return;  // no chunk, or not a verify chunk (its backup would overflow)
    DevState at{&pool, seq_table(plan, s)};
    spec_region_backup(at, a.regions[r], a.spec_tokens, plan.start_pos[s], n, threadIdx.x, blockDim.x);
}

__global__ void spec_backup_header_kernel(StepPlan plan, PagePool pool, SpecStateArgs a) {
    dev::pdl_begin();
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= plan.n_seqs || plan.n_tok[s] <= 0 || plan.n_tok[s] > a.spec_tokens + 1) return;
    const int32_t* table = seq_table(plan, s);
    set_state_word(pool, table, a.header_offset, 0, int32_t(plan.start_pos[s]));
    set_state_word(pool, table, a.header_offset, 1, plan.n_tok[s]);
}

__global__ void spec_rollback_kernel(StepPlan plan, PagePool pool, SpecStateArgs a) {
    dev::pdl_begin();
    const int s = blockIdx.x, r = blockIdx.y;
    if (plan.n_tok[s] <= 0) return;
    const int32_t* table = seq_table(plan, s);
    const int64_t v0 = state_word(pool, table, a.header_offset, 0), n = state_word(pool, table, a.header_offset, 1);
    const int64_t from = plan.start_pos[s];
    if (n == 0 || from < v0) return;
    DevState at{&pool, table};
    spec_region_rollback(at, a.regions[r], a.spec_tokens, v0, n, from, threadIdx.x, blockDim.x);
}

__global__ void spec_rollback_header_kernel(StepPlan plan, PagePool pool, SpecStateArgs a) {
    dev::pdl_begin();
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= plan.n_seqs || plan.n_tok[s] <= 0) return;
    const int32_t* table = seq_table(plan, s);
    const int64_t v0 = state_word(pool, table, a.header_offset, 0), n = state_word(pool, table, a.header_offset, 1);
    const int64_t from = plan.start_pos[s];
    if (n == 0 || from < v0) return;
    const int64_t pending_start = state_word(pool, table, a.header_offset, 2);
    const int64_t pending_len = state_word(pool, table, a.header_offset, 3);
    set_state_word(pool, table, a.header_offset, 0, 0);
    set_state_word(pool, table, a.header_offset, 1, 0);
    set_state_word(pool, table, a.header_offset, 3, int32_t(min(max(from - pending_start, int64_t(0)), pending_len)));
}
}  // namespace

cudaError_t spec_backup(const StepPlan& plan, const PagePool& pool, const SpecStateArgs& a, cudaStream_t st) {
    if (a.spec_tokens <= 0 || a.header_offset < 0 || (a.n_regions > 0 && !a.regions)) return cudaErrorInvalidValue;
    if (plan.n_seqs <= 0) return cudaSuccess;
    if (a.n_regions > 0) {
        spec_backup_kernel<<<dim3(unsigned(plan.n_seqs), unsigned(a.n_regions)), kThreads, 0, st>>>(plan, pool, a);
        DSV4_LAUNCH_RET();
    }
    spec_backup_header_kernel<<<unsigned((plan.n_seqs + 127) / 128), 128, 0, st>>>(plan, pool, a);
    return cudaGetLastError();
}

cudaError_t spec_rollback(const StepPlan& plan, const PagePool& pool, const SpecStateArgs& a, cudaStream_t st) {
    if (a.spec_tokens <= 0 || a.header_offset < 0 || (a.n_regions > 0 && !a.regions)) return cudaErrorInvalidValue;
    if (plan.n_seqs <= 0) return cudaSuccess;
    if (a.n_regions > 0) {
        spec_rollback_kernel<<<dim3(unsigned(plan.n_seqs), unsigned(a.n_regions)), kThreads, 0, st>>>(plan, pool, a);
        DSV4_LAUNCH_RET();
    }
    spec_rollback_header_kernel<<<unsigned((plan.n_seqs + 127) / 128), 128, 0, st>>>(plan, pool, a);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
