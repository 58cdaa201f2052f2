// CudaRunner's overlapped step pipeline (see cuda_runner_impl.h): the plan, sampling rows and page
// copies uploaded on the step's slot without waiting for the stream, the step launched, its outputs
// queued into pinned memory, and collect() turning the previous step's outputs into StepOutput.
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

std::vector<CudaRunner::HostPiece> CudaRunner::plan_pieces(const HostPlan& hp, const PlanBufs& dst,
                                                           const std::vector<int32_t>& rows) {
    const size_t i32 = sizeof(int32_t), i64 = sizeof(int64_t);
    std::vector<HostPiece> p = {{dst.tok_begin, hp.tok_begin.data(), hp.B * i32},
                                {dst.n_tok, hp.n_tok.data(), hp.B * i32},
                                {dst.start_pos, hp.start_pos.data(), hp.B * i64},
                                {dst.page_table, hp.page_table.data(), hp.page_table.size() * i32},
                                {dst.tokens, hp.tokens.data(), hp.T * i32},
                                {dst.pos, hp.pos.data(), hp.T * i32},
                                {dst.logit_rows, rows.data(), rows.size() * i32}};
    if (hp.batched) {
        p.push_back({dst.pf_seq, hp.pf_seq.data(), hp.T * i32});
        p.push_back({dst.pf_start_pos, hp.pf_pos.data(), hp.T * i64});
        p.push_back({dst.pf_stage_from, hp.pf_stage_from.data(), hp.T * i64});
    }
    return p;
}

Status CudaRunner::stage_pieces(PinnedBuf& buf, const std::vector<HostPiece>& pieces) {
    auto padded = [](size_t bytes) { return (bytes + 15) & ~size_t(15); };
    size_t total = 0;
    for (const HostPiece& p : pieces) total += padded(p.bytes);
    DSV4_RETURN_IF_ERROR(buf.reserve(total));
    char* base = static_cast<char*>(buf.p);
    size_t off = 0;
    for (const HostPiece& p : pieces) {
        if (p.bytes) {
            std::memcpy(base + off, p.src, p.bytes);
            DSV4_CU(cudaMemcpyAsync(p.dst, base + off, p.bytes, cudaMemcpyHostToDevice, stream_));
        }
        off += padded(p.bytes);
    }
    return Status::ok();
}

Status CudaRunner::upload_plan_async(const HostPlan& hp, const std::vector<cuda::SampleRowArgs>& full,
                                     const std::vector<cuda::SamplePenaltyToken>& toks,
                                     const std::vector<PageCopy>& copies, StepSlot& slot) {
    const std::vector<int32_t> rows = plan_rows(hp);
    std::vector<HostPiece> pieces = plan_pieces(hp, step_plan_bufs(), rows);
    const size_t i32 = sizeof(int32_t);
    if (!hp.spec_seq.empty()) pieces.push_back({spec_seq_, hp.spec_seq.data(), hp.spec_seq.size() * i32});
    pieces.push_back({pend_dst_, hp.pend_dst.data(), hp.pend_dst.size() * i32});
    pieces.push_back({pend_src_, hp.pend_src.data(), hp.pend_src.size() * i32});
    DSV4_RETURN_IF_ERROR(copy_pairs_.reserve(std::max<size_t>(1, copies.size()) * sizeof(PageCopy)));
    pieces.push_back({copy_pairs_.p, copies.data(), copies.size() * sizeof(PageCopy)});
    if (!full.empty()) {
        DSV4_RETURN_IF_ERROR(sample_args_.reserve(full.size() * sizeof(cuda::SampleRowArgs)));
        DSV4_RETURN_IF_ERROR(sample_toks_.reserve(std::max<size_t>(1, toks.size()) * sizeof(cuda::SamplePenaltyToken)));
        DSV4_RETURN_IF_ERROR(sample_saved_.reserve(std::max<size_t>(1, toks.size()) * sizeof(float)));
        pieces.push_back({sample_args_.p, full.data(), full.size() * sizeof(cuda::SampleRowArgs)});
        pieces.push_back({sample_toks_.p, toks.data(), toks.size() * sizeof(cuda::SamplePenaltyToken)});
    }
    // Growing the pinned buffer waits for nothing in flight on it: this slot's last step was collected.
    return stage_pieces(slot.up, pieces);
}

Status CudaRunner::queue_outputs(const ForwardBatch& batch, bool honour_sample, const HostPlan& hp, StepSlot& slot,
                                 std::vector<cuda::SampleRowArgs>& full, std::vector<cuda::SamplePenaltyToken>& toks) {
    slot.host_rows.clear();
    slot.dev_rows.clear();
    slot.dev_mode.clear();
    slot.R = hp.R;
    slot.verify.clear();
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const SeqChunk& c = batch.seqs[i];
        if (!c.want_logits) continue;
        const int r = int(slot.host_rows.size() + slot.dev_rows.size());
        const DeviceSample mode = honour_sample ? c.sample : DeviceSample::kNone;
        const int k = c.draft_tokens;  // a verify chunk: k + 1 rows, row j deciding draft j (j < k)
        if (k > 0) slot.verify.emplace_back(int(i), k);
        if (mode == DeviceSample::kNone) {
            for (int j = 0; j <= k; ++j) slot.host_rows.push_back(r + j);
            continue;
        }
        if (mode != DeviceSample::kGreedy && mode != DeviceSample::kFull)
            return invalid_argument("sequence {}: device sample mode {} is not supported", c.seq_id, int(mode));
        for (int j = 0; j <= k; ++j) {
            slot.dev_rows.push_back(r + j);
            slot.dev_mode.push_back(mode);
        }
        if (mode == DeviceSample::kGreedy) continue;
        const DeviceSampleParams& p = c.params;
        if (p.logprobs > kMaxDeviceTopLogprobs)
            return invalid_argument("sequence {}: {} top logprobs, the device sampler returns at most {}", c.seq_id,
                                    p.logprobs, kMaxDeviceTopLogprobs);
        // A verify chunk's later rows would need penalty counts that include the drafts before them.
        if (k > 0 && (p.logprobs >= 0 || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
                      p.frequency_penalty != 0.0f))
            return invalid_argument(
                "sequence {}: a verify chunk's rows are sampled on the device without penalties "
                "and logprobs only",
                c.seq_id);
        for (int j = 0; j <= k; ++j) {
            cuda::SampleRowArgs a;
            a.tok_begin = int32_t(toks.size());  // a list per row: the kernel saves each row's entries
            for (const PenaltyToken& t : p.penalty_tokens)
                toks.push_back({t.token, t.output_count, uint8_t(t.seen), uint8_t(t.masked), t.bias});
            a.row = r + j;
            a.temperature = p.temperature;
            a.top_p = p.top_p;
            a.min_p = p.min_p;
            a.top_k = p.top_k;
            a.repetition_penalty = p.repetition_penalty;
            a.presence_penalty = p.presence_penalty;
            a.frequency_penalty = p.frequency_penalty;
            a.logprobs = p.logprobs;
            a.seed = p.seed;
            a.stream = p.stream;
            a.position = p.position + j;
            a.n_tok = int32_t(p.penalty_tokens.size());
            // A pending output token (filled in on the device) is not in the host's counts: the kernel adds it.
            if (k == 0 && c.tokens.back() == kPendingToken) a.pending_index = hp.logit_rows[size_t(r)];
            full.push_back(a);
        }
    }
    slot.n_full = full.size();
    return Status::ok();
}

Status CudaRunner::launch_step(const ForwardBatch& batch, bool honour_sample) {
    if (!lost_.is_ok()) return lost_;  // a poisoned context: nothing queued now could run
    return remember_loss(queue_step(batch, honour_sample));
}

Status CudaRunner::collect(StepOutput& out) {
    if (!lost_.is_ok()) {
        // The engine still collects what it launched (its bookkeeping); each answer is the loss.
        if (!inflight_.empty()) inflight_.pop_front();
        return lost_;
    }
    return remember_loss(collect_step(out));
}

// Order on the stream: plan upload, pending tokens, step, argmax (reads the raw rows), kFull
// sampling (modifies rows in place and restores them), kFull ids into sampled_, output copies,
// event. Nothing here waits for the device, so the host goes on while the step runs.
Status CudaRunner::queue_step(const ForwardBatch& batch, bool honour_sample) {
    if (inflight_.size() >= 2) return error(StatusCode::kFailedPrecondition, "two steps launched and not collected");
    if (batch.seqs.empty() && batch.page_copies.empty()) return invalid_argument("an empty step");
    for (const PageCopy& pc : batch.page_copies)
        if (pc.src < 0 || pc.src >= opt_.n_pages || pc.dst < 0 || pc.dst >= opt_.n_pages)
            return error(StatusCode::kOutOfRange, "page copy {} -> {} outside the pool [0, {})", pc.src, pc.dst,
                         opt_.n_pages);
    const int graph_n = batch.seqs.size() <= size_t(opt_.max_seqs) ? graph_tokens_for(batch) : 0;
    HostPlan hp;
    if (!batch.seqs.empty()) DSV4_RETURN_IF_ERROR(plan(batch, graph_n, hp));
    StepSlot& slot = slots_[next_slot_];
    // Its last step was collected (its outputs are read), but work queued after them (spec_after's MTP
    // pass) may still read its pinned plan: wait for all of it before the host rewrites the buffers.
    DSV4_CU(cudaEventSynchronize(slot.done));
    std::vector<cuda::SampleRowArgs> full;
    std::vector<cuda::SamplePenaltyToken> toks;
    DSV4_RETURN_IF_ERROR(queue_outputs(batch, honour_sample, hp, slot, full, toks));
    // The kFull sampler's weights on first use, before any of the step is queued: running out of
    // memory here then fails this step's requests and leaves no half-queued step behind.
    if (!full.empty() && !sample_w_) {
        auto w = arena_.alloc_n<float>(size_t(rows_cap_) * size_t(cfg_.vocab_size));  // k + 1 rows per verify chunk
        if (!w.is_ok()) return w.status().with_context("the device sampler's weights");
        sample_w_ = *w;
    }
    DSV4_RETURN_IF_ERROR(upload_plan_async(hp, full, toks, batch.page_copies, slot));
    DSV4_RETURN_IF_ERROR(run_page_copies(batch.page_copies));
    if (batch.seqs.empty()) {  // copies only: nothing sampled, the previous step's ids stay the pending source
        DSV4_CU(cudaEventRecord(slot.ready, stream_));
        DSV4_CU(cudaEventRecord(slot.done, stream_));
        inflight_.push_back(next_slot_);
        next_slot_ ^= 1;
        return Status::ok();
    }
    DSV4_CU(cuda::fill_pending_tokens(ws_.tokens, pend_dst_, pend_src_, int(hp.pend_dst.size()), sampled_, stream_));
    // Test hook: this step faults on the device as a broken kernel would; collect() meets the error.
    ++steps_launched_;
    if (opt_.rt.fault_inject_step > 0 && steps_launched_ == opt_.rt.fault_inject_step)
        DSV4_CU(cuda::inject_device_fault(stream_));
    if (spec_tokens_ > 0) DSV4_RETURN_IF_ERROR(launch_spec_before(hp, graph_n > 0));
    if (graph_n == 1) {
        DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, decode_graph(hp.B, hp.sd_rule));
        DSV4_CU(cudaGraphLaunch(ge, stream_));
        ++replays_.decode;
    } else if (graph_n > 1) {
        DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, verify_graph(hp.B, graph_n, hp.spec_verify));
        DSV4_CU(cudaGraphLaunch(ge, stream_));
        ++replays_.verify;
    } else {
        sd_rule_ = hp.sd_rule;
        DSV4_RETURN_IF_ERROR(run_step(hp.B, hp.T, hp.max_t, hp.R, hp.end_pos, &hp.pf_block_end));
    }
    const size_t V = size_t(cfg_.vocab_size);
    const bool any_greedy =
        std::find(slot.dev_mode.begin(), slot.dev_mode.end(), DeviceSample::kGreedy) != slot.dev_mode.end();
    if (any_greedy) DSV4_CU(greedy_pick(hp.R, sampled_));
    if (!full.empty()) {
        const auto* args = static_cast<const cuda::SampleRowArgs*>(sample_args_.p);
        DSV4_CU(cuda::sample_rows(ws_.logits, int64_t(V), args, int(full.size()),
                                  static_cast<const cuda::SamplePenaltyToken*>(sample_toks_.p), sample_w_,
                                  static_cast<float*>(sample_saved_.p), sample_out_, stream_, ws_.tokens));
        DSV4_CU(cuda::scatter_sampled_tokens(args, sample_out_, int(full.size()), sampled_, stream_));
        DSV4_CU(cudaMemcpyAsync(slot.full.p, sample_out_, full.size() * sizeof(cuda::SampleRowOut),
                                cudaMemcpyDeviceToHost, stream_));
    }
    if (!slot.dev_rows.empty())
        DSV4_CU(cudaMemcpyAsync(slot.ids.p, sampled_, size_t(hp.R) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    // Host rows: one copy when they are all the rows, else one per row.
    const size_t nh = slot.host_rows.size();
    if (nh > 0) {
        DSV4_RETURN_IF_ERROR(slot.logits.reserve(nh * V * sizeof(float)));
        float* dst = static_cast<float*>(slot.logits.p);
        if (int(nh) == hp.R) {
            DSV4_CU(cudaMemcpyAsync(dst, ws_.logits, nh * V * sizeof(float), cudaMemcpyDeviceToHost, stream_));
        } else {
            for (size_t i = 0; i < nh; ++i)
                DSV4_CU(cudaMemcpyAsync(dst + i * V, ws_.logits + size_t(slot.host_rows[i]) * V, V * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream_));
        }
    }
    if (!slot.verify.empty())
        DSV4_CU(cudaMemcpyAsync(slot.drafts.p, drafts_, size_t(hp.B) * size_t(spec_tokens_) * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream_));
    DSV4_CU(cudaEventRecord(slot.ready, stream_));
    if (spec_tokens_ > 0) DSV4_RETURN_IF_ERROR(spec_after(batch, hp, slot));
    DSV4_CU(cudaEventRecord(slot.done, stream_));
    prev_rows_.clear();
    size_t d = 0;
    for (const auto& c : batch.seqs) {
        if (!c.want_logits || !honour_sample || c.sample == DeviceSample::kNone) continue;
        // A verify chunk's next token depends on its acceptance, judged on the host: never pending.
        if (c.draft_tokens == 0) prev_rows_[c.seq_id] = slot.dev_rows[d];
        d += size_t(1 + c.draft_tokens);
    }
    inflight_.push_back(next_slot_);
    next_slot_ ^= 1;
    return Status::ok();
}

// The batch's page copies in order: one launch per wave of copies that do not chain (a pair that
// reads or writes a page an earlier pair of the wave writes, or writes one it reads, starts a new wave).
Status CudaRunner::run_page_copies(const std::vector<PageCopy>& copies) {
    std::unordered_set<int32_t> read, written;
    size_t begin = 0;
    auto flush = [&](size_t end) -> Status {
        const auto* pairs = static_cast<const int32_t*>(copy_pairs_.p) + 2 * begin;
        DSV4_CU(cuda::copy_pages(reinterpret_cast<uint32_t*>(pool_.base), layout_.page_elems, pairs, int(end - begin),
                                 stream_));
        begin = end;
        read.clear();
        written.clear();
        return Status::ok();
    };
    for (size_t i = 0; i < copies.size(); ++i) {
        const PageCopy& pc = copies[i];
        if (written.count(pc.src) || written.count(pc.dst) || read.count(pc.dst)) DSV4_RETURN_IF_ERROR(flush(i));
        read.insert(pc.src);
        written.insert(pc.dst);
    }
    if (begin < copies.size()) DSV4_RETURN_IF_ERROR(flush(copies.size()));
    return Status::ok();
}

Status CudaRunner::collect_step(StepOutput& out) {
    if (inflight_.empty()) return error(StatusCode::kFailedPrecondition, "collect() without a launched step");
    StepSlot& slot = slots_[inflight_.front()];
    inflight_.pop_front();
    DSV4_CU(cudaEventSynchronize(slot.ready));
    const size_t V = size_t(cfg_.vocab_size);
    out.logits.clear();
    out.tokens.clear();
    out.logprobs.clear();
    out.top_logprobs.clear();
    const float* host = static_cast<const float*>(slot.logits.p);
    for (size_t i = 0; i < slot.host_rows.size(); ++i) out.logits.emplace_back(host + i * V, host + (i + 1) * V);
    const int32_t* ids = static_cast<const int32_t*>(slot.ids.p);
    const auto* res = static_cast<const cuda::SampleRowOut*>(slot.full.p);
    size_t fi = 0;
    for (size_t k = 0; k < slot.dev_rows.size(); ++k) {
        if (slot.dev_mode[k] == DeviceSample::kGreedy) {
            out.tokens.push_back(ids[slot.dev_rows[k]]);
            out.logprobs.push_back(0.0f);
            out.top_logprobs.emplace_back();
            continue;
        }
        const cuda::SampleRowOut& o = res[fi++];
        out.tokens.push_back(o.token);
        out.logprobs.push_back(o.logprob);
        std::vector<std::pair<int32_t, float>> top;
        for (int t = 0; t < o.n_top; ++t) top.emplace_back(o.top_token[t], o.top_logprob[t]);
        out.top_logprobs.push_back(std::move(top));
    }
    out.drafts.clear();
    const int32_t* drafts = static_cast<const int32_t*>(slot.drafts.p);
    for (const auto& [s, k] : slot.verify)
        out.drafts.emplace_back(drafts + size_t(s) * size_t(spec_tokens_),
                                drafts + size_t(s) * size_t(spec_tokens_) + k);
    return Status::ok();
}

}  // namespace dsv4::cuda_runner_detail
