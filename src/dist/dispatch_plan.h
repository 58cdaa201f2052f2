// Dispatch bookkeeping of one expert-parallel MoE step (issue 8), as pure functions: from the
// top-k expert ids of this rank's tokens, where every (token, k) slot goes, how the receiving
// rank lays the rows out per local expert, and how results come back in token order.
//
// The step on each rank (src/dist/ep_moe.h drives it over a Communicator):
//   1. plan_dispatch(ids)             -> DispatchPlan (send side)
//   2. exchange send_expert_counts     (all-to-all, n_local int64 per rank pair)
//   3. plan_receive(received counts)   -> ReceiveLayout
//   4. gather_rows(x, send_token)      -> send buffer [S, d]; all-to-all-v -> receive buffer [R, d]
//   5. scatter_rows(recv, recv_to_expert) -> expert-major [R, d]; run each local expert on its block
//   6. gather back to receive order, all-to-all-v in reverse -> returned [S, d]
//   7. combine_rows(returned, plan)    -> out[t] += sum over k (in k order) of its slot's row
//
// Layouts:
//   send buffer: grouped by destination rank, within it by local expert, within that by slot
//     order t*K + k. With contiguous expert blocks (ExpertPartition) this is simply the slots
//     stably sorted by global expert id.
//   receive buffer: grouped by source rank (all-to-all-v order); each source's block is in that
//     source's send order, i.e. by local expert then by the source's slot order.
//   expert-major buffer: grouped by local expert; within an expert by source rank, then by the
//     source's slot order ("rows in order"): deterministic whatever the thread timing.
// A negative expert id marks an unused slot: it is not sent and contributes nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "dist/expert_partition.h"

namespace dsv4::dist {

struct DispatchPlan {
    int n_ranks = 1, n_local = 0, k = 0;
    int64_t n_tokens = 0;
    std::vector<int64_t> send_counts;         // [N] rows to each destination rank
    std::vector<int64_t> send_offsets;        // [N] first send row of each destination
    std::vector<int64_t> send_expert_counts;  // [N, n_local] rows to (destination, local expert)
    std::vector<int64_t> send_slot;           // [S] slot t*K + k carried by send row i
    std::vector<int64_t> send_token;          // [S] token t of send row i (= send_slot / K)
    std::vector<int32_t> send_local_expert;   // [S] the destination's local expert of send row i
    std::vector<int64_t> slot_row;            // [T*K] send row of each slot, -1 if unused
    int64_t n_send() const { return int64_t(send_slot.size()); }
};

// ids: [n_tokens, k] int32 global expert ids (negative = unused). Errors: ids.size() !=
// n_tokens * k, k < 1, an id >= the partition's expert count.
Result<DispatchPlan> plan_dispatch(std::span<const int32_t> ids, int64_t n_tokens, int k, const ExpertPartition& ep);

struct ReceiveLayout {
    int n_ranks = 1, n_local = 0;
    std::vector<int64_t> recv_counts;     // [N] rows from each source rank
    std::vector<int64_t> recv_offsets;    // [N] first receive row of each source
    std::vector<int64_t> expert_counts;   // [n_local] rows of each local expert (all sources)
    std::vector<int64_t> expert_offsets;  // [n_local] first expert-major row of each local expert
    std::vector<int64_t> recv_to_expert;  // [R] expert-major row of receive row i
    std::vector<int64_t> expert_to_recv;  // [R] inverse permutation
    int64_t n_recv() const { return int64_t(recv_to_expert.size()); }
};

// recv_expert_counts: [N, n_local]; row s = source s's send_expert_counts row for this rank (what
// step 2 delivers). Errors: wrong size, negative counts.
Result<ReceiveLayout> plan_receive(std::span<const int64_t> recv_expert_counts, int n_ranks, int n_local);

// dst[i] = src[index[i]] for rows of `width` elements. src: [*, width], dst: [index.size(), width].
template <typename T>
void gather_rows(const T* src, std::span<const int64_t> index, int64_t width, T* dst);
// dst[index[i]] = src[i]. src: [index.size(), width], dst: [*, width].
template <typename T>
void scatter_rows(const T* src, std::span<const int64_t> index, int64_t width, T* dst);

// out[t] += returned[slot_row[t*K + k]] for k = 0..K-1 in that order (unused slots skipped), so
// the sum order per token matches a local loop over k. returned: [S, width] in send order;
// out: [n_tokens, width].
void combine_rows(const float* returned, const DispatchPlan& plan, int64_t width, float* out);

}  // namespace dsv4::dist
