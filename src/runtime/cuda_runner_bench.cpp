// CudaRunner's bench and test hooks (runtime/cuda_bench_runner.h; see cuda_runner_impl.h): decode-graph
// timing with CUDA events and the op profile of a marked capture (`dsv4 proxy-bench`), the eager op profile
// of one step, and the MTP block's hooks: its logits beside the main model's (tests) and its draft step
// as a timed graph (proxy-bench --mtp-draft).
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

Result<DecodeGraphTiming> CudaRunner::time_decode_graph(const ForwardBatch& batch, int warmup, int reps,
                                                        bool op_profile) {
    for (const auto& c : batch.seqs)
        if (c.tokens.size() != 1)
            return invalid_argument("time_decode_graph: sequence {} has {} tokens, not 1", c.seq_id, c.tokens.size());
    if (batch.seqs.empty() || reps <= 0) return invalid_argument("time_decode_graph: empty batch or no replays");
    HostPlan hp;
    DSV4_RETURN_IF_ERROR(plan(batch, 1, hp));
    DSV4_RETURN_IF_ERROR(upload_plan(hp));
    DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t step, decode_graph(hp.B, hp.sd_rule));
    auto hit = head_graphs_.find(hp.B);
    if (hit == head_graphs_.end()) {
        DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture([&] { return run_head(hp.T, hp.B); }, hp.B));
        hit = head_graphs_.emplace(hp.B, ge).first;
    }
    DecodeGraphTiming out;
    out.bucket = hp.B;
    DSV4_RETURN_IF_ERROR(time_replays(step, warmup, reps, out.step_us));
    DSV4_RETURN_IF_ERROR(time_replays(hit->second, warmup, reps, out.head_us));
    if (op_profile || opt_.rt.op_profile) {
        // A second capture of the same step with event marks.
        OpProfile prof;
        sd_rule_ = hp.sd_rule;
        DSV4_RETURN_IF_ERROR(profile_capture([&] { return run_step(hp.B, hp.B, 1, hp.B, kAnyEndPos); }, hp.B, prof));
        out.op_us = prof.per_step_us(5);
        if (opt_.rt.op_profile) std::fprintf(stderr, "[batch %d] %s", hp.B, prof.table(5).c_str());
    }
    return out;
}

Status CudaRunner::time_replays(cudaGraphExec_t ge, int warmup, int reps, std::vector<double>& us) {
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    Status s = cuda_ok(cudaEventCreate(&e0), "event");
    if (s.is_ok()) s = cuda_ok(cudaEventCreate(&e1), "event");
    for (int i = 0; s.is_ok() && i < warmup; ++i) s = cuda_ok(cudaGraphLaunch(ge, stream_), "graph replay");
    if (s.is_ok()) s = cuda_ok(cudaStreamSynchronize(stream_), "sync");
    for (int r = 0; s.is_ok() && r < reps; ++r) {
        s = cuda_ok(cudaEventRecord(e0, stream_), "event");
        if (s.is_ok()) s = cuda_ok(cudaGraphLaunch(ge, stream_), "graph replay");
        if (s.is_ok()) s = cuda_ok(cudaEventRecord(e1, stream_), "event");
        if (s.is_ok()) s = cuda_ok(cudaEventSynchronize(e1), "event");
        float ms = 0;
        if (s.is_ok()) s = cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "event");
        if (s.is_ok()) us.push_back(1000.0 * ms);
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return s;
}

Status CudaRunner::profile_capture(const std::function<Status()>& body, int pdl_tokens, OpProfile& prof) {
    DSV4_CU(prof.reserve(4096));
    prof_ = &prof;
    auto captured = capture(body, pdl_tokens);
    prof_ = nullptr;
    DSV4_RETURN_IF_ERROR(captured.status());
    cudaGraphExec_t ge = *captured;
    Status s;
    for (int r = 0; s.is_ok() && r < 6; ++r) {  // 1 warm-up + 5 profiled replays
        s = cuda_ok(cudaGraphLaunch(ge, stream_), "launch");
        if (s.is_ok()) s = cuda_ok(cudaStreamSynchronize(stream_), "sync");
        if (s.is_ok() && r > 0) s = cuda_ok(prof.accumulate(), "event times");
    }
    cudaGraphExecDestroy(ge);
    return s;
}

Result<std::string> CudaRunner::profile_step(const ForwardBatch& batch) {
    HostPlan hp;
    DSV4_RETURN_IF_ERROR(plan(batch, 0, hp));
    DSV4_RETURN_IF_ERROR(upload_plan(hp));
    OpProfile prof;
    DSV4_CU(prof.reserve(65536));
    prof_ = &prof;
    sd_rule_ = hp.sd_rule;
    Status s = run_step(hp.B, hp.T, hp.max_t, hp.R, hp.end_pos, &hp.pf_block_end);
    prof_ = nullptr;
    DSV4_RETURN_IF_ERROR(s);
    DSV4_CU(cudaStreamSynchronize(stream_));
    DSV4_CU(prof.accumulate());
    return prof.table(1);
}

Status CudaRunner::forward_with_mtp(const ForwardBatch& batch, std::span<const int32_t> next,
                                    std::vector<std::vector<float>>& logits,
                                    std::vector<std::vector<float>>& mtp_logits) {
    if (!lost_.is_ok()) return lost_;
    if (w_.mtp.empty())
        return error(StatusCode::kFailedPrecondition,
                     "forward_with_mtp: the runner holds no MTP block (CudaRunnerOptions::mtp_blocks)");
    if (!inflight_.empty())
        return error(StatusCode::kFailedPrecondition, "forward_with_mtp: launched steps not collected");
    if (batch.seqs.empty()) return invalid_argument("forward_with_mtp: an empty step");
    if (int64_t(next.size()) != batch.n_tokens())
        return invalid_argument("forward_with_mtp: {} next tokens for a step of {} tokens", next.size(),
                                batch.n_tokens());
    for (const auto& c : batch.seqs)
        for (int32_t t : c.tokens)
            if (t == kPendingToken)
                return invalid_argument("forward_with_mtp: sequence {} has a pending token", c.seq_id);
    for (int32_t t : next)
        if (t < 0 || t >= cfg_.vocab_size)
            return error(StatusCode::kOutOfRange, "forward_with_mtp: next token id {} outside the vocabulary [0, {})",
                         t, cfg_.vocab_size);
    HostPlan hp;
    DSV4_RETURN_IF_ERROR(plan(batch, 0, hp));
    DSV4_RETURN_IF_ERROR(upload_plan(hp));
    sd_rule_ = hp.sd_rule;
    const size_t V = size_t(cfg_.vocab_size), nd = size_t(cfg_.hc_mult) * size_t(cfg_.hidden_size);
    auto rows_to_host = [&](std::vector<std::vector<float>>& out) -> Status {
        std::vector<float> h(size_t(hp.R) * V);
        DSV4_CU(cudaMemcpyAsync(h.data(), ws_.logits, h.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
        DSV4_CU(cudaStreamSynchronize(stream_));
        out.clear();
        for (int r = 0; r < hp.R; ++r)
            out.emplace_back(h.begin() + int64_t(r) * int64_t(V), h.begin() + int64_t(r + 1) * int64_t(V));
        return Status::ok();
    };
    DSV4_RETURN_IF_ERROR(remember_loss(run_step(hp.B, hp.T, hp.max_t, hp.R, hp.end_pos, &hp.pf_block_end)));
    DSV4_RETURN_IF_ERROR(remember_loss(rows_to_host(logits)));
    DSV4_CU(cudaMemcpyAsync(mtp_in_, ws_.X, size_t(hp.T) * nd * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    DSV4_CU(cudaMemcpyAsync(mtp_next_, next.data(), next.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    DSV4_RETURN_IF_ERROR(remember_loss(mtp_block(0, hp.B, hp.T, hp.max_t, hp.R, mtp_in_, mtp_next_)));
    return remember_loss(rows_to_host(mtp_logits));
}

Result<std::vector<double>> CudaRunner::time_mtp_draft(const ForwardBatch& batch, int warmup, int reps) {
    if (!lost_.is_ok()) return lost_;
    if (w_.mtp.empty())
        return error(StatusCode::kFailedPrecondition,
                     "time_mtp_draft: the runner holds no MTP block (CudaRunnerOptions::mtp_blocks)");
    if (!inflight_.empty())
        return error(StatusCode::kFailedPrecondition, "time_mtp_draft: launched steps not collected");
    if (batch.seqs.empty() || reps <= 0) return invalid_argument("time_mtp_draft: empty batch or no replays");
    for (const auto& c : batch.seqs)
        if (c.tokens.size() != 1 || c.tokens[0] == kPendingToken)
            return invalid_argument("time_mtp_draft: sequence {} has {} tokens, not one known token", c.seq_id,
                                    c.tokens.size());
    HostPlan hp;
    DSV4_RETURN_IF_ERROR(plan(batch, 1, hp));
    DSV4_RETURN_IF_ERROR(upload_plan(hp));
    const size_t nd = size_t(cfg_.hc_mult) * size_t(cfg_.hidden_size);
    DSV4_CU(cudaMemsetAsync(mtp_in_, 0, size_t(hp.T) * nd * sizeof(float), stream_));
    DSV4_CU(cudaMemcpyAsync(mtp_next_, ws_.tokens, size_t(hp.T) * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream_));
    sd_rule_ = -1;
    auto draft = [&]() -> Status {
        DSV4_RETURN_IF_ERROR(mtp_block(0, hp.B, hp.T, 1, hp.B, mtp_in_, mtp_next_));
        mark("mtp: greedy pick");
        // Into the MoE ids (free after the block), not sampled_: the next served step's pending tokens
        // are read from there.
        DSV4_CU(greedy_pick(hp.B, ws_.ids));
        mark("end");
        return Status::ok();
    };
    DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture(draft, hp.B));
    std::vector<double> us;
    Status s = time_replays(ge, warmup, reps, us);
    cudaGraphExecDestroy(ge);
    if (s.is_ok() && opt_.rt.op_profile) {  // where the draft step's time goes: a marked capture
        OpProfile prof;
        s = profile_capture(draft, hp.B, prof);
        if (s.is_ok()) std::fprintf(stderr, "[MTP draft, batch %d] %s", hp.B, prof.table(5).c_str());
    }
    DSV4_RETURN_IF_ERROR(remember_loss(s));
    return us;
}

}  // namespace dsv4::cuda_runner_detail
