// CudaRunner's speculative-decoding cycle (issue 24; see cuda_runner_impl.h, spec_before / spec_after):
// RefRunner::speculative_chunk (runtime/ref_runner.cpp) for every sequence of a step at once. What the
// host form reads from a sequence's state header (where the MTP block's pending inputs start, how many
// there are) stays on the device: the catch-up pass's plan is written there (cuda::spec_catchup_plan),
// so the host neither waits for the previous step nor keeps per-sequence memory. The passes use the
// runner's second set of plan arrays (aux_), swapped in while they run.
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

cuda::SpecCycleArgs CudaRunner::spec_cycle_args(int B) const {
    cuda::SpecCycleArgs a;
    a.mtp = spec_seq_;
    a.drafts_k = spec_seq_ + B;
    a.drafts = drafts_;
    a.spec_tokens = spec_tokens_;
    a.header_offset = layout_.spec.header_offset;
    a.pending_tokens_offset = layout_.spec.pending_tokens_offset;
    a.pending_streams_offset = layout_.spec.pending_streams_offset;
    a.stream_elems = cfg_.hc_mult * cfg_.hidden_size;
    a.mtp_ring_offset = layout_.layers[size_t(cfg_.n_layers)].ring_offset;
    a.mtp_ring_rows = int(layout_.ring_rows);
    a.mtp_row_words = int(layout_.row_words_main);
    a.ring_scratch = ring_scratch_;
    return a;
}

namespace {

// What spec_before decides on the host from the plan's per-sequence flags (HostPlan::spec_seq):
// whether any sequence is past its first chunk (live), and the largest draft count.
struct CycleShape {
    bool any_live = false;
    int max_k = 0;
};

CycleShape cycle_shape(const HostPlan& hp) {
    CycleShape c;
    const int B = hp.B;
    for (int s = 0; s < B; ++s) {
        c.any_live = c.any_live || hp.spec_seq[size_t(3 * B + s)] != 0;
        c.max_k = std::max(c.max_k, hp.spec_seq[size_t(B + s)]);
    }
    return c;
}

}  // namespace

Status CudaRunner::spec_before(const HostPlan& hp) {
    const int B = hp.B, K1 = spec_tokens_ + 1;
    const cuda::StepPlan sp = step_plan(B);
    const cuda::SpecCycleArgs a = spec_cycle_args(B);
    const cuda::SpecStateArgs sa{spec_regions_, n_spec_regions_, spec_tokens_, layout_.spec.header_offset};
    const auto [any_live, max_k] = cycle_shape(hp);
    // 1. Undo the rejected positions of each sequence's last verify chunk (a sequence that does not
    //    speculate may hold one from a prefix-cache snapshot). Only sequences past their first chunk:
    //    a chunk at position 0 resets the state, whose header is whatever the pages held before.
    if (any_live) {
        mark("spec: rollback");
        cuda::StepPlan live = sp;
        live.n_tok = spec_seq_ + 3 * B;
        DSV4_CU(cuda::spec_rollback(live, pool_, sa, stream_));
    }
    sd_rule_ = -1;
    if (any_live) {
        // 2. The MTP block over each speculating sequence's pending positions (plan written on the device,
        //    S + 1 slots per sequence, the token loop: no batched-prefill arrays); its last row gives the
        //    first draft. Also clears every live sequence's pending count.
        mark("spec: catch-up plan");
        const cuda::SpecPassPlan pp{aux_.tok_begin, aux_.n_tok,     aux_.pos, aux_.logit_rows,
                                    mtp_next_,      aux_.start_pos, mtp_in_};
        DSV4_CU(cuda::spec_catchup_plan(sp, pool_, a, pp, stream_));
        if (hp.spec_live) {
            {
                // Logits only when a verify chunk drafts: the pass itself fills the block's ring either way.
                PlanSwap g(*this, false);
                token_loop_ = true;
                Status s = mtp_block(0, B, B * K1, K1, max_k > 0 ? B : 0, mtp_in_, mtp_next_);
                token_loop_ = false;
                DSV4_RETURN_IF_ERROR(s);
            }
            if (max_k > 0) {
                mark("spec: draft pick");
                DSV4_CU(greedy_pick(B, draft_ids_));
                DSV4_CU(cuda::spec_take_draft(sp, a, draft_ids_, 0, stream_));
            }
            // 3. Recursive drafts: the block at P, P + 1, ... on its own output streams; the ring rows they
            //    write are put back afterwards (the block runs there for real once the drafts are accepted).
            if (max_k > 1) DSV4_CU(cuda::spec_mtp_ring(sp, pool_, a, false, stream_));
            for (int pass = 1; pass < max_k; ++pass) {
                mark("spec: draft plan");
                DSV4_CU(cuda::spec_draft_plan(sp, a, pp, pass, ws_.X, stream_));
                {
                    PlanSwap g(*this, false);
                    DSV4_RETURN_IF_ERROR(mtp_block(0, B, B, 1, B, mtp_in_, mtp_next_));
                }
                mark("spec: draft pick");
                DSV4_CU(greedy_pick(B, draft_ids_));
                DSV4_CU(cuda::spec_take_draft(sp, a, draft_ids_, pass, stream_));
            }
            if (max_k > 1) DSV4_CU(cuda::spec_mtp_ring(sp, pool_, a, true, stream_));
        }
    }
    if (hp.spec_verify) {
        // 4. The verify chunks' tokens, and the backup of what they overwrite.
        mark("spec: drafts + backup");
        DSV4_CU(cuda::spec_fill_drafts(sp, a, ws_.tokens, stream_));
        cuda::StepPlan vp = sp;
        vp.n_tok = spec_seq_ + 2 * B;
        DSV4_CU(cuda::spec_backup(vp, pool_, sa, stream_));
    }
    return Status::ok();
}

Status CudaRunner::launch_spec_before(const HostPlan& hp, bool graphed) {
    if (!graphed || !opt_.rt.spec_graphs) return spec_before(hp);
    // Why a graph: spec_before's launches (the catch-up pass as a token loop over k + 1 slots, k - 1
    // draft passes of a whole layer and the head, the picks) are several hundred per step; eager, they
    // cost the serving host 0.85 ms per step against 0.26 ms as a graph, and the step 1-2% (ledger E61).
    const auto [any_live, max_k] = cycle_shape(hp);
    if (!any_live && !hp.spec_verify) return spec_before(hp);  // nothing to launch
    const int64_t key =
        ((int64_t(hp.B) * 8 + max_k) * 2 + (any_live ? 1 : 0)) * 4 + (hp.spec_live ? 2 : 0) + (hp.spec_verify ? 1 : 0);
    auto it = spec_graphs_.find(key);
    if (it == spec_graphs_.end()) {
        DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture([&] { return spec_before(hp); }, hp.B));
        it = spec_graphs_.emplace(key, ge).first;
    }
    DSV4_CU(cudaGraphLaunch(it->second, stream_));
    ++replays_.spec;
    return Status::ok();
}

Status CudaRunner::spec_after(const ForwardBatch& batch, const HostPlan& hp, StepSlot& slot) {
    bool any_mtp = false;
    for (int s = 0; s < hp.B; ++s) any_mtp = any_mtp || hp.spec_seq[size_t(s)] != 0;
    if (!any_mtp) return Status::ok();
    const cuda::StepPlan sp = step_plan(hp.B);
    const cuda::SpecCycleArgs a = spec_cycle_args(hp.B);
    const int64_t nd = int64_t(cfg_.hc_mult) * cfg_.hidden_size;
    DSV4_CU(cuda::spec_pending_write(sp, pool_, a, ws_.X, stream_));
    // The MTP block over the positions before the last of each speculating sequence's chunk of two or
    // more tokens (a prefill chunk): position P + j with the main model's streams there and the token at
    // P + j + 1, all known now. A chunk of tokens[1..] at P has exactly those positions and next tokens.
    ForwardBatch sub;
    std::vector<int32_t> src;
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const SeqChunk& c = batch.seqs[i];
        if (!c.mtp || c.draft_tokens > 0 || c.tokens.size() < 2) continue;
        SeqChunk c2 = c;
        c2.tokens = c.tokens.subspan(1);
        c2.want_logits = false;
        c2.sample = DeviceSample::kNone;
        c2.mtp = false;
        sub.seqs.push_back(c2);
        for (size_t j = 0; j + 1 < c.tokens.size(); ++j) src.push_back(hp.tok_begin[i] + int32_t(j));
    }
    if (sub.seqs.empty()) return Status::ok();
    HostPlan h2;
    DSV4_RETURN_IF_ERROR(plan(sub, 0, h2));
    // Its plan through slot.up2 into the second plan arrays (the step's own stay for the next step's reads).
    const std::vector<int32_t> rows = plan_rows(h2);
    std::vector<HostPiece> pieces = plan_pieces(h2, aux_, rows);
    pieces.push_back({gather_idx_, src.data(), src.size() * sizeof(int32_t)});
    DSV4_RETURN_IF_ERROR(stage_pieces(slot.up2, pieces));
    mark("spec: MTP prefill pass");
    DSV4_CU(cuda::gather_rows(ws_.X, gather_idx_, int(src.size()), nd, mtp_in_, stream_));
    PlanSwap g(*this, true);
    sd_rule_ = -1;
    // next = the pass's own tokens (tokens[1..] of each chunk), in the swapped-in token array.
    return mtp_block(0, h2.B, h2.T, h2.max_t, 0, mtp_in_, ws_.tokens);
}

}  // namespace dsv4::cuda_runner_detail
