// CudaRunner (see cuda_runner.h): CUDA graphs. A decode step's graph per batch bucket and
// sparse_decode rule (captured on first use, or all at start-up), and the bench's timed and
// op-profiled replays of it.
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

Result<cudaGraphExec_t> CudaRunner::capture(const std::function<Status()>& body) {
    cudaGraph_t g = nullptr;
    DSV4_CU(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status s = body();
    cudaError_t e = cudaStreamEndCapture(stream_, &g);
    DSV4_RETURN_IF_ERROR(s);
    DSV4_CU(e);
    cudaGraphExec_t ge = nullptr;
    e = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    DSV4_CU(e);
    return ge;
}

Result<cudaGraphExec_t> CudaRunner::decode_graph(int B, int sd_rule) {
    const int key = B * 64 + (sd_rule + 1);  // apply_tuning_rules allows at most 63 sparse_decode rules
    auto it = graphs_.find(key);
    if (it != graphs_.end()) return it->second;
    sd_rule_ = sd_rule;
    DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture([&] { return run_step(B, B, 1, B, kAnyEndPos); }));
    graphs_.emplace(key, ge);
    return ge;
}

Result<cudaGraphExec_t> CudaRunner::verify_graph(int B, int n, bool all_rows) {
    const int key = (B * 8 + n) * 2 + (all_rows ? 1 : 0);  // n <= StepGemmThresholds::kVerifyShapedMaxTokens < 8
    auto it = verify_graphs_.find(key);
    if (it != verify_graphs_.end()) return it->second;
    sd_rule_ = -1;  // tuning rules cover decode-only steps
    const int R = all_rows ? B * n : B;
    DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture([&] { return run_step(B, B * n, n, R, kAnyEndPos); }));
    verify_graphs_.emplace(key, ge);
    return ge;
}

int CudaRunner::graph_tokens_for(const ForwardBatch& batch) const {
    if (!opt_.rt.cuda_graphs || batch.seqs.empty()) return 0;
    const size_t n = batch.seqs[0].tokens.size() + size_t(batch.seqs[0].draft_tokens);
    for (const auto& c : batch.seqs)
        if (c.tokens.size() + size_t(c.draft_tokens) != n) return 0;
    if (n == 1) return 1;
    if (!opt_.rt.verify_graphs || n > size_t(StepGemmThresholds::kVerifyShapedMaxTokens)) return 0;
    if (int64_t(decode_bucket(int(batch.seqs.size()))) * int64_t(n) > opt_.max_step_tokens) return 0;
    return int(n);
}

Result<int> CudaRunner::capture_decode_graphs() {
    int n = 0, prev = 0;
    for (int b = 1;; b = prev + 1) {
        const int Bp = decode_bucket(b);  // real batches (prev, Bp] use this bucket
        DSV4_RETURN_IF_ERROR(decode_graph(Bp, -1).status());
        ++n;
        for (size_t i = 0; i < sd_rules_.size(); ++i) {
            const ShapeRange& t = sd_rules_[i].tokens;
            if (t.any() || (t.lo <= Bp && t.hi > prev)) {
                DSV4_RETURN_IF_ERROR(decode_graph(Bp, int(i)).status());
                ++n;
            }
        }
        if (Bp >= opt_.max_seqs) break;
        prev = Bp;
    }
    return n;
}

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
        DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture([&] { return run_head(hp.T, hp.B); }));
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
        DSV4_RETURN_IF_ERROR(profile_capture([&] { return run_step(hp.B, hp.B, 1, hp.B, kAnyEndPos); }, prof));
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

Status CudaRunner::profile_capture(const std::function<Status()>& body, OpProfile& prof) {
    DSV4_CU(prof.reserve(4096));
    prof_ = &prof;
    auto captured = capture(body);
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
    Status s = run_step(hp.B, hp.T, hp.max_t, hp.R, hp.end_pos);
    prof_ = nullptr;
    DSV4_RETURN_IF_ERROR(s);
    DSV4_CU(cudaStreamSynchronize(stream_));
    DSV4_CU(prof.accumulate());
    return prof.table(1);
}

}  // namespace dsv4::cuda_runner_detail
