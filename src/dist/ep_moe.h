// One expert-parallel routed-MoE step on one rank (issue 8): dispatch this rank's (token, k)
// slots to the ranks owning their experts, run the local experts on what arrives, send the
// results back and combine them into token order. Host buffers (the in-process communicator);
// the GPU version keeps the same bookkeeping (dispatch_plan.h) with device buffers.
//
// Collectives per call, in order (every rank makes all of them, also with zero tokens):
//   all-to-all of the [N, n_local] i64 row counts, all-to-all-v of the rows [*, d] f32, of the
//   weights [*] f32, then the reverse all-to-all-v of the expert outputs [*, d] f32.
// A rank whose routing is invalid sends -1 counts, so every rank fails at the same step and no
// rank is left waiting.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "dist/communicator.h"
#include "dist/expert_partition.h"

namespace dsv4::dist {

// Runs local expert `local_expert` (global id ep.first(rank) + local_expert) on its rows:
// rows [n, d] f32 in expert-major order, weights [n] f32; out [n, d] f32 (zeroed) receives
// weights[i] * expert(rows[i]).
using LocalExpertFn =
    std::function<Status(int local_expert, const float* rows, const float* weights, int64_t n, float* out)>;

struct EpMoeStats {
    int64_t sent_rows = 0;      // slots this rank sent (to itself included)
    int64_t received_rows = 0;  // rows this rank's experts computed
    int64_t remote_rows = 0;    // of sent_rows, those that left this rank
};

// x: [T, d] f32 MoE input; ids, weights: [T, K] (negative id = unused slot); out: [T, d] f32,
// out[t] += sum_k (in k order) weights[t,k] * expert_{ids[t,k]}(x[t]). Errors: invalid routing
// on any rank (reported on every rank), communicator errors, expert errors.
Status ep_routed_moe(Communicator& comm, const ExpertPartition& ep, int d, int64_t T, int K,
                     std::span<const int32_t> ids, std::span<const float> weights, const float* x,
                     const LocalExpertFn& run_expert, float* out, EpMoeStats* stats = nullptr);

}  // namespace dsv4::dist
