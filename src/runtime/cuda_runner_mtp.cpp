// CudaRunner's MTP block (spec §2.11; see cuda_runner_impl.h, mtp_block): the draft model of speculative
// decoding (issue 24), one decoder block run after the main model over positions whose next token is
// known, through the same attention() and moe() as the decoder layers (block n_layers + m: compress
// ratio 0, its own window ring in the sequence's state, learned routing).
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

Status CudaRunner::mtp_block(int m, int B, int T, int max_t, int R, float* streams, const int32_t* next) {
    if (m < 0 || m >= int(w_.mtp.size()))
        return error(StatusCode::kFailedPrecondition,
                     "MTP block {} asked; the runner holds {} (CudaRunnerOptions::mtp_blocks)", m, w_.mtp.size());
    const DevMtp& M = w_.mtp[size_t(m)];
    const int l = cfg_.n_layers + m, n = cfg_.hc_mult, d = cfg_.hidden_size;
    const float eps = float(cfg_.rms_norm_eps);
    cudaStream_t st = stream_;
    const cuda::StepPlan sp = step_plan(B);
    set_gemm_thresholds(max_t);
    // X[t, j] = e_proj enorm(E[next_t]) + h_proj hnorm(streams[t, j]), the reference's order of the sum.
    mark("mtp: embed + enorm + e_proj");
    DSV4_CU(cuda::embed(w_.embed, next, T, 1, ws_.y, st));
    DSV4_CU(cuda::norm_rope(ws_.y, d, ws_.xn, d, T, d, true, M.enorm, eps, nullptr, 0, ws_.pos, 1, false, st));
    DSV4_CU(cuda::linear(M.e_proj, -1, ws_.xn, d, 0, 0, ws_.ys, d, T, false, st));
    mark("mtp: hnorm + h_proj (hc_mult rows per token) + add");
    DSV4_CU(cuda::norm_rope(streams, d, streams, d, T * n, d, true, M.hnorm, eps, nullptr, 0, ws_.pos, n, false, st));
    DSV4_CU(cuda::linear(M.h_proj, -1, streams, d, 0, 0, ws_.X, d, T * n, false, st));
    DSV4_CU(cuda::add_broadcast_rows(ws_.X, ws_.ys, T, n, d, st));
    const int splits = cuda::attn_splits(*variant_, B, cfg_.n_heads, n_sms_);
    for (int site = 0; site < 2; ++site) {
        const cuda::MhcArgs ma = site_args(l, site);
        mark("mtp: mhc_pre");
        DSV4_CU(cuda::mhc_pre_mix(ws_.X, T, ma, st));
        DSV4_CU(cuda::mhc_pre_apply(ws_.X, T, ma, ws_.coeffs, ws_.xn, st));
        if (site == 0)
            DSV4_RETURN_IF_ERROR(attention(l, sp, T, max_t, splits));
        else
            DSV4_RETURN_IF_ERROR(moe(l, T));
        mark("mtp: mhc_post");
        DSV4_CU(cuda::mhc_post(ws_.X, ws_.y, ws_.coeffs, T, n, d, st));
    }
    mark("mtp: head");
    if (R > 0) DSV4_RETURN_IF_ERROR(lm_head(R, M.hc_head, M.norm));
    return Status::ok();
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
    DSV4_RETURN_IF_ERROR(remember_loss(run_step(hp.B, hp.T, hp.max_t, hp.R, hp.end_pos)));
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
    DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture(draft));
    std::vector<double> us;
    Status s = time_replays(ge, warmup, reps, us);
    cudaGraphExecDestroy(ge);
    if (s.is_ok() && opt_.rt.op_profile) {  // where the draft step's time goes: a marked capture
        OpProfile prof;
        s = profile_capture(draft, prof);
        if (s.is_ok()) std::fprintf(stderr, "[MTP draft, batch %d] %s", hp.B, prof.table(5).c_str());
    }
    DSV4_RETURN_IF_ERROR(remember_loss(s));
    return us;
}

}  // namespace dsv4::cuda_runner_detail
