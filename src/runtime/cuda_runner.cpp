// CudaRunner (see cuda_runner.h): plan, eager step, graph capture/replay.
#include "runtime/cuda_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "dist/expert_partition.h"
#include "kernels/cuda/attention/sparse_decode.h"
#include "kernels/cuda/gemm/dense_gemv.h"
#include "kernels/cuda/gemm/kernel_params.h"
#include "kernels/cuda/moe/moe.h"
#include "kernels/cuda/ops/fast_path.h"
#include "kernels/cuda/ops/attn_variants.h"
#include "kernels/cuda/ops/ops.h"
#include "kernels/cuda/ops/sample_rows.h"
#include "model/checkpoint.h"
#include "model/load_plan.h"
#include "runtime/cuda_fast_table.h"
#include "runtime/cuda_bench_runner.h"
#include "runtime/op_profile.h"
#include "runtime/checkpoint_loader.h"
#include "runtime/cuda_weights.h"

namespace dsv4 {

namespace {

Status cuda_ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    return error(StatusCode::kInternal, "CUDA error in {}: {}", what, cudaGetErrorString(e));
}
#define DSV4_CU(expr) DSV4_RETURN_IF_ERROR(cuda_ok((expr), #expr))

// Activation and plan buffers, sized once from the options (fixed addresses: graphs replay them).
struct Workspace {
    float *X, *xn, *coeffs, *y, *qlat_raw, *qlat, *q, *kv_raw, *kv, *cv, *cg, *iv, *ig, *iq, *iw, *o, *z;
    float *glog, *wts, *h, *yp, *sa, *sb, *sh, *ys, *scores, *part_acc, *part_ml, *hn, *logits;
    int32_t *ids, *counts, *perm, *slot, *sel, *n_sel, *logit_rows;
    int32_t *tok_begin, *n_tok, *page_table, *tokens, *pos;
    int64_t* start_pos;
    int64_t *gate_off, *gate_len;
    double* mhc_mix = nullptr;  // [mhc_mix_rows, (2+n)n + 1] mHC mixing dot products (MhcArgs::mix_ws)
    int64_t mhc_mix_rows = 0;   // max(T, 32 B): decode steps split each token's n*d reduction in 32 chunks
    int64_t max_rows = 0;
    // Fast decode attention (sparse_decode): row lists, bf16 q / out, split partials.
    void *qb = nullptr, *ob = nullptr;
    // bf16 copies of the inputs of the large dense projections (round_to_bf16), for 32..max_seqs
    // tokens: [max_seqs, width] each, for o (wo_a), z (wo_b), q_lat (wq_b, indexer wq_b), xn (the
    // projections of xn and the router), sh (shared w2). Null when off.
    void *xb_o = nullptr, *xb_z = nullptr, *xb_qlat = nullptr, *xb_xn = nullptr, *xb_sh = nullptr;
    int64_t* row_offs = nullptr;
    int32_t* row_start = nullptr;
    float* sd_ws = nullptr;
    int64_t row_cap = 0;        // entries of row_offs
    int64_t sd_seq_splits = 0;  // batch x splits the split workspace holds
};

// Host copy of a step plan (pinned staging is not needed at these sizes).
struct HostPlan {
    int B = 0, T = 0, max_t = 0, R = 0;
    std::vector<int32_t> tok_begin, n_tok, page_table, tokens, pos, logit_rows;
    std::vector<int64_t> start_pos;
};

// Where init() takes the weights from when not from the RefModel/checkpoint (synthetic weights).
using WeightSource = std::function<Result<DevWeights>(DeviceArena&)>;

class CudaRunner final : public CudaBenchRunner {
public:
    CudaRunner(std::shared_ptr<const RefModel> model, KvLayout layout, CudaRunnerOptions opt)
        : model_(std::move(model)), cfg_(model_->config()), layout_(std::move(layout)), opt_(std::move(opt)) {}
    ~CudaRunner() override {
        for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g);
        for (auto& [b, g] : head_graphs_) cudaGraphExecDestroy(g);
        for (cudaStream_t s : side_)
            if (s) cudaStreamDestroy(s);
        for (cudaEvent_t e : join_)
            if (e) cudaEventDestroy(e);
        if (fork_) cudaEventDestroy(fork_);
        if (stream_) cudaStreamDestroy(stream_);
    }

    Status init(const Checkpoint* ckpt, WeightSource source = {});
    const ModelConfig& config() const override { return cfg_; }
    const KvLayout& kv_layout() const override { return layout_; }
    int64_t n_pages() const override { return opt_.n_pages; }
    int64_t max_positions() const override { return opt_.max_context; }
    Status forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) override;
    bool supports_device_sample(DeviceSample m) const override {
        return m == DeviceSample::kNone || m == DeviceSample::kGreedy || m == DeviceSample::kFull;
    }
    Status forward_sampled(const ForwardBatch& batch, StepOutput& out) override;

    // Bench hooks (cuda_bench_runner.h).
    CudaPoolInfo pool_info() const override {
        return {pool_.base, layout_.page_bytes, opt_.n_pages, opt_.rt.kv_rows};
    }
    Result<DecodeGraphTiming> time_decode_graph(const ForwardBatch& batch, int warmup, int reps) override;
    std::string variant_table() const override {
        return std::string("decode attention: ") +
               (fast_attn_ ? "sparse_decode (sm90 mma; option attn_variant / heuristic)\n" : "attn_decode (CUDA cores)\n") +
               (fast_attn_ ? std::string() : cuda::attn_variant_table(*variant_)) + cuda_fast_kernel_table(w_, cfg_, opt_.rt.fast_kernels);
    }
    size_t device_bytes() const override { return arena_.bytes(); }
    Status collective_warm_up() override {
        // [ep2] One eager all-reduce of the largest MoE output before any capture (NCCL sets up its
        // connections outside graph capture); every rank calls it together.
        if (ep_count_ == 0) return Status::ok();
        DSV4_RETURN_IF_ERROR(
            opt_.ep_all_reduce->sum_f32(ws_.y, int64_t(opt_.max_tokens) * cfg_.hidden_size, stream_));
        return cuda_ok(cudaStreamSynchronize(stream_), "expert-parallel warm-up all-reduce");
    }

private:
    // The step itself; honour_sample: kGreedy rows come back as argmax ids (cuda::argmax_rows).
    Status execute(const ForwardBatch& batch, bool honour_sample, StepOutput& out);
    // Copies the step's logits rows / device-sampled ids (rows of ws_.logits, batch order) out.
    Status fetch_outputs(const ForwardBatch& batch, bool honour_sample, int R, StepOutput& out);
    // The decode graph of bucket B (captured on first use; the plan must be uploaded).
    Result<cudaGraphExec_t> decode_graph(int B);
    // Captures what `body` launches on stream_ and instantiates it (the caller owns the result).
    Result<cudaGraphExec_t> capture(const std::function<Status()>& body);
    Status run_head(int T, int R);
    Status lm_head(int R);  // mHC head + final norm + LM head for R logit rows
    Status plan(const ForwardBatch& batch, bool decode_graph, HostPlan& hp) const;
    Status upload_plan(const HostPlan& hp);
    Status run_step(int B, int T, int max_t, int R);
    // Resolves opt_.rt's variant names against the registries (an unknown name is an error), stamps the
    // kernel choices into every weight descriptor and repacks the experts' codes (moe_layout).
    Status apply_kernel_choices();
    Status attention(int l, const cuda::StepPlan& sp, int T, int max_t, int splits);
    Status moe(int l, int T);
    cuda::StepPlan step_plan(int B) const;

    std::shared_ptr<const RefModel> model_;
    const ModelConfig& cfg_;
    KvLayout layout_;
    CudaRunnerOptions opt_;
    DeviceArena arena_;
    DevWeights w_;
    Workspace ws_{};
    cuda::PagePool pool_;
    cudaStream_t stream_ = nullptr;
    // Fork/join of independent work inside a step: side streams wait for fork_ recorded on stream_,
    // stream_ waits for join_[i] recorded on side_[i]. Under capture this makes graph branches.
    static constexpr int kSideStreams = 3;
    cudaStream_t side_[kSideStreams] = {};
    cudaEvent_t fork_ = nullptr, join_[kSideStreams] = {};
    Status fork(int n) {
        DSV4_CU(cudaEventRecord(fork_, stream_));
        for (int i = 0; i < n; ++i) DSV4_CU(cudaStreamWaitEvent(side_[i], fork_, 0));
        return Status::ok();
    }
    // *out = x [T, width] rounded to bf16 in buf (on stream s) when the bf16-input path is on for T
    // tokens, else null (the projections then round f32 x themselves).
    Status bf16_input(const float* x, int64_t width, int T, void* buf, cudaStream_t s, const void** out) {
        *out = nullptr;
        if (!buf || opt_.rt.x_bf16_min_tokens <= 0 || T < opt_.rt.x_bf16_min_tokens || T > opt_.max_seqs) return Status::ok();
        DSV4_CU(cuda::round_to_bf16(x, int64_t(T) * width, buf, s));
        *out = buf;
        return Status::ok();
    }
    Status join(int n) {
        for (int i = 0; i < n; ++i) {
            DSV4_CU(cudaEventRecord(join_[i], side_[i]));
            DSV4_CU(cudaStreamWaitEvent(stream_, join_[i], 0));
        }
        return Status::ok();
    }
    const cuda::AttnVariant* variant_ = nullptr;  // CUDA-core attention (attn_decode)
    int sd_variant_ = -1;                          // forced sparse_decode variant, -1 = heuristic
    int moe_variant_ = -1;                         // forced MXFP4 expert variant, -1 = heuristic
    bool fast_attn_ = false;
    int n_sms_ = 1;
    int pt_stride_ = 0;
    int n_gate_ranges_ = 0;
    std::map<int, cudaGraphExec_t> graphs_;
    int32_t* sampled_ = nullptr;  // [max_seqs] device-sampled ids (allocated on first use)
    // kFull rows (cuda::sample_rows), allocated on first use: weights [max_seqs, V] f32, per-row
    // results [max_seqs]; args and penalty tokens grow with the step's needs.
    float* sample_w_ = nullptr;
    cuda::SampleRowOut* sample_out_ = nullptr;
    struct GrowBuf {
        void* p = nullptr;
        size_t cap = 0;
        ~GrowBuf() { if (p) cudaFree(p); }
        Status reserve(size_t bytes) {
            if (bytes <= cap) return Status::ok();
            if (p) cudaFree(p);
            p = nullptr;
            cap = 0;
            DSV4_CU(cudaMalloc(&p, bytes));
            cap = bytes;
            return Status::ok();
        }
    };
    GrowBuf sample_args_, sample_toks_, sample_saved_;
    Status sample_full(const std::vector<cuda::SampleRowArgs>& args, const std::vector<cuda::SamplePenaltyToken>& toks,
                       std::vector<cuda::SampleRowOut>& res);
    std::map<int, cudaGraphExec_t> head_graphs_;  // bench: non-layer work alone, per bucket
    OpProfile* prof_ = nullptr;                   // bench: op marks while capturing a profiled step
    int ep_first_ = 0, ep_count_ = 0;             // [ep2] local routed experts (count 0: all, no EP)
    std::optional<dist::ExpertPartition> ep_;     // [ep2] set when ep_size > 1
    void mark(const char* label) {
        if (prof_) prof_->mark(label, stream_);
    }
};

Status CudaRunner::init(const Checkpoint* ckpt, WeightSource source) {
    // [ep2] Expert parallelism: this rank's slice of the routed experts.
    if (opt_.ep_size > 1) {
        DSV4_ASSIGN_OR_RETURN(ep_, dist::ExpertPartition::make(cfg_.n_routed_experts, opt_.ep_size));
        if (opt_.ep_rank < 0 || opt_.ep_rank >= opt_.ep_size)
            return invalid_argument("expert parallel rank {} of {}", opt_.ep_rank, opt_.ep_size);
        if (!opt_.ep_all_reduce || opt_.ep_all_reduce->size() != opt_.ep_size ||
            opt_.ep_all_reduce->rank() != opt_.ep_rank)
            return invalid_argument("expert parallel rank {} of {}: no matching all-reduce group", opt_.ep_rank,
                                    opt_.ep_size);
        ep_count_ = ep_->n_local();
        ep_first_ = ep_->first(opt_.ep_rank);
    }
    DSV4_CU(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (opt_.rt.side_streams) {
        for (int i = 0; i < kSideStreams; ++i) {
            DSV4_CU(cudaStreamCreateWithFlags(&side_[i], cudaStreamNonBlocking));
            DSV4_CU(cudaEventCreateWithFlags(&join_[i], cudaEventDisableTiming));
        }
        DSV4_CU(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    }
    int dev = 0;
    DSV4_CU(cudaGetDevice(&dev));
    DSV4_CU(cudaDeviceGetAttribute(&n_sms_, cudaDevAttrMultiProcessorCount, dev));
    if (source) {
        DSV4_ASSIGN_OR_RETURN(w_, source(arena_));
    } else {
        DSV4_ASSIGN_OR_RETURN(w_, upload_weights(*model_, ckpt, arena_, ep_first_, ep_count_));
    }

    DSV4_RETURN_IF_ERROR(apply_kernel_choices());

    // Page pool (4-byte words; rows in the layout's format, kv_rows resolved by make_cuda_runner).
    pool_.page_elems = layout_.page_elems;
    pool_.n_state_pages = layout_.n_state_pages;
    pool_.page_tokens = layout_.page_tokens;
    auto fmt = [](const KvRowSpec& r, int64_t words) {
        return cuda::RowFormat{int32_t(r.fmt), r.dim, r.rope_dim, int32_t(words)};
    };
    pool_.main = fmt(layout_.main_row, layout_.row_words_main);
    pool_.index = fmt(layout_.index_row, layout_.row_words_index);
    const KvRowFormat rows = layout_.row_format;
    // The fast kernel reads bf16 [512] rows (16-byte aligned: index rows must keep that) or the
    // 584-byte fp8 rows (8-byte aligned), 64 heads or a multiple of its 16-head tiles.
    fast_attn_ = opt_.rt.fast_attention && cfg_.head_dim == cuda::kKvHeadDim && cfg_.n_heads % 16 == 0 &&
                 ((rows == KvRowFormat::kBf16 && cfg_.index_head_dim % 8 == 0) ||
                  (rows == KvRowFormat::kFp8 && layout_.main_row.bytes() == cuda::kKvFp8RowBytes));
    DSV4_ASSIGN_OR_RETURN(pool_.base, arena_.alloc_n<float>(size_t(opt_.n_pages) * size_t(layout_.page_elems)));
    pt_stride_ = int(layout_.pages_for_tokens(opt_.max_context));

    // Workspace.
    const size_t Tm = size_t(opt_.max_tokens), Bm = size_t(opt_.max_seqs);
    const size_t n = cfg_.hc_mult, d = cfg_.hidden_size, H = cfg_.n_heads, D = cfg_.head_dim, qr = cfg_.q_lora_rank;
    const size_t ID = std::max(cfg_.index_head_dim, 1), IH = std::max(cfg_.index_n_heads, 1);
    const size_t E = cfg_.n_routed_experts, K = cfg_.n_experts_per_tok, I = cfg_.moe_intermediate_size;
    const size_t G = cfg_.o_groups, orank = cfg_.o_lora_rank, V = size_t(cfg_.vocab_size);
    int min_ratio = 0;
    for (int l = 0; l < cfg_.n_layers; ++l)
        if (cfg_.layer_types[l] == AttnType::kCSA)
            min_ratio = min_ratio == 0 ? cfg_.compress_ratio(l) : std::min(min_ratio, cfg_.compress_ratio(l));
    ws_.max_rows = min_ratio > 0 ? opt_.max_context / min_ratio + 1 : 1;
    const size_t splits = size_t(variant_->max_splits), topk = size_t(std::max(cfg_.index_topk, 1));
    auto F = [&](float*& p, size_t cnt) -> Status {
        DSV4_ASSIGN_OR_RETURN(p, arena_.alloc_n<float>(cnt));
        return Status::ok();
    };
    auto Ii = [&](int32_t*& p, size_t cnt) -> Status {
        DSV4_ASSIGN_OR_RETURN(p, arena_.alloc_n<int32_t>(cnt));
        return Status::ok();
    };
    DSV4_RETURN_IF_ERROR(F(ws_.X, Tm * n * d));
    DSV4_RETURN_IF_ERROR(F(ws_.xn, Tm * d));
    DSV4_RETURN_IF_ERROR(F(ws_.coeffs, Tm * (2 * n + n * n)));
    ws_.mhc_mix_rows = int64_t(std::max(Tm, 32 * Bm));
    DSV4_ASSIGN_OR_RETURN(ws_.mhc_mix, arena_.alloc_n<double>(size_t(ws_.mhc_mix_rows) * ((2 + n) * n + 1)));
    DSV4_RETURN_IF_ERROR(F(ws_.y, Tm * d));
    DSV4_RETURN_IF_ERROR(F(ws_.qlat_raw, Tm * qr));
    DSV4_RETURN_IF_ERROR(F(ws_.qlat, Tm * qr));
    DSV4_RETURN_IF_ERROR(F(ws_.q, Tm * H * D));
    DSV4_RETURN_IF_ERROR(F(ws_.kv_raw, Tm * D));
    DSV4_RETURN_IF_ERROR(F(ws_.kv, Tm * D));
    DSV4_RETURN_IF_ERROR(F(ws_.cv, Tm * 2 * D));
    DSV4_RETURN_IF_ERROR(F(ws_.cg, Tm * 2 * D));
    DSV4_RETURN_IF_ERROR(F(ws_.iv, Tm * 2 * ID));
    DSV4_RETURN_IF_ERROR(F(ws_.ig, Tm * 2 * ID));
    DSV4_RETURN_IF_ERROR(F(ws_.iq, Tm * IH * ID));
    DSV4_RETURN_IF_ERROR(F(ws_.iw, Tm * IH));
    DSV4_RETURN_IF_ERROR(F(ws_.o, Tm * H * D));
    DSV4_RETURN_IF_ERROR(F(ws_.z, Tm * G * orank));
    DSV4_RETURN_IF_ERROR(F(ws_.glog, Tm * E));
    DSV4_RETURN_IF_ERROR(F(ws_.wts, Tm * K));
    DSV4_RETURN_IF_ERROR(F(ws_.h, Tm * K * I));
    DSV4_RETURN_IF_ERROR(F(ws_.yp, Tm * K * d));
    DSV4_RETURN_IF_ERROR(F(ws_.sa, Tm * I));
    DSV4_RETURN_IF_ERROR(F(ws_.sb, Tm * I));
    DSV4_RETURN_IF_ERROR(F(ws_.sh, Tm * I));
    DSV4_RETURN_IF_ERROR(F(ws_.ys, Tm * d));
    DSV4_RETURN_IF_ERROR(F(ws_.scores, Bm * size_t(ws_.max_rows)));
    const size_t old_path = fast_attn_ ? 0 : 1;  // the CUDA-core kernel's split partials
    DSV4_RETURN_IF_ERROR(F(ws_.part_acc, std::max<size_t>(1, old_path * Bm * H * splits * D)));
    DSV4_RETURN_IF_ERROR(F(ws_.part_ml, std::max<size_t>(1, old_path * Bm * H * splits * 2)));
    if (fast_attn_) {
        // Rows per sequence: the window plus the largest compressed set (CSA top-k, HCA all rows).
        int64_t max_comp = 0;
        for (int l = 0; l < cfg_.n_layers; ++l) {
            const int r = cfg_.compress_ratio(l);
            if (r > 0)
                max_comp = std::max<int64_t>(max_comp, cfg_.layer_types[l] == AttnType::kCSA
                                                           ? int64_t(cfg_.index_topk)
                                                           : opt_.max_context / r + 1);
        }
        ws_.row_cap = int64_t(Bm) * (cfg_.sliding_window + max_comp);
        // batch x splits <= max(batch, target CTAs): a forced split-KV target larger than 2 x SMs must fit too.
        ws_.sd_seq_splits = std::max<int64_t>({int64_t(Bm), 2 * int64_t(n_sms_), int64_t(opt_.rt.split_kv_target_ctas)});
        DSV4_ASSIGN_OR_RETURN(ws_.qb, arena_.alloc(Bm * H * D * 2));
        DSV4_ASSIGN_OR_RETURN(ws_.ob, arena_.alloc(Bm * H * D * 2));
        DSV4_ASSIGN_OR_RETURN(ws_.row_offs, arena_.alloc_n<int64_t>(size_t(ws_.row_cap)));
        DSV4_RETURN_IF_ERROR(Ii(ws_.row_start, Bm + 1));
        DSV4_RETURN_IF_ERROR(F(ws_.sd_ws, cuda::sparse_decode_workspace_floats(int(ws_.sd_seq_splits), int(H), 1)));
    }
    if (opt_.rt.x_bf16_min_tokens > 0 && int64_t(Bm) >= opt_.rt.x_bf16_min_tokens) {
        const size_t G = size_t(cfg_.o_groups), orank = size_t(cfg_.o_lora_rank), I = size_t(cfg_.moe_intermediate_size);
        DSV4_ASSIGN_OR_RETURN(ws_.xb_o, arena_.alloc(Bm * H * D * 2));
        DSV4_ASSIGN_OR_RETURN(ws_.xb_z, arena_.alloc(Bm * G * orank * 2));
        DSV4_ASSIGN_OR_RETURN(ws_.xb_qlat, arena_.alloc(Bm * qr * 2));
        DSV4_ASSIGN_OR_RETURN(ws_.xb_xn, arena_.alloc(Bm * d * 2));
        DSV4_ASSIGN_OR_RETURN(ws_.xb_sh, arena_.alloc(Bm * I * 2));
    }
    DSV4_RETURN_IF_ERROR(F(ws_.hn, Bm * d));
    DSV4_RETURN_IF_ERROR(F(ws_.logits, Bm * V));
    DSV4_RETURN_IF_ERROR(Ii(ws_.ids, Tm * K));
    DSV4_RETURN_IF_ERROR(Ii(ws_.counts, 3 * E + 1));
    DSV4_RETURN_IF_ERROR(Ii(ws_.perm, Tm * K));
    DSV4_RETURN_IF_ERROR(Ii(ws_.slot, Tm * K));
    DSV4_RETURN_IF_ERROR(Ii(ws_.sel, Bm * topk));
    DSV4_RETURN_IF_ERROR(Ii(ws_.n_sel, Bm));
    DSV4_RETURN_IF_ERROR(Ii(ws_.logit_rows, Bm));
    DSV4_RETURN_IF_ERROR(Ii(ws_.tok_begin, Bm));
    DSV4_RETURN_IF_ERROR(Ii(ws_.n_tok, Bm));
    DSV4_RETURN_IF_ERROR(Ii(ws_.page_table, Bm * size_t(pt_stride_)));
    DSV4_RETURN_IF_ERROR(Ii(ws_.tokens, Tm));
    DSV4_RETURN_IF_ERROR(Ii(ws_.pos, Tm));
    DSV4_ASSIGN_OR_RETURN(ws_.start_pos, arena_.alloc_n<int64_t>(Bm));

    // Gate ranges reset to -inf at sequence start.
    std::vector<int64_t> off, len;
    for (int l = 0; l < cfg_.n_layers; ++l) {
        const LayerStateLayout& s = layout_.layers[l];
        if (s.ratio == 0) continue;
        const bool csa = cfg_.layer_types[l] == AttnType::kCSA;
        const int64_t kappa = csa ? 2 : 1;
        off.push_back(s.comp_gate_offset);
        len.push_back(kappa * s.ratio * kappa * cfg_.head_dim);
        if (csa) {
            off.push_back(s.idx_gate_offset);
            len.push_back(2 * s.ratio * 2 * int64_t(cfg_.index_head_dim));
        }
    }
    n_gate_ranges_ = int(off.size());
    DSV4_ASSIGN_OR_RETURN(void* po, arena_.upload(off.data(), off.size() * sizeof(int64_t)));
    DSV4_ASSIGN_OR_RETURN(void* pl, arena_.upload(len.data(), len.size() * sizeof(int64_t)));
    ws_.gate_off = static_cast<int64_t*>(po);
    ws_.gate_len = static_cast<int64_t*>(pl);
    DSV4_CU(cudaDeviceSynchronize());
    if (opt_.verbose) {
        std::fprintf(stderr,
                     "dsv4 cuda: %d SMs, weights: %s; pool %lld pages x %lld B; graphs %s; KV rows %s (%lld B); "
                     "decode attention %s\n%s",
                     n_sms_, w_.summary.c_str(), (long long)opt_.n_pages, (long long)layout_.page_bytes,
                     opt_.rt.cuda_graphs ? "on" : "off", kv_row_format_name(rows), (long long)layout_.main_row.bytes(),
                     fast_attn_ ? "sparse_decode (sm90 mma)" : "attn_decode (CUDA cores)",
                     fast_attn_ ? "" : cuda::attn_variant_table(*variant_).c_str());
        std::fprintf(stderr, "%s", cuda_fast_kernel_table(w_, cfg_, opt_.rt.fast_kernels).c_str());
    }
    return Status::ok();
}

Status CudaRunner::apply_kernel_choices() {
    const RuntimeOptions& rt = opt_.rt;
    variant_ = cuda::attn_variant_by_name("");
    if (!rt.attn_variant.empty()) {
        // One name space for both attention paths: a CUDA-core variant or a sparse_decode one.
        sd_variant_ = cuda::variant_by_name(rt.attn_variant, cuda::sparse_decode_variant_count(),
                                            [](int i) { return cuda::sparse_decode_variant_name(i); });
        const cuda::AttnVariant* v = cuda::attn_variant_by_name(rt.attn_variant);
        if (v) variant_ = v;
        if (!v && sd_variant_ < 0) {
            std::string known;
            for (const auto& a : cuda::attn_variants()) known += std::string(known.empty() ? "" : ", ") + a.name;
            for (int i = 0; i < cuda::sparse_decode_variant_count(); ++i) known += ", " + cuda::sparse_decode_variant_name(i);
            return invalid_argument("option attn_variant: unknown variant '{}' (known: {})", rt.attn_variant, known);
        }
    }
    int gemv = -1;
    if (!rt.gemv_variant.empty()) {
        gemv = cuda::variant_by_name(rt.gemv_variant, cuda::dense_gemv_variant_count(),
                                     [](int i) { return cuda::dense_gemv_variant_name(i); });
        if (gemv < 0) return invalid_argument("option gemv_variant: unknown variant '{}' (dsv4 decode-bench lists them)", rt.gemv_variant);
    }
    if (!rt.moe_variant.empty()) {
        moe_variant_ = cuda::variant_by_name(rt.moe_variant, cuda::moe_expert_variant_count(),
                                             [](int i) { return cuda::moe_expert_variant_name(i); });
        if (moe_variant_ < 0) return invalid_argument("option moe_variant: unknown variant '{}' (dsv4 decode-bench lists them)", rt.moe_variant);
    }
    auto stamp = [&](cuda::WeightDesc& w) {
        w.fast = rt.fast_kernels;
        w.gemv_variant = gemv;
    };
    stamp(w_.embed);
    stamp(w_.head);
    const bool repack = rt.fast_kernels && rt.moe_layout == "pair-rotated";
    const int n_local = ep_count_ > 0 ? ep_count_ : cfg_.n_routed_experts;
    for (DevLayer& L : w_.layers) {
        for (cuda::WeightDesc* w : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.comp.wkv, &L.comp.wgate, &L.idx_comp.wkv,
                                    &L.idx_comp.wgate, &L.idx_wq_b, &L.idx_wproj, &L.gate, &L.sh_w1, &L.sh_w3, &L.sh_w2,
                                    &L.ex_w1, &L.ex_w3, &L.ex_w2})
            stamp(*w);
        // The fast expert GEMV's code layout where it applies (fast_path.h); "checkpoint" keeps the file's.
        DSV4_CU(cuda::moe_expert_weights_to_fast_layout(&L.ex_w1, &L.ex_w3, &L.ex_w2, n_local, repack, stream_));
    }
    return cuda_ok(cudaStreamSynchronize(stream_), "expert weight repack");
}

Status CudaRunner::plan(const ForwardBatch& batch, bool decode_graph, HostPlan& hp) const {
    const int B = int(batch.seqs.size());
    if (B > opt_.max_seqs) return invalid_argument("{} sequences in one step, the CUDA runner takes {}", B, opt_.max_seqs);
    int Bp = B;
    if (decode_graph) {
        Bp = 1;
        while (Bp < B) Bp *= 2;
        Bp = std::min(Bp, opt_.max_seqs);
    }
    hp = HostPlan{};
    hp.B = Bp;
    hp.tok_begin.assign(Bp, 0);
    hp.n_tok.assign(Bp, 0);
    hp.start_pos.assign(Bp, 0);
    hp.page_table.assign(size_t(Bp) * pt_stride_, 0);
    for (int s = 0; s < B; ++s) {
        const SeqChunk& c = batch.seqs[s];
        const int64_t nt = int64_t(c.tokens.size());
        if (nt == 0) return invalid_argument("sequence {}: empty chunk", c.seq_id);
        for (int32_t t : c.tokens)
            if (t < 0 || t >= cfg_.vocab_size)
                return error(StatusCode::kOutOfRange, "sequence {}: token id {} is outside the vocabulary [0, {})",
                             c.seq_id, t, cfg_.vocab_size);
        if (c.start_pos + nt > opt_.max_context)
            return error(StatusCode::kOutOfRange, "sequence {}: position {} beyond the CUDA runner's max context {}",
                         c.seq_id, c.start_pos + nt - 1, opt_.max_context);
        const int64_t need = layout_.pages_for_tokens(c.start_pos + nt);
        if (int64_t(c.page_table.size()) < need)
            return error(StatusCode::kFailedPrecondition, "sequence {}: page table has {} pages, positions up to {} need {}",
                         c.seq_id, c.page_table.size(), c.start_pos + nt - 1, need);
        const size_t np = std::min(c.page_table.size(), size_t(pt_stride_));
        for (size_t i = 0; i < np; ++i) {
            const int32_t p = c.page_table[i];
            if (p < 0 || p >= opt_.n_pages)
                return error(StatusCode::kOutOfRange, "sequence {}: page id {} outside the pool [0, {})", c.seq_id, p,
                             opt_.n_pages);
            hp.page_table[size_t(s) * pt_stride_ + i] = p;
        }
        hp.tok_begin[s] = int32_t(hp.tokens.size());
        hp.n_tok[s] = int32_t(nt);
        hp.start_pos[s] = c.start_pos;
        hp.max_t = std::max<int>(hp.max_t, int(nt));
        for (int64_t i = 0; i < nt; ++i) {
            hp.tokens.push_back(c.tokens[i]);
            hp.pos.push_back(int32_t(c.start_pos + i));
        }
        if (c.want_logits) hp.logit_rows.push_back(int32_t(hp.tokens.size() - 1));
    }
    for (int s = B; s < Bp; ++s) {  // graph padding: one dummy token each, n_tok 0 (skipped by stateful ops)
        hp.tok_begin[s] = int32_t(hp.tokens.size());
        hp.tokens.push_back(0);
        hp.pos.push_back(0);
    }
    hp.T = int(hp.tokens.size());
    if (hp.T > opt_.max_tokens)
        return invalid_argument("{} tokens in one step, the CUDA runner takes {}", hp.T, opt_.max_tokens);
    hp.R = int(hp.logit_rows.size());
    return Status::ok();
}

Status CudaRunner::upload_plan(const HostPlan& hp) {
    auto up = [&](void* dst, const void* src, size_t bytes) {
        return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "plan upload");
    };
    std::vector<int32_t> rows = hp.logit_rows;
    rows.resize(size_t(hp.B), 0);  // padded rows read token 0
    DSV4_RETURN_IF_ERROR(up(ws_.tok_begin, hp.tok_begin.data(), hp.B * sizeof(int32_t)));
    DSV4_RETURN_IF_ERROR(up(ws_.n_tok, hp.n_tok.data(), hp.B * sizeof(int32_t)));
    DSV4_RETURN_IF_ERROR(up(ws_.start_pos, hp.start_pos.data(), hp.B * sizeof(int64_t)));
    DSV4_RETURN_IF_ERROR(up(ws_.page_table, hp.page_table.data(), hp.page_table.size() * sizeof(int32_t)));
    DSV4_RETURN_IF_ERROR(up(ws_.tokens, hp.tokens.data(), hp.T * sizeof(int32_t)));
    DSV4_RETURN_IF_ERROR(up(ws_.pos, hp.pos.data(), hp.T * sizeof(int32_t)));
    DSV4_RETURN_IF_ERROR(up(ws_.logit_rows, rows.data(), rows.size() * sizeof(int32_t)));
    // Pageable sources: wait before the host vectors go away.
    return cuda_ok(cudaStreamSynchronize(stream_), "plan upload");
}

cuda::StepPlan CudaRunner::step_plan(int B) const {
    cuda::StepPlan sp;
    sp.n_seqs = B;
    sp.tok_begin = ws_.tok_begin;
    sp.n_tok = ws_.n_tok;
    sp.start_pos = ws_.start_pos;
    sp.page_table = ws_.page_table;
    sp.pt_stride = pt_stride_;
    sp.tokens = ws_.tokens;
    sp.pos = ws_.pos;
    return sp;
}

Status CudaRunner::attention(int l, const cuda::StepPlan& sp, int T, int max_t, int splits) {
    const DevLayer& L = w_.layers[l];
    const LayerStateLayout& S = layout_.layers[l];
    const int d = cfg_.hidden_size, H = cfg_.n_heads, D = cfg_.head_dim, qr = cfg_.q_lora_rank, R = cfg_.rope_dim;
    const float eps = float(cfg_.rms_norm_eps);
    const int r = cfg_.compress_ratio(l);
    const bool csa = cfg_.layer_types[l] == AttnType::kCSA;
    const float* rope = r == 0 ? w_.rope_main : w_.rope_compress;
    cudaStream_t st = stream_;
    const int IH = cfg_.index_n_heads, ID = cfg_.index_head_dim;
    const int kappa = csa ? 2 : 1;
    // The projections of xn are independent until kv_step: q (then the indexer queries, which need
    // q_lat) on stream_, kv / compressor / indexer compressor + weights on side streams. At batch 1
    // each is a short, CTA-starved GEMV, so overlapping them fills the GPU.
    const bool ov = opt_.rt.side_streams;
    const int n_side = !ov ? 0 : csa ? 3 : r > 0 ? 2 : 1;
    cudaStream_t s_kv = ov ? side_[0] : st, s_comp = ov ? side_[1] : st, s_idx = ov ? side_[2] : st;
    const void* xnb = nullptr;  // bf16 xn for every projection of xn (converted before the fork)
    DSV4_RETURN_IF_ERROR(bf16_input(ws_.xn, d, T, ws_.xb_xn, st, &xnb));
    if (ov) DSV4_RETURN_IF_ERROR(fork(n_side));
    mark(ov ? "q|kv|compressor|indexer proj (streams)" : "q: wq_a+norm+wq_b+rope");
    DSV4_CU(cuda::linear(L.wq_a, -1, ws_.xn, d, 0, 0, ws_.qlat_raw, qr, T, false, st, xnb));
    DSV4_CU(cuda::norm_rope(ws_.qlat_raw, qr, ws_.qlat, qr, T, qr, true, L.q_norm, eps, nullptr, 0, ws_.pos, 1, false, st));
    const void* qlb = nullptr;
    DSV4_RETURN_IF_ERROR(bf16_input(ws_.qlat, qr, T, ws_.xb_qlat, st, &qlb));
    DSV4_CU(cuda::linear(L.wq_b, -1, ws_.qlat, qr, 0, 0, ws_.q, int64_t(H) * D, T, false, st, qlb));
    DSV4_CU(cuda::norm_rope(ws_.q, D, ws_.q, D, T * H, D, true, nullptr, eps, rope, R, ws_.pos, H, false, st));
    if (csa) {
        DSV4_CU(cuda::linear(L.idx_wq_b, -1, ws_.qlat, qr, 0, 0, ws_.iq, int64_t(IH) * ID, T, false, st, qlb));
        DSV4_CU(cuda::norm_rope(ws_.iq, ID, ws_.iq, ID, T * IH, ID, false, nullptr, eps, w_.rope_compress, R, ws_.pos,
                                IH, false, st));
    }
    if (!ov) mark("kv: wkv+norm+rope");
    DSV4_CU(cuda::linear(L.wkv, -1, ws_.xn, d, 0, 0, ws_.kv_raw, D, T, false, s_kv, xnb));
    DSV4_CU(cuda::norm_rope(ws_.kv_raw, D, ws_.kv, D, T, D, true, L.kv_norm, eps, rope, R, ws_.pos, 1, false, s_kv));
    if (r > 0) {
        if (!ov) mark("compressor proj");
        DSV4_CU(cuda::linear(L.comp.wkv, -1, ws_.xn, d, 0, 0, ws_.cv, kappa * D, T, false, s_comp, xnb));
        DSV4_CU(cuda::linear(L.comp.wgate, -1, ws_.xn, d, 0, 0, ws_.cg, kappa * D, T, false, s_comp, xnb));
    }
    if (csa) {
        if (!ov) mark("indexer proj");
        DSV4_CU(cuda::linear(L.idx_comp.wkv, -1, ws_.xn, d, 0, 0, ws_.iv, 2 * ID, T, false, s_idx, xnb));
        DSV4_CU(cuda::linear(L.idx_comp.wgate, -1, ws_.xn, d, 0, 0, ws_.ig, 2 * ID, T, false, s_idx, xnb));
        DSV4_CU(cuda::linear(L.idx_wproj, -1, ws_.xn, d, 0, 0, ws_.iw, IH, T, false, s_idx, xnb));
        const float wscale = 1.0f / std::sqrt(float(ID)) / std::sqrt(float(IH));
        DSV4_CU(cuda::scale_inplace(ws_.iw, int64_t(T) * IH, wscale, s_idx));
    }
    if (ov) DSV4_RETURN_IF_ERROR(join(n_side));
    cuda::KvStepArgs ka;
    ka.W = cfg_.sliding_window;
    ka.D = D;
    ka.ring_off = S.ring_offset;
    ka.kv = ws_.kv;
    ka.rope_inv_freq = w_.rope_compress;
    ka.rope_dim = R;
    ka.eps = eps;
    if (r > 0) {
        ka.comp[0] = {r, D, csa, S.comp_kv_offset, S.comp_gate_offset, S.row_offset, pool_.main, ws_.cv, ws_.cg,
                      L.comp.ape, L.comp.norm};
        ka.n_comp = 1;
    }
    if (csa) {
        ka.comp[1] = {r, ID, true, S.idx_kv_offset, S.idx_gate_offset, S.idx_row_offset, pool_.index, ws_.iv,
                      ws_.ig, L.idx_comp.ape, L.idx_comp.norm};
        ka.n_comp = 2;
    }
    cuda::IndexerArgs ia;
    ia.ratio = r;
    ia.IH = IH;
    ia.ID = ID;
    ia.topk = cfg_.index_topk;
    ia.idx_row_off = S.idx_row_offset;
    ia.q = ws_.iq;
    ia.w = ws_.iw;
    ia.scores = ws_.scores;
    ia.max_rows = ws_.max_rows;
    ia.sel = ws_.sel;
    ia.n_sel = ws_.n_sel;
    cuda::AttnArgs aa;
    aa.H = H;
    aa.D = D;
    aa.W = cfg_.sliding_window;
    aa.ratio = r;
    aa.csa = csa;
    aa.ring_off = S.ring_offset;
    aa.row_off = S.row_offset;
    aa.topk = std::max(cfg_.index_topk, 1);
    aa.sel = ws_.sel;
    aa.n_sel = ws_.n_sel;
    aa.q = ws_.q;
    aa.sink = L.attn_sink;
    aa.inv_freq = rope;
    aa.rope_dim = R;
    aa.scale = 1.0f / std::sqrt(float(D));
    aa.part_acc = ws_.part_acc;
    aa.part_ml = ws_.part_ml;
    aa.out = ws_.o;
    // Fast path: row lists -> sparse_decode (bf16 q / out) -> f32 with inverse RoPE.
    cuda::RowListArgs ra;
    cuda::SparseDecodeArgs sa;
    if (fast_attn_) {
        ra.W = cfg_.sliding_window;
        ra.ratio = r;
        ra.csa = csa;
        ra.ring_off = S.ring_offset;
        ra.row_off = S.row_offset;
        ra.topk = aa.topk;
        ra.sel = ws_.sel;
        ra.n_sel = ws_.n_sel;
        ra.unit_bytes = pool_.main.fmt == int32_t(KvRowFormat::kFp8) ? 1 : 2;
        ra.offsets = ws_.row_offs;
        ra.row_start = ws_.row_start;
        ra.capacity = ws_.row_cap;
        sa.q = ws_.qb;
        sa.kv_pool = pool_.base;
        sa.row_offsets = ws_.row_offs;
        sa.row_start = ws_.row_start;
        sa.sink = L.attn_sink;
        sa.out = ws_.ob;
        sa.workspace = ws_.sd_ws;
        sa.format = ra.unit_bytes == 1 ? cuda::KvFormat::kFp8 : cuda::KvFormat::kBf16;
        sa.batch = sp.n_seqs;
        sa.n_heads = H;
        sa.max_rows = int(cfg_.sliding_window + (r == 0 ? 0 : csa ? int64_t(aa.topk) : opt_.max_context / r));
        sa.scale = aa.scale;
        sa.variant = sd_variant_;
        sa.target_ctas = opt_.rt.split_kv_target_ctas;
        const int64_t sd_splits = cuda::sparse_decode_splits_for(sa);
        if (int64_t(sa.batch) * sd_splits > ws_.sd_seq_splits)
            return error(StatusCode::kInternal, "sparse_decode: {} sequences x {} splits exceed the workspace ({})",
                         sa.batch, sd_splits, ws_.sd_seq_splits);
    }
    for (int t = 0; t < max_t; ++t) {
        ka.t = ia.t = aa.t = ra.t = t;
        mark("kv_step (ring+compressors)");
        DSV4_CU(cuda::kv_step(sp, pool_, ka, st));
        if (csa) {
            mark("indexer scores");
            DSV4_CU(cuda::indexer_scores(sp, pool_, ia, st));
            mark("indexer top-k");
            DSV4_CU(cuda::indexer_select(sp, ia, st));
        }
        if (fast_attn_) {
            mark("attn row lists + q bf16");
            DSV4_CU(cuda::build_row_lists(sp, pool_, ra, st));
            DSV4_CU(cuda::q_rows_bf16(sp, t, ws_.q, H * D, ws_.qb, st));
            mark("sparse_decode");
            DSV4_RETURN_IF_ERROR(cuda::sparse_decode_launch(sa, st));
            mark("attn out (inv rope)");
            DSV4_CU(cuda::attn_out_rows(sp, t, ws_.ob, H, D, rope, R, ws_.o, st));
        } else {
            mark("attn_decode");
            DSV4_CU(cuda::attn_decode(sp, pool_, aa, *variant_, splits, st));
        }
    }
    const int G = cfg_.o_groups, orank = cfg_.o_lora_rank, hpg = H / G;
    mark("wo_a+wo_b");
    const void* ob = nullptr;
    DSV4_RETURN_IF_ERROR(bf16_input(ws_.o, int64_t(H) * D, T, ws_.xb_o, st, &ob));
    DSV4_CU(cuda::linear(L.wo_a, -1, ws_.o, int64_t(H) * D, orank, int64_t(hpg) * D, ws_.z, int64_t(G) * orank, T,
                         false, st, ob));
    const void* zb = nullptr;
    DSV4_RETURN_IF_ERROR(bf16_input(ws_.z, int64_t(G) * orank, T, ws_.xb_z, st, &zb));
    DSV4_CU(cuda::linear(L.wo_b, -1, ws_.z, int64_t(G) * orank, 0, 0, ws_.y, d, T, false, st, zb));
    return Status::ok();
}

Status CudaRunner::moe(int l, int T) {
    const DevLayer& L = w_.layers[l];
    const int d = cfg_.hidden_size, E = cfg_.n_routed_experts, I = cfg_.moe_intermediate_size;
    const float lim = float(cfg_.swiglu_limit);
    cudaStream_t st = stream_;
    // The shared expert is independent of routing: on a side stream it overlaps the router and the
    // routed experts (joined before the combine, which adds its output).
    // [ep2] Under expert parallelism the shared expert of layer l runs on rank l % N only (the
    // ranks take turns, so no rank carries it in every layer); the others add no shared term.
    const bool shared_here = !ep_ || ep_->shared_expert_rank(l) == opt_.ep_rank;
    const bool ov = opt_.rt.side_streams && shared_here;
    const void* xnb = nullptr;  // bf16 xn for the shared expert and the router (converted before the fork)
    DSV4_RETURN_IF_ERROR(bf16_input(ws_.xn, d, T, ws_.xb_xn, st, &xnb));
    auto shared_expert = [&](cudaStream_t s) -> Status {  // ys = w2 SwiGLU(w1 xn, w3 xn)
        DSV4_CU(cuda::linear(L.sh_w1, -1, ws_.xn, d, 0, 0, ws_.sa, I, T, false, s, xnb));
        DSV4_CU(cuda::linear(L.sh_w3, -1, ws_.xn, d, 0, 0, ws_.sb, I, T, false, s, xnb));
        DSV4_CU(cuda::swiglu(ws_.sa, ws_.sb, ws_.sh, int64_t(T) * I, lim, s));
        const void* shb = nullptr;
        DSV4_RETURN_IF_ERROR(bf16_input(ws_.sh, I, T, ws_.xb_sh, s, &shb));
        DSV4_CU(cuda::linear(L.sh_w2, -1, ws_.sh, I, 0, 0, ws_.ys, d, T, false, s, shb));
        return Status::ok();
    };
    if (ov) {
        DSV4_RETURN_IF_ERROR(fork(1));
        DSV4_RETURN_IF_ERROR(shared_expert(side_[0]));
    }
    mark(ov ? "router gate (shared expert on a side stream)" : "router gate");
    DSV4_CU(cuda::linear(L.gate, -1, ws_.xn, d, 0, 0, ws_.glog, E, T, false, st, xnb));
    cuda::MoeArgs a;
    a.T = T;
    a.E = E;
    a.K = cfg_.n_experts_per_tok;
    a.d = d;
    a.I = I;
    a.logits = ws_.glog;
    const bool hash = cfg_.mlp_types[l] == MoeRouting::kHash;
    a.bias = hash ? nullptr : L.gate_bias;
    a.tid2eid = hash ? L.tid2eid : nullptr;
    a.tokens = ws_.tokens;
    a.route_scale = float(cfg_.routed_scaling_factor);
    a.norm_topk = cfg_.norm_topk_prob;
    a.limit = lim;
    a.ids = ws_.ids;
    a.wts = ws_.wts;
    a.counts = ws_.counts;
    a.perm = ws_.perm;
    a.slot = ws_.slot;
    a.x = ws_.xn;
    a.h = ws_.h;
    a.yp = ws_.yp;
    a.w1 = L.ex_w1;
    a.w3 = L.ex_w3;
    a.w2 = L.ex_w2;
    a.ep_first = ep_first_;  // [ep2] local experts only (count 0: all)
    a.ep_count = ep_count_;
    a.fast = opt_.rt.fast_kernels;
    a.moe_variant = moe_variant_;
    mark("routed experts");
    DSV4_CU(cuda::moe_experts(a, st));
    if (ov) {
        mark("shared expert (join)");
        DSV4_RETURN_IF_ERROR(join(1));
    } else if (shared_here) {
        mark("shared expert");
        DSV4_RETURN_IF_ERROR(shared_expert(st));
    }
    mark("moe combine");
    DSV4_CU(cuda::moe_combine(a, shared_here ? ws_.ys : nullptr, ws_.y, st));
    if (ep_count_ > 0) {
        // [ep2] y = sum over ranks of each rank's partial MoE output: identical bits on every rank.
        mark("ep all-reduce");
        DSV4_RETURN_IF_ERROR(opt_.ep_all_reduce->sum_f32(ws_.y, int64_t(T) * d, st));
    }
    return Status::ok();
}

Status CudaRunner::run_step(int B, int T, int max_t, int R) {
    const cuda::StepPlan sp = step_plan(B);
    cudaStream_t st = stream_;
    const int n = cfg_.hc_mult, d = cfg_.hidden_size;
    const float eps = float(cfg_.rms_norm_eps);
    const int splits = cuda::attn_splits(*variant_, B, cfg_.n_heads, n_sms_);
    mark("reset+embed");
    DSV4_CU(cuda::reset_state(sp, pool_, layout_.state_elems, ws_.gate_off, ws_.gate_len, n_gate_ranges_, st));
    DSV4_CU(cuda::embed(w_.embed, ws_.tokens, T, n, ws_.X, st));
    // The mHC sites in order: (layer, 0 = attention, 1 = MoE).
    auto site_args = [&](int l, int site) {
        const DevLayer& L = w_.layers[l];
        const DevMhc& m = site == 0 ? L.hc_attn : L.hc_ffn;
        return cuda::MhcArgs{m.fn, m.base, m.scale, site == 0 ? L.attn_norm : L.ffn_norm, n, d,
                             cfg_.hc_sinkhorn_iters, float(cfg_.hc_eps), eps, ws_.mhc_mix, ws_.mhc_mix_rows};
    };
    bool mixed = false;  // the previous site's expand already produced this site's mixing partials
    for (int l = 0; l < cfg_.n_layers; ++l) {
        for (int site = 0; site < 2; ++site) {
            const cuda::MhcArgs ma = site_args(l, site);
            if (!mixed) {
                mark("mhc_pre: mixing dots");
                DSV4_CU(cuda::mhc_pre_mix(ws_.X, T, ma, st));
            }
            mark("mhc_pre: sinkhorn+collapse+norm");
            DSV4_CU(cuda::mhc_pre_apply(ws_.X, T, ma, ws_.coeffs, ws_.xn, st));
            if (site == 0) DSV4_RETURN_IF_ERROR(attention(l, sp, T, max_t, splits));
            else DSV4_RETURN_IF_ERROR(moe(l, T));
            const bool last = l + 1 == cfg_.n_layers && site == 1;
            const cuda::MhcArgs next = last ? ma : site_args(site == 0 ? l : l + 1, 1 - site);
            mixed = !last && opt_.rt.fuse_mhc && cuda::mhc_post_mix_fusable(T, next);
            if (mixed) {
                mark("mhc_post (+ next mixing dots)");
                DSV4_CU(cuda::mhc_post_mix(ws_.X, ws_.y, ws_.coeffs, T, next, st));
            } else {
                mark("mhc_post");
                DSV4_CU(cuda::mhc_post(ws_.X, ws_.y, ws_.coeffs, T, n, d, st));
            }
        }
    }
    mark("head (mhc+norm+lm_head)");
    if (R > 0) DSV4_RETURN_IF_ERROR(lm_head(R));
    mark("end");
    return Status::ok();
}

Status CudaRunner::forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) {
    StepOutput out;
    out.logits = std::move(logits);
    Status s = execute(batch, false, out);
    logits = std::move(out.logits);
    return s;
}

Status CudaRunner::forward_sampled(const ForwardBatch& batch, StepOutput& out) {
    out.logits.clear();
    out.tokens.clear();
    out.logprobs.clear();
    out.top_logprobs.clear();
    return execute(batch, true, out);
}

Status CudaRunner::execute(const ForwardBatch& batch, bool honour_sample, StepOutput& out) {
    if (batch.seqs.empty()) return Status::ok();
    bool decode = opt_.rt.cuda_graphs;
    for (const auto& c : batch.seqs) decode = decode && c.tokens.size() == 1;
    HostPlan hp;
    DSV4_RETURN_IF_ERROR(plan(batch, decode, hp));
    DSV4_RETURN_IF_ERROR(upload_plan(hp));
    if (decode) {
        DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, decode_graph(hp.B));
        DSV4_CU(cudaGraphLaunch(ge, stream_));
    } else {
        DSV4_RETURN_IF_ERROR(run_step(hp.B, hp.T, hp.max_t, hp.R));
    }
    return fetch_outputs(batch, honour_sample, hp.R, out);
}

Status CudaRunner::sample_full(const std::vector<cuda::SampleRowArgs>& args,
                               const std::vector<cuda::SamplePenaltyToken>& toks, std::vector<cuda::SampleRowOut>& res) {
    const size_t V = size_t(cfg_.vocab_size);
    if (!sample_w_) {
        DSV4_ASSIGN_OR_RETURN(sample_w_, arena_.alloc_n<float>(size_t(opt_.max_seqs) * V));
        DSV4_ASSIGN_OR_RETURN(sample_out_, arena_.alloc_n<cuda::SampleRowOut>(size_t(opt_.max_seqs)));
    }
    DSV4_RETURN_IF_ERROR(sample_args_.reserve(args.size() * sizeof(cuda::SampleRowArgs)));
    DSV4_RETURN_IF_ERROR(sample_toks_.reserve(std::max<size_t>(1, toks.size()) * sizeof(cuda::SamplePenaltyToken)));
    DSV4_RETURN_IF_ERROR(sample_saved_.reserve(std::max<size_t>(1, toks.size()) * sizeof(float)));
    DSV4_CU(cudaMemcpyAsync(sample_args_.p, args.data(), args.size() * sizeof(cuda::SampleRowArgs),
                            cudaMemcpyHostToDevice, stream_));
    if (!toks.empty())
        DSV4_CU(cudaMemcpyAsync(sample_toks_.p, toks.data(), toks.size() * sizeof(cuda::SamplePenaltyToken),
                                cudaMemcpyHostToDevice, stream_));
    DSV4_CU(cuda::sample_rows(ws_.logits, int64_t(V), static_cast<const cuda::SampleRowArgs*>(sample_args_.p),
                              int(args.size()), static_cast<const cuda::SamplePenaltyToken*>(sample_toks_.p), sample_w_,
                              static_cast<float*>(sample_saved_.p), sample_out_, stream_));
    res.resize(args.size());
    DSV4_CU(cudaMemcpyAsync(res.data(), sample_out_, res.size() * sizeof(cuda::SampleRowOut), cudaMemcpyDeviceToHost,
                            stream_));
    return Status::ok();
}

Status CudaRunner::fetch_outputs(const ForwardBatch& batch, bool honour_sample, int R, StepOutput& out) {
    const size_t V = size_t(cfg_.vocab_size);
    std::vector<int> host_rows, dev_rows;  // indices into the R logits rows
    std::vector<DeviceSample> dev_mode;    // per dev_rows entry
    std::vector<cuda::SampleRowArgs> full;
    std::vector<cuda::SamplePenaltyToken> toks;
    bool any_greedy = false;
    for (const auto& c : batch.seqs) {
        if (!c.want_logits) continue;
        const int r = int(host_rows.size() + dev_rows.size());
        if (!honour_sample || c.sample == DeviceSample::kNone) {
            host_rows.push_back(r);
            continue;
        }
        if (c.sample != DeviceSample::kGreedy && c.sample != DeviceSample::kFull)
            return invalid_argument("sequence {}: device sample mode {} is not supported", c.seq_id, int(c.sample));
        dev_rows.push_back(r);
        dev_mode.push_back(c.sample);
        if (c.sample == DeviceSample::kGreedy) {
            any_greedy = true;
            continue;
        }
        const DeviceSampleParams& p = c.params;
        if (p.logprobs > kMaxDeviceTopLogprobs)
            return invalid_argument("sequence {}: {} top logprobs, the device sampler returns at most {}", c.seq_id,
                                    p.logprobs, kMaxDeviceTopLogprobs);
        cuda::SampleRowArgs a;
        a.row = r;
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
        a.position = p.position;
        a.tok_begin = int32_t(toks.size());
        a.n_tok = int32_t(p.penalty_tokens.size());
        for (const PenaltyToken& t : p.penalty_tokens)
            toks.push_back({t.token, t.output_count, uint8_t(t.seen), uint8_t(t.masked)});
        full.push_back(a);
    }
    std::vector<int32_t> ids;
    if (any_greedy) {
        if (!sampled_) {
            DSV4_ASSIGN_OR_RETURN(sampled_, arena_.alloc_n<int32_t>(size_t(opt_.max_seqs)));
        }
        DSV4_CU(cuda::argmax_rows(ws_.logits, R, int64_t(V), sampled_, stream_));
        ids.resize(size_t(R));
        DSV4_CU(cudaMemcpyAsync(ids.data(), sampled_, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    }
    // The argmax reads the raw rows before sample_rows touches them (same stream); sample_rows
    // restores what it modifies, so the host rows below are the model's logits either way.
    std::vector<cuda::SampleRowOut> res;
    if (!full.empty()) DSV4_RETURN_IF_ERROR(sample_full(full, toks, res));
    // Host rows: one copy when they are all the rows, else one per row.
    std::vector<float> host(host_rows.size() * V);
    if (int(host_rows.size()) == R && R > 0) {
        DSV4_CU(cudaMemcpyAsync(host.data(), ws_.logits, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    } else {
        for (size_t i = 0; i < host_rows.size(); ++i)
            DSV4_CU(cudaMemcpyAsync(host.data() + i * V, ws_.logits + size_t(host_rows[i]) * V, V * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream_));
    }
    DSV4_CU(cudaStreamSynchronize(stream_));
    for (size_t i = 0; i < host_rows.size(); ++i)
        out.logits.emplace_back(host.begin() + i * V, host.begin() + (i + 1) * V);
    size_t fi = 0;
    for (size_t k = 0; k < dev_rows.size(); ++k) {
        if (dev_mode[k] == DeviceSample::kGreedy) {
            out.tokens.push_back(ids[size_t(dev_rows[k])]);
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
    return Status::ok();
}

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

Result<cudaGraphExec_t> CudaRunner::decode_graph(int B) {
    auto it = graphs_.find(B);
    if (it != graphs_.end()) return it->second;
    DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture([&] { return run_step(B, B, 1, B); }));
    graphs_.emplace(B, ge);
    return ge;
}

Status CudaRunner::lm_head(int R) {
    const int n = cfg_.hc_mult, d = cfg_.hidden_size;
    const cuda::MhcArgs ha{w_.hc_head.fn, w_.hc_head.base, w_.hc_head.scale, w_.norm, n, d, 0, float(cfg_.hc_eps),
                           float(cfg_.rms_norm_eps), ws_.mhc_mix, ws_.mhc_mix_rows};
    DSV4_CU(cuda::mhc_head(ws_.X, ws_.logit_rows, R, ha, ws_.hn, stream_));
    DSV4_CU(cuda::linear(w_.head, -1, ws_.hn, d, 0, 0, ws_.logits, cfg_.vocab_size, R, false, stream_));
    return Status::ok();
}

// The non-layer work of a step (run_step without the layers): embedding, mHC head, LM head.
Status CudaRunner::run_head(int T, int R) {
    DSV4_CU(cuda::embed(w_.embed, ws_.tokens, T, cfg_.hc_mult, ws_.X, stream_));
    return lm_head(R);
}

Result<DecodeGraphTiming> CudaRunner::time_decode_graph(const ForwardBatch& batch, int warmup, int reps) {
    for (const auto& c : batch.seqs)
        if (c.tokens.size() != 1) return invalid_argument("time_decode_graph: sequence {} has {} tokens, not 1", c.seq_id, c.tokens.size());
    if (batch.seqs.empty() || reps <= 0) return invalid_argument("time_decode_graph: empty batch or no replays");
    HostPlan hp;
    DSV4_RETURN_IF_ERROR(plan(batch, true, hp));
    DSV4_RETURN_IF_ERROR(upload_plan(hp));
    DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t step, decode_graph(hp.B));
    auto hit = head_graphs_.find(hp.B);
    if (hit == head_graphs_.end()) {
        DSV4_ASSIGN_OR_RETURN(cudaGraphExec_t ge, capture([&] { return run_head(hp.T, hp.B); }));
        hit = head_graphs_.emplace(hp.B, ge).first;
    }
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    DSV4_CU(cudaEventCreate(&e0));
    DSV4_CU(cudaEventCreate(&e1));
    DecodeGraphTiming out;
    out.bucket = hp.B;
    auto time = [&](cudaGraphExec_t ge, std::vector<double>& into) -> Status {
        for (int i = 0; i < warmup; ++i) DSV4_CU(cudaGraphLaunch(ge, stream_));
        DSV4_CU(cudaStreamSynchronize(stream_));
        for (int r = 0; r < reps; ++r) {
            DSV4_CU(cudaEventRecord(e0, stream_));
            DSV4_CU(cudaGraphLaunch(ge, stream_));
            DSV4_CU(cudaEventRecord(e1, stream_));
            DSV4_CU(cudaEventSynchronize(e1));
            float ms = 0;
            DSV4_CU(cudaEventElapsedTime(&ms, e0, e1));
            into.push_back(1000.0 * ms);
        }
        return Status::ok();
    };
    Status s = time(step, out.step_us);
    if (s.is_ok()) s = time(hit->second, out.head_us);
    if (s.is_ok() && opt_.rt.op_profile) {
        // A second capture of the same step with event marks; 1 warm-up + 5 profiled replays.
        OpProfile prof;
        cudaGraphExec_t ge = nullptr;
        s = cuda_ok(prof.reserve(4096), "event pool");
        if (s.is_ok()) {
            prof_ = &prof;
            auto captured = capture([&] { return run_step(hp.B, hp.B, 1, hp.B); });
            prof_ = nullptr;
            if (captured.is_ok()) ge = *captured;
            else s = captured.status();
        }
        for (int r = 0; s.is_ok() && r < 6; ++r) {
            s = cuda_ok(cudaGraphLaunch(ge, stream_), "launch");
            if (s.is_ok()) s = cuda_ok(cudaStreamSynchronize(stream_), "sync");
            if (s.is_ok() && r > 0) s = cuda_ok(prof.accumulate(), "event times");
        }
        if (ge) cudaGraphExecDestroy(ge);
        if (s.is_ok()) std::fprintf(stderr, "[batch %d] %s", hp.B, prof.table(5).c_str());
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    DSV4_RETURN_IF_ERROR(s);
    return out;
}

}  // namespace

// The KV/state page layout of `cfg` in opt.rt.kv_rows rows; fills opt.n_pages (0: room for 64 sequences of
// 4096 tokens). Errors: a bad row format, a pool that cannot hold one sequence, page ids beyond int32.
static Result<KvLayout> runner_layout(const ModelConfig& cfg, CudaRunnerOptions& opt) {
    DSV4_ASSIGN_OR_RETURN(KvRowFormat rows, parse_kv_row_format(opt.rt.kv_rows));
    DSV4_ASSIGN_OR_RETURN(KvLayout layout, KvLayout::make(cfg, opt.page_tokens, 4, rows));
    if (opt.n_pages <= 0) opt.n_pages = 64 * layout.pages_for_tokens(4096);
    if (opt.n_pages < layout.n_state_pages + 1)
        return invalid_argument("page pool of {} pages cannot hold one sequence", opt.n_pages);
    if (opt.n_pages > INT32_MAX) return invalid_argument("page pool of {} pages: ids must fit int32", opt.n_pages);
    return layout;
}

bool cuda_device_available() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Result<std::unique_ptr<ModelRunner>> make_cuda_runner(std::shared_ptr<const RefModel> model,
                                                      const std::string& checkpoint_dir,
                                                      const CudaRunnerOptions& opt_in) {
    if (!cuda_device_available()) return error(StatusCode::kUnavailable, "no CUDA device");
    CudaRunnerOptions opt = opt_in;
    DSV4_ASSIGN_OR_RETURN(KvLayout layout, runner_layout(model->config(), opt));
    auto runner = std::make_unique<CudaRunner>(std::move(model), std::move(layout), opt);
    if (checkpoint_dir.empty()) {
        DSV4_RETURN_IF_ERROR(runner->init(nullptr));
    } else {
        DSV4_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(checkpoint_dir));
        DSV4_RETURN_IF_ERROR(runner->init(&ckpt));
    }
    return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace dsv4

namespace dsv4 {

Result<std::unique_ptr<CudaBenchRunner>> make_cuda_runner_synthetic(const ModelConfig& cfg,
                                                                     const SyntheticWeightsOptions& wopt,
                                                                     const CudaRunnerOptions& opt_in,
                                                                     ProxyWeightBytes* bytes) {
    if (!cuda_device_available()) return error(StatusCode::kUnavailable, "no CUDA device");
    DSV4_RETURN_IF_ERROR(cfg.validate());
    CudaRunnerOptions opt = opt_in;
    DSV4_ASSIGN_OR_RETURN(KvLayout layout, runner_layout(cfg, opt));
    // The RefModel only carries the config here: no host weights.
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights{});
    auto runner = std::make_unique<CudaRunner>(std::move(model), std::move(layout), opt);
    SyntheticWeightsOptions w = wopt;
    if (opt.ep_size > 1 && cfg.n_routed_experts % opt.ep_size == 0) {  // [ep2] this rank's experts only
        w.expert_count = cfg.n_routed_experts / opt.ep_size;
        w.expert_first = opt.ep_rank * w.expert_count;
    }
    DSV4_RETURN_IF_ERROR(runner->init(nullptr, [&](DeviceArena& arena) {
        return make_synthetic_weights(cfg, w, arena, bytes);
    }));
    return std::unique_ptr<CudaBenchRunner>(std::move(runner));
}

}  // namespace dsv4

namespace dsv4 {

Result<std::unique_ptr<ModelRunner>> make_cuda_runner(const ModelConfig& cfg, const std::string& checkpoint_dir,
                                                      const CudaRunnerOptions& opt_in) {
    if (!cuda_device_available()) return error(StatusCode::kUnavailable, "no CUDA device");
    DSV4_RETURN_IF_ERROR(cfg.validate());
    CudaRunnerOptions opt = opt_in;
    DSV4_ASSIGN_OR_RETURN(KvLayout layout, runner_layout(cfg, opt));
    int ex_first = 0, ex_count = 0;
    if (opt.ep_size > 1) {  // [ep2] read only this rank's experts
        DSV4_ASSIGN_OR_RETURN(auto part, dist::ExpertPartition::make(cfg.n_routed_experts, opt.ep_size));
        ex_first = part.first(opt.ep_rank);
        ex_count = part.n_local();
    }
    DSV4_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(checkpoint_dir));
    // Everything is validated before the first device allocation.
    DSV4_ASSIGN_OR_RETURN(LoadPlan plan, make_load_plan(cfg, ckpt, ex_first, ex_count));
    // The RefModel only carries the config here: no host weights.
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights{});
    auto runner = std::make_unique<CudaRunner>(std::move(model), std::move(layout), opt);
    CheckpointLoadOptions lo;
    lo.progress = opt.verbose && opt.ep_rank == 0;
    DSV4_RETURN_IF_ERROR(runner->init(nullptr, [&](DeviceArena& arena) {
        return load_checkpoint_weights(cfg, plan, arena, lo);
    }));
    return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace dsv4
