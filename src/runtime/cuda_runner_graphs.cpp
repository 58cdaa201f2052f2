// CudaRunner (see cuda_runner.h): CUDA graphs. A decode step's graph per batch bucket and
// sparse_decode rule (captured on first use, or all at start-up), a verify step's per (bucket, tokens per
// sequence, rows); the bench's timed and op-profiled replays are in cuda_runner_bench.cpp.
#include <cstdio>

#include "runtime/cuda_graph_pdl.h"
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

Result<cudaGraphExec_t> CudaRunner::capture(const std::function<Status()>& body, int pdl_tokens) {
    cudaGraph_t g = nullptr;
    DSV4_CU(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status s = body();
    cudaError_t e = cudaStreamEndCapture(stream_, &g);
    DSV4_RETURN_IF_ERROR(s);
    DSV4_CU(e);
    const int pdl_max = opt_.rt.graph_pdl_max_batch;
    int edges = 0;
    cudaGraph_t plain = nullptr;  // the graph as captured, kept while programmatic edges are untried
    if (opt_.rt.graph_pdl && (pdl_max == 0 || pdl_tokens <= pdl_max)) {
        e = cudaGraphClone(&plain, g);
        if (e != cudaSuccess) cudaGraphDestroy(g);
        DSV4_CU(e);
        auto made = make_kernel_edges_programmatic(g, opt_.rt.graph_pdl_clusters);
        if (!made.is_ok()) cudaGraphDestroy(g), cudaGraphDestroy(plain);
        DSV4_RETURN_IF_ERROR(made.status());
        edges = *made;
    }
    cudaGraphExec_t ge = nullptr;
    e = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess && edges > 0) {
        // A driver that rejects some programmatic edge must cost speed, not the step: instantiate the
        // graph as captured (the kernels' griddepcontrol instructions are no-ops without such edges).
        std::fprintf(stderr, "dsv4 cuda: graph with %d programmatic edges not instantiated (%s); plain edges used\n",
                     edges, cudaGetErrorString(e));
        cudaGetLastError();
        e = cudaGraphInstantiate(&ge, plain, 0);
        ++replays_.pdl_fallbacks;
        edges = 0;
    }
    if (plain != nullptr) cudaGraphDestroy(plain);
    DSV4_CU(e);
    replays_.pdl_edges += edges;
    return ge;
}

Result<cudaGraphExec_t> CudaRunner::decode_graph(int B, int sd_rule) {
    const int key = B * 64 + (sd_rule + 1);  // apply_tuning_rules allows at most 63 sparse_decode rules
    auto it = graphs_.find(key);
    if (it != graphs_.end()) return it->second;
    sd_rule_ = sd_rule;
    DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture([&] { return run_step(B, B, 1, B, kAnyEndPos); }, B));
    graphs_.emplace(key, ge);
    return ge;
}

Result<cudaGraphExec_t> CudaRunner::verify_graph(int B, int n, bool all_rows) {
    const int key = (B * 8 + n) * 2 + (all_rows ? 1 : 0);  // n <= StepGemmThresholds::kVerifyShapedMaxTokens < 8
    auto it = verify_graphs_.find(key);
    if (it != verify_graphs_.end()) return it->second;
    sd_rule_ = -1;  // tuning rules cover decode-only steps
    const int R = all_rows ? B * n : B;
    DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture([&] { return run_step(B, B * n, n, R, kAnyEndPos); }, B * n));
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

}  // namespace dsv4::cuda_runner_detail
