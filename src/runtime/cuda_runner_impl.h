// Private to the CUDA runner's sources (cuda_runner.cpp: setup, plan, step, graphs, outputs, factories;
// cuda_runner_layers.cpp: the attention and MoE blocks of one layer). Not a public interface: see
// cuda_runner.h. Host-only (CUDA runtime types, no device code).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "dist/expert_partition.h"
#include "kernels/cuda/attention/sparse_decode.h"
#include "kernels/cuda/attention/sparse_prefill.h"
#include "kernels/cuda/gemm/dense_gemv.h"
#include "kernels/cuda/common/kernel_params.h"
#include "kernels/cuda/moe/moe.h"
#include "kernels/cuda/ops/fast_path.h"
#include "kernels/cuda/ops/fault_inject.h"
#include "kernels/cuda/ops/indexer_filter.h"
#include "kernels/cuda/attention/attn_variants.h"
#include "kernels/cuda/ops/ops.h"
#include "kernels/cuda/ops/prefill_gemm.h"
#include "kernels/cuda/ops/sample_rows.h"
#include "kernels/cuda/ops/page_copy.h"
#include "kernels/cuda/ops/step_tokens.h"
#include "model/checkpoint.h"
#include "model/load_plan.h"
#include "model/spec_state.h"
#include "runtime/cuda_fast_table.h"
#include "runtime/cuda_bench_runner.h"
#include "runtime/op_profile.h"
#include "runtime/checkpoint_loader.h"
#include "runtime/cuda_status.h"
#include "runtime/cuda_weights.h"

namespace dsv4::cuda_runner_detail {

// A sticky error comes back as kDeviceLost (runtime/cuda_status.h), which the runner keeps (lost_).
inline Status cuda_ok(cudaError_t e, const char* what) { return cuda_error_status(e, what); }
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
    int64_t mhc_mix_rows = 0;   // max(16 T, 32 B): chunk partial rows (decode: 32 chunks per token, prefill: 16-64)
    int64_t max_rows = 0;
    // Filtered indexer scores of batched prefill (cuda::IndexerFilter): [Bq, max_rows] lower bounds,
    // then candidate lists; [Bq] counts. Null when option indexer_filter_min_rows is 0.
    float* idx_lo = nullptr;
    int32_t* idx_n_cand = nullptr;
    // Fast decode attention (sparse_decode): row lists, bf16 q / out, split partials.
    void *qb = nullptr, *ob = nullptr;
    // bf16 copies of the inputs of the large dense projections (round_to_bf16), from 32 tokens on:
    // o (wo_a), z (wo_b) and sh (shared w2), [max_seqs, width] each (each is read by one projection,
    // which rounds a longer step's input itself); q_lat (wq_b, indexer wq_b) and xn (the seven
    // projections of xn and the router), [max(max_seqs, max_step_tokens), width], so that a prefill step
    // rounds them once instead of once per projection. Null when off.
    void *xb_o = nullptr, *xb_z = nullptr, *xb_qlat = nullptr, *xb_xn = nullptr, *xb_sh = nullptr;
    int64_t xb_rows_wide = 0;  // rows of the last two (the first three have max_seqs)
    int64_t* row_offs = nullptr;
    int32_t* row_start = nullptr;
    float* sd_ws = nullptr;
    int64_t row_cap = 0;        // entries of row_offs
    int64_t sd_seq_splits = 0;  // batch x splits the split workspace holds
    // Batched prefill (attention_batched): one pseudo-sequence per token of the step, [max_step_tokens]
    // each (n_tok all 1), and the staging rows after the pool's pages (stage_word, in words).
    int32_t *pf_tok_begin = nullptr, *pf_n_tok = nullptr, *pf_seq = nullptr;
    int64_t *pf_start_pos = nullptr, *pf_stage_from = nullptr;
    int64_t stage_word = 0;
    // bf16 q and attention output of a whole batched step, [max_step_tokens, H, D] each: the two halves of
    // o's f32 storage, which a step on this route never writes (attention_batched, bf16_route).
    void *pf_qb = nullptr, *pf_ob = nullptr;
    float* comp_pooled = nullptr;  // [2][max_step_tokens][comp_pooled_ld]: compress_chunk's pooling scratch
    int comp_pooled_ld = 0;
};

// Host copy of a step plan (copied to the device through a StepSlot's pinned staging).
struct HostPlan {
    int B = 0, T = 0, max_t = 0, R = 0;
    std::vector<int32_t> tok_begin, n_tok, page_table, tokens, pos, logit_rows;
    std::vector<int64_t> start_pos;
    // kPendingToken chunk tokens: token index of this step <- sampled-id row of the step before.
    std::vector<int32_t> pend_dst, pend_src;
    // Batched prefill steps: per token, its sequence, its position and its chunk's first position.
    bool batched = false;
    int sd_rule = -1;  // CudaRunner::sparse_decode_rule_for this step
    // Logits rows the step computes: R when eager, the graph's rows when replayed (padded rows read
    // token 0). A verify chunk (SeqChunk::draft_tokens k > 0) runs k + 1 tokens with a row each.
    int R_pad = 0;
    // Speculative decoding (CudaRunnerOptions::spec_tokens > 0): per sequence [4][B]: mtp flag, draft
    // count, verify length (k + 1 for a verify chunk, else 0), live (1 when start_pos > 0: its state
    // header is valid); the cycle's work: any MTP sequence past its first chunk, any verify chunk.
    std::vector<int32_t> spec_seq;
    bool spec_live = false, spec_verify = false;
    int64_t end_pos = 0;  // the longest sequence's start_pos + n_tok (CudaRunner::run_step's end_pos)
    std::vector<int32_t> pf_seq;
    std::vector<int64_t> pf_pos, pf_stage_from;
    // Batched steps: per block of prefill_query_block tokens, the largest position + 1 (the indexer's
    // rows per query there: indexer_filter_min_rows is decided per block).
    std::vector<int64_t> pf_block_end;
};

// Page-locked host memory (cudaHostAlloc), grown on demand: what asynchronous copies need (a copy
// from pageable memory may wait for the stream, which would end the overlap with the running step).
struct PinnedBuf {
    void* p = nullptr;
    size_t cap = 0;
    PinnedBuf() = default;
    PinnedBuf(const PinnedBuf&) = delete;
    PinnedBuf& operator=(const PinnedBuf&) = delete;
    ~PinnedBuf() {
        if (p) cudaFreeHost(p);
    }
    Status reserve(size_t bytes) {
        if (bytes <= cap) return Status::ok();
        if (p) cudaFreeHost(p);
        p = nullptr;
        cap = 0;
        DSV4_CU(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
        cap = bytes;
        return Status::ok();
    }
};

// The host side of one launched step (ModelRunner::launch / collect; two alternate): pinned
// staging of its plan upload and of its outputs, its completion event, and what collect() needs
// to unpack the outputs in batch order.
struct StepSlot {
    PinnedBuf up;      // plan arrays, pending-token lists, sampling args and penalty tokens
    PinnedBuf ids;     // [R] int32: sampled ids (argmax rows and kFull tokens)
    PinnedBuf full;    // [n_full] cuda::SampleRowOut
    PinnedBuf logits;  // [host rows, V] f32
    // ready: the outputs are in pinned memory (collect waits for it); done: all of the step's work, the
    // MTP pass after its outputs included (the slot's pinned buffers are reused after it).
    cudaEvent_t ready = nullptr, done = nullptr;
    std::vector<int> host_rows, dev_rows;  // indices into the step's R logits rows
    std::vector<DeviceSample> dev_mode;    // per dev_rows entry
    int R = 0;
    size_t n_full = 0;
    PinnedBuf up2;                            // the MTP prefill pass's plan (speculative decoding)
    PinnedBuf drafts;                         // [B, spec_tokens] int32 drafts
    std::vector<std::pair<int, int>> verify;  // per verify chunk in batch order: (plan index, drafts)
};

// Where init() takes the weights from when not from the RefModel/checkpoint (synthetic weights).
using WeightSource = std::function<Result<DevWeights>(DeviceArena&)>;

class CudaRunner final : public CudaBenchRunner {
public:
    CudaRunner(std::shared_ptr<const RefModel> model, KvLayout layout, CudaRunnerOptions opt)
        : model_(std::move(model)), cfg_(model_->config()), layout_(std::move(layout)), opt_(std::move(opt)) {}
    ~CudaRunner() override {
        drop_graphs(true);
        for (cudaStream_t s : side_)
            if (s) cudaStreamDestroy(s);
        for (cudaEvent_t e : join_)
            if (e) cudaEventDestroy(e);
        if (fork_) cudaEventDestroy(fork_);
        if (stream_) cudaStreamSynchronize(stream_);  // launched steps still read slots_ and the pool
        for (auto& sl : slots_) {
            if (sl.done) cudaEventDestroy(sl.done);
            if (sl.ready) cudaEventDestroy(sl.ready);
        }
        cuda::lt_gemm_destroy(gemm_.handle);
        if (stream_) cudaStreamDestroy(stream_);
    }

    Status init(const Checkpoint* ckpt, WeightSource source = {});
    // Every step buffer (ws_, the MTP and speculative buffers, the sampling outputs) from one table, the
    // slots' pinned staging and events (cuda_runner_workspace.cpp). Called by init once the weights, the
    // attention path and the tuning rules are known. Errors name the buffer that did not fit.
    Status alloc_workspace();
    const ModelConfig& config() const override { return cfg_; }
    const KvLayout& kv_layout() const override { return layout_; }
    int64_t n_pages() const override { return opt_.n_pages; }
    int64_t max_positions() const override { return opt_.max_context; }
    Status forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) override;
    int max_draft_tokens() const override { return spec_tokens_; }
    bool supports_device_sample(DeviceSample m) const override {
        return m == DeviceSample::kNone || m == DeviceSample::kGreedy || m == DeviceSample::kFull;
    }
    Status forward_sampled(const ForwardBatch& batch, StepOutput& out) override;
    // Asynchronous: launch() queues the plan upload, the step, the sampling and the output copies
    // on the runner's stream and returns; collect() waits for the oldest step's event. After a
    // sticky CUDA error (kDeviceLost) both return that error at once, without calling CUDA again.
    Status launch(const ForwardBatch& batch) override { return launch_step(batch, true); }
    Status collect(StepOutput& out) override;
    bool launch_is_async() const override { return true; }

    // Bench hooks (cuda_bench_runner.h).
    CudaPoolInfo pool_info() const override { return {pool_.base, layout_.page_bytes, opt_.n_pages, opt_.rt.kv_rows}; }
    Result<DecodeGraphTiming> time_decode_graph(const ForwardBatch& batch, int warmup, int reps,
                                                bool op_profile) override;
    Status set_tuning_rules(const std::vector<TuningRule>& rules) override;
    Status set_test_delay_ns(int64_t ns) override;
    Result<std::string> profile_step(const ForwardBatch& batch) override;
    std::string variant_table() const override {
        return std::string("decode attention: ") +
               (fast_attn_ ? "sparse_decode (sm90 mma; option attn_variant / heuristic)\n"
                           : "attn_decode (CUDA cores)\n") +
               (fast_attn_ ? std::string() : cuda::attn_variant_table(*variant_)) +
               cuda_fast_kernel_table(w_, cfg_, opt_.rt.fast_kernels);
    }
    size_t device_bytes() const override { return arena_.bytes(); }
    GraphReplays graph_replays() const override { return replays_; }
    int64_t indexer_filter_blocks() const override { return filter_blocks_; }
    int64_t decode_q_bf16_layers() const override { return q_bf16_layers_; }
    Result<std::vector<double>> time_mtp_draft(const ForwardBatch& batch, int warmup, int reps) override;
    Status forward_with_mtp(const ForwardBatch& batch, std::span<const int32_t> next,
                            std::vector<std::vector<float>>& logits,
                            std::vector<std::vector<float>>& mtp_logits) override;
    Status collective_warm_up() override {
        // [ep2] One eager all-reduce of the largest MoE output before any capture (NCCL sets up its
        // connections outside graph capture); every rank calls it together.
        if (ep_count_ == 0) return Status::ok();
        DSV4_RETURN_IF_ERROR(
            opt_.ep_all_reduce->sum_f32(ws_.y, int64_t(opt_.max_step_tokens) * cfg_.hidden_size, stream_));
        return cuda_ok(cudaStreamSynchronize(stream_), "expert-parallel warm-up all-reduce");
    }

private:
    // Queues one step in the next StepSlot; honour_sample: device-sampled rows come back as ids
    // (kGreedy: cuda::argmax_rows; kFull: cuda::sample_rows), else every want_logits row as logits.
    // launch_step / collect guard queue_step / collect_step with lost_.
    Status launch_step(const ForwardBatch& batch, bool honour_sample);
    Status queue_step(const ForwardBatch& batch, bool honour_sample);
    Status collect_step(StepOutput& out);
    // Keeps the first kDeviceLost: the context is poisoned and every later call would fail anyway.
    Status remember_loss(Status s) {
        if (s.code() == StatusCode::kDeviceLost && lost_.is_ok()) lost_ = s;
        return s;
    }
    // Rows, sampling arguments and output copies of a launched step (ws_.logits rows, batch order).
    Status queue_outputs(const ForwardBatch& batch, bool honour_sample, const HostPlan& hp, StepSlot& slot,
                         std::vector<cuda::SampleRowArgs>& full, std::vector<cuda::SamplePenaltyToken>& toks);
    // Copies hp (and the kFull rows' arguments) through slot.up to the plan's device buffers.
    Status upload_plan_async(const HostPlan& hp, const std::vector<cuda::SampleRowArgs>& full,
                             const std::vector<cuda::SamplePenaltyToken>& toks, const std::vector<PageCopy>& copies,
                             StepSlot& slot);
    // The step's page copies (uploaded into copy_pairs_ by upload_plan_async), before its compute.
    Status run_page_copies(const std::vector<PageCopy>& copies);
    // The decode graph of bucket B under sparse_decode rule sd_rule (captured on first use; the plan
    // must be uploaded).
    Result<cudaGraphExec_t> decode_graph(int B, int sd_rule);
    // The graph of a verify-shaped step (graph_tokens_for: every sequence n tokens, 2 <= n) of bucket B,
    // captured on first use (the plan must be uploaded): run_step with B x n tokens and B logits rows.
    // all_rows: every token gets a logits row (B x n rows: a step with verify chunks), else one per sequence.
    Result<cudaGraphExec_t> verify_graph(int B, int n, bool all_rows);
    // Tokens per sequence of the graph a step replays: 1 (a decode step), n (every sequence runs the same
    // n tokens, 2 <= n <= StepGemmThresholds::kVerifyShapedMaxTokens, with verify_graphs, and the padded
    // bucket's tokens fit max_step_tokens) or 0 (launched eagerly).
    int graph_tokens_for(const ForwardBatch& batch) const;
    // The graph bucket of a decode-only step of B sequences, capped at max_seqs: the next power of two
    // up to 16 (or everywhere without fine_graph_buckets), else B rounded up to a multiple of 16 (to
    // 128), 32 (to 256) or 64. Why: padded rows cost nearly a real sequence's work from ~64 on, and
    // with powers of two a batch of 130 ran as 256.
    int decode_bucket(int B) const {
        int Bp = 1;
        if (!opt_.rt.fine_graph_buckets || B <= 16) {
            while (Bp < B) Bp *= 2;
        } else {
            const int step = B <= 128 ? 16 : B <= 256 ? 32 : 64;
            Bp = (B + step - 1) / step * step;
        }
        return std::min(Bp, opt_.max_seqs);
    }
    // Every bucket plan() can produce (decode_bucket's values up to max_seqs) under the heuristics and under
    // each sparse_decode rule whose batch range meets the bucket's; returns the graphs captured.
    Result<int> capture_decode_graphs();
    // Bench timing: `warmup` replays of ge, then `reps` replays one by one, each one's microseconds
    // (CUDA events) appended to us.
    Status time_replays(cudaGraphExec_t ge, int warmup, int reps, std::vector<double>& us);
    // Bench op profile: captures `body` with event marks into prof, replays it once, then 5 times
    // accumulated (prof.table(5) / per_step_us(5) read them).
    // pdl_tokens: as capture's.
    Status profile_capture(const std::function<Status()>& body, int pdl_tokens, OpProfile& prof);
    // Captures what `body` launches on stream_ and instantiates it (the caller owns the result).
    // pdl_tokens: the graph's tokens per step, which RuntimeOptions::graph_pdl_max_batch compares (no
    // default: every caller says, so that timed, profiled and served graphs of a shape agree).
    Result<cudaGraphExec_t> capture(const std::function<Status()>& body, int pdl_tokens);
    Status run_head(int T, int R);
    // mHC head + final norm + LM head for the R rows of ws_.logit_rows into ws_.logits; the main model's
    // hc_head and norm, or an MTP block's.
    Status lm_head(int R, const DevMhc& hc_head, const float* norm);
    Status lm_head(int R) { return lm_head(R, w_.hc_head, w_.norm); }
    // graph_tokens: 0 for an eager step, else the graph's tokens per sequence (graph_tokens_for): the
    // batch is padded to its decode bucket with sequences of that many dummy tokens (n_tok 0).
    Status plan(const ForwardBatch& batch, int graph_tokens, HostPlan& hp) const;
    Status upload_plan(const HostPlan& hp);
    // end_pos: the step's largest start_pos + n_tok (kAnyEndPos for graphs, replayed at any position);
    // below index_topk x ratio + ratio no CSA sequence has more rows than the indexer selects, so its
    // queries and scores are skipped (ref::index_selects_all).
    static constexpr int64_t kAnyEndPos = INT64_MAX;
    // block_end: HostPlan::pf_block_end of a batched step (null: end_pos for every block).
    Status run_step(int B, int T, int max_t, int R, int64_t end_pos, const std::vector<int64_t>* block_end = nullptr);
    // Resolves opt_.rt's variant names against the registries (an unknown name is an error), stamps the
    // kernel choices into every weight descriptor and repacks the experts' codes (moe_layout).
    Status apply_kernel_choices();
    // The tuning file's rules (RuntimeOptions::tuning_rules) resolved to registry indices and checked
    // legal for every shape of this model they cover (cuda_runner_tuning.cpp). Errors name the file
    // and the rule: an unknown variant, one illegal for a shape, more than 63 sparse_decode rules.
    Status apply_tuning_rules();
    // A decode step's sparse_decode rule (index into sd_rules_, -1: none): tokens = the step's
    // sequences (unpadded), context = the longest sequence's tokens before the decoded one.
    int sparse_decode_rule_for(int batch, int64_t context) const;
    // cuBLAS handle and scratch of the large-token dense linears (option prefill_gemm_min_tokens).
    Status setup_prefill_gemm();
    // opt_.n_pages from the memory left (CudaRunnerOptions::gpu_memory_utilization); stage_bytes: the
    // batched-prefill staging rows allocated with the pool. Errors: ResourceExhausted when not even
    // one sequence fits.
    Status size_pool_from_memory(size_t stage_bytes);
    // Steps whose dense linears go through cuBLAS share its scratch: they run without side streams.
    bool gemm_step(int T) const { return gemm_.handle && gemm_.min_tokens > 0 && T >= gemm_.min_tokens; }
    // The GEMM thresholds of the step run_step is running (step_gemm_thresholds).
    void set_gemm_thresholds(int max_t);
    int moe_gemm_min_tokens_ = 0;    // set_gemm_thresholds: MoeArgs::grouped_min_tokens of this step
    bool decode_only_step_ = false;  // set_gemm_thresholds: MoeArgs::decode_step of this step
    // Block l: decoder layer l < n_layers, else MTP block l - n_layers (spec §2.11: compress ratio 0,
    // learned routing); attention() and moe() run either.
    const DevLayer& block_w(int l) const {
        return l < cfg_.n_layers ? w_.layers[size_t(l)] : w_.mtp[size_t(l - cfg_.n_layers)].block;
    }
    int block_ratio(int l) const { return l < cfg_.n_layers ? cfg_.compress_ratio(l) : 0; }
    AttnType block_type(int l) const { return l < cfg_.n_layers ? cfg_.layer_types[size_t(l)] : AttnType::kSliding; }
    MoeRouting block_routing(int l) const {
        return l < cfg_.n_layers ? cfg_.mlp_types[size_t(l)] : MoeRouting::kLearned;
    }
    // The mHC arguments of block l's site (0: before attention, 1: before the MoE).
    cuda::MhcArgs site_args(int l, int site) const;
    // Every decoder and MTP block's weights (kernel stamps, repacks, tuning checks).
    std::vector<DevLayer*> all_blocks() {
        std::vector<DevLayer*> v;
        for (DevLayer& L : w_.layers) v.push_back(&L);
        for (DevMtp& M : w_.mtp) v.push_back(&M.block);
        return v;
    }
    std::vector<const DevLayer*> all_blocks() const {
        std::vector<const DevLayer*> v;
        for (const DevLayer& L : w_.layers) v.push_back(&L);
        for (const DevMtp& M : w_.mtp) v.push_back(&M.block);
        return v;
    }
    // MTP block m over the step planned in the workspace (T tokens of B sequences, at most max_t each;
    // cuda_runner_mtp.cpp): X = e_proj enorm(E[next]) + h_proj hnorm(streams) per position (spec §2.11),
    // then block n_layers + m (its window ring at the tokens' positions), then its hc_head, norm and the
    // shared head for the R rows of ws_.logit_rows into ws_.logits. streams: [T, hc_mult, d] device, the
    // main model's final streams of the step's positions, normed in place (not ws_.X, which this overwrites with the
    // block's output streams); next: [T] device ids, the token after each position.
    Status mtp_block(int m, int B, int T, int max_t, int R, float* streams, const int32_t* next);
    // Speculative decoding's cycle (cuda_runner_spec.cpp; RefRunner::speculative_chunk on the device),
    // around the step's forward of the uploaded plan hp:
    // - spec_before: the rejected positions of each sequence's last verify chunk undone, the MTP block's
    //   catch-up over its pending positions, the recursive drafts (MTP ring rows put back), the drafts
    //   written into the verify chunks' tokens, the verify chunks' backup;
    // - spec_after: the pending inputs into each speculating sequence's state, then the MTP pass over
    //   the positions before the last of its other chunks (prefill), whose plan goes through slot.up2
    //   into the second plan arrays. Call after the step's outputs are queued (it rewrites ws_.tokens).
    Status spec_before(const HostPlan& hp);
    // spec_before, replayed as a graph when `graphed` (the step replays one: hp.B is a bucket) and
    // RuntimeOptions::spec_graphs; its host decisions (hp.B, the largest draft count, whether any
    // sequence is live, hp.spec_live, hp.spec_verify) key the graph.
    Status launch_spec_before(const HostPlan& hp, bool graphed);
    Status spec_after(const ForwardBatch& batch, const HostPlan& hp, StepSlot& slot);
    cuda::SpecCycleArgs spec_cycle_args(int B) const;  // B: the step plan's sequences (spec_seq_ is [4, B])
    // The plan arrays the MTP passes use while they run (swap_plan swaps them with ws_'s; with_table: the page
    // table too, else the step's stays). Same capacities as ws_'s.
    struct PlanBufs {
        int32_t *tok_begin = nullptr, *n_tok = nullptr, *page_table = nullptr, *tokens = nullptr, *pos = nullptr;
        int32_t *logit_rows = nullptr, *pf_seq = nullptr;
        int64_t *start_pos = nullptr, *pf_start_pos = nullptr, *pf_stage_from = nullptr;
    };
    void swap_plan(bool with_table) {
        std::swap(ws_.tok_begin, aux_.tok_begin);
        std::swap(ws_.n_tok, aux_.n_tok);
        if (with_table) std::swap(ws_.page_table, aux_.page_table);
        std::swap(ws_.tokens, aux_.tokens);
        std::swap(ws_.pos, aux_.pos);
        std::swap(ws_.logit_rows, aux_.logit_rows);
        std::swap(ws_.pf_seq, aux_.pf_seq);
        std::swap(ws_.start_pos, aux_.start_pos);
        std::swap(ws_.pf_start_pos, aux_.pf_start_pos);
        std::swap(ws_.pf_stage_from, aux_.pf_stage_from);
    }
    // Swaps the passes' plan arrays in for the guard's lifetime.
    struct PlanSwap {
        CudaRunner& r;
        bool with_table;
        PlanSwap(CudaRunner& runner, bool table) : r(runner), with_table(table) { r.swap_plan(with_table); }
        ~PlanSwap() { r.swap_plan(with_table); }
    };
    // ws_'s plan arrays as a PlanBufs (the destination of the step's own plan).
    PlanBufs step_plan_bufs() const {
        return {ws_.tok_begin,  ws_.n_tok,  ws_.page_table, ws_.tokens,       ws_.pos,
                ws_.logit_rows, ws_.pf_seq, ws_.start_pos,  ws_.pf_start_pos, ws_.pf_stage_from};
    }
    // One host array to copy to the device.
    struct HostPiece {
        void* dst;
        const void* src;
        size_t bytes;
    };
    // The plan arrays of hp into dst's buffers (pf arrays only for a batched plan); rows: hp's logits rows
    // padded to what the step computes (plan_rows), which must outlive the pieces.
    static std::vector<HostPiece> plan_pieces(const HostPlan& hp, const PlanBufs& dst,
                                              const std::vector<int32_t>& rows);
    static std::vector<int32_t> plan_rows(const HostPlan& hp) {
        std::vector<int32_t> rows = hp.logit_rows;
        rows.resize(size_t(std::max(hp.R_pad, hp.B)), 0);  // padded rows read token 0
        return rows;
    }
    // Packs the pieces into buf (pinned; grown when needed: the caller knows nothing in flight reads it)
    // at 16-byte offsets and queues their copies on stream_, so nothing waits for the stream.
    Status stage_pieces(PinnedBuf& buf, const std::vector<HostPiece>& pieces);
    PlanBufs aux_;
    int spec_tokens_ = 0;           // KvLayout::spec_tokens (0: no speculative decoding)
    int rows_cap_ = 0;              // logits rows a step may compute: max_seqs x (1 + spec_tokens)
    int32_t* spec_seq_ = nullptr;   // [4, max_seqs] HostPlan::spec_seq of the step
    int32_t* drafts_ = nullptr;     // [max_seqs, spec_tokens]
    int32_t* draft_ids_ = nullptr;  // [max_seqs] argmax of a pass
    // [rows_cap_, kArgmaxParts] the split argmax's partial keys (option split_argmax; null: off).
    unsigned long long* argmax_ws_ = nullptr;
    cudaError_t greedy_pick(int R, int32_t* out) {
        return cuda::argmax_rows(ws_.logits, R, int64_t(cfg_.vocab_size), out, stream_, argmax_ws_);
    }
    int32_t* gather_idx_ = nullptr;  // [max_step_tokens] the prefill MTP pass's source rows
    uint32_t* ring_scratch_ = nullptr;
    SpecRegion* spec_regions_ = nullptr;  // device copy of spec_regions(layout_)
    int n_spec_regions_ = 0;
    // Block l's kernel arguments that are the same at every step (its weights, its state offsets in
    // a sequence's pages, the workspace and pool pointers), built once at init (build_layer_args,
    // cuda_runner_layer_args.cpp); attention() and moe() copy them and set the step's fields.
    struct LayerArgs {
        cuda::KvStepArgs kv;
        cuda::IndexerArgs idx;
        cuda::AttnArgs attn;
        cuda::RowListArgs rows;     // fast attention only
        cuda::SparseDecodeArgs sd;  // fast attention only; batch, variant and target_ctas per step
        cuda::MoeArgs moe;          // T, grouped_min_tokens, rules and decode_step per step (moe_args)
    };
    std::vector<LayerArgs> layer_args_;  // [n_layers + MTP blocks]
    void build_layer_args();
    Status attention(int l, const cuda::StepPlan& sp, int T, int max_t, int splits);
    // The state and attention part of attention() for a batched prefill step (cuda_runner_prefill.cpp):
    // staging, chunk compressors, the indexer and sparse_decode over pseudo-sequences of
    // prefill_query_block tokens, ring write-back. ka/ia/ra/sa as attention() fills them.
    Status attention_batched(const cuda::StepPlan& sp, int T, int max_t, bool csa, cuda::KvStepArgs& ka,
                             cuda::IndexerArgs& ia, cuda::RowListArgs& ra, cuda::SparseDecodeArgs& sa,
                             const float* rope, bool bf16_route);
    // Batched prefill is built (fast attention, packed rows, option on) and used for steps with max_t > 1.
    bool batched_step(int max_t) const { return batched_ && max_t > 1 && !token_loop_; }
    bool token_loop_ = false;  // the MTP catch-up pass: its device-written plan has no batched-prefill arrays
    // A batched step whose wo_a reads its input in bf16 only (the prefill GEMM): q is normed, roped
    // and rounded once into pf_qb, attention writes pf_ob, whose rope dims are inverse-rotated in
    // place, and wo_a reads it; no f32 q rows or o are staged (same bits as the f32 route).
    bool bf16_route(int l, int T, int max_t) const;
    Status moe(int l, int T);
    // Layer l's routed-expert arguments for a T-token step (workspace pointers, weights, kernel choices):
    // LayerArgs::moe with the step's fields.
    cuda::MoeArgs moe_args(int l, int T) const;
    // The step-independent part (the workspace pointers are null before alloc_workspace: the tuning
    // file's checks read shapes and weights only).
    cuda::MoeArgs moe_block_args(int l) const;
    // `a` with the step's fields: T, the grouped-GEMM threshold, the tuning rules, the decode flag.
    cuda::MoeArgs moe_step_args(cuda::MoeArgs a, int T) const;
    // Destroys the captured decode graphs (and the head graphs when `head`); they are recaptured on use.
    void drop_graphs(bool head) {
        for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g);
        graphs_.clear();
        for (auto& [key, g] : verify_graphs_) cudaGraphExecDestroy(g);
        verify_graphs_.clear();
        for (auto& [key, g] : spec_graphs_) cudaGraphExecDestroy(g);
        spec_graphs_.clear();
        if (!head) return;
        for (auto& [key, g] : head_graphs_) cudaGraphExecDestroy(g);
        head_graphs_.clear();
    }
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
    // *out = x [T, width] rounded to bf16 in buf ([rows, width], on stream s) when the bf16-input
    // path is on for T tokens and T <= rows, else null (the projections then round f32 x themselves).
    Status bf16_input(const float* x, int64_t width, int T, void* buf, int64_t rows, cudaStream_t s, const void** out) {
        *out = nullptr;
        if (!buf || opt_.rt.x_bf16_min_tokens <= 0 || T < opt_.rt.x_bf16_min_tokens || T > rows) return Status::ok();
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
    int sd_variant_ = -1;                         // forced sparse_decode variant, -1 = heuristic
    int moe_variant_ = -1;                        // forced MXFP4 expert variant, -1 = heuristic
    int moe_gemm_variant_ = -1;                   // forced grouped expert GEMM variant, -1 = first legal
    // Tuning-file rules, resolved (apply_tuning_rules); the ops' arguments point at the vectors.
    struct SparseDecodeRule {
        ShapeRange tokens, context;
        int variant = -1;     // -1: the forced variant / heuristic
        int target_ctas = 0;  // 0: RuntimeOptions::split_kv_target_ctas
    };
    std::vector<SparseDecodeRule> sd_rules_;
    std::vector<cuda::ShapeVariant> gemv_rules_, moe_rules_, grouped_rules_;
    int sd_rule_ = -1;                   // the running step's sparse_decode rule (graphs are captured per rule)
    int64_t step_end_pos_ = kAnyEndPos;  // run_step's end_pos while it runs
    const std::vector<int64_t>* pf_block_end_ = nullptr;  // run_step's block_end while it runs
    int64_t filter_blocks_ = 0;                           // indexer_filter_blocks()
    int64_t q_bf16_layers_ = 0;                           // decode_q_bf16_layers()
    int64_t test_delay_ns_ = 0;                           // set_test_delay_ns: a spin at the start of every step
    bool fast_attn_ = false;
    bool batched_ = false;    // batched prefill available (batched_step)
    cuda::PrefillGemm gemm_;  // handle null: off
    int pf_block_ = 1;        // query tokens per batched attention launch
    int n_sms_ = 1;
    int pt_stride_ = 0;
    int n_gate_ranges_ = 0;
    std::map<int, cudaGraphExec_t> graphs_;
    std::map<int, cudaGraphExec_t> verify_graphs_;    // verify_graph: key B * 8 + n
    std::map<int64_t, cudaGraphExec_t> spec_graphs_;  // launch_spec_before: per bucket and cycle shape
    GraphReplays replays_;                            // queue_step's graph launches
    float* mtp_in_ = nullptr;      // [max_step_tokens, hc_mult, d] the MTP block's input streams (with an MTP block)
    int32_t* mtp_next_ = nullptr;  // [max_step_tokens] the token after each position
    // [max_seqs] ids of the last step's device-sampled rows, by logits row: argmax_rows writes them,
    // kFull tokens are scattered in; the next step's pending tokens are read from here.
    int32_t* sampled_ = nullptr;
    int32_t *pend_dst_ = nullptr, *pend_src_ = nullptr;  // [max_step_tokens] pending-token lists on the device
    // kFull rows (cuda::sample_rows): weights [max_seqs, V] f32 (allocated on first use), per-row
    // results [max_seqs]; args and penalty tokens grow with the step's needs.
    float* sample_w_ = nullptr;
    cuda::SampleRowOut* sample_out_ = nullptr;
    StepSlot slots_[2];
    int next_slot_ = 0;
    std::deque<int> inflight_;                        // launched, not collected (oldest first)
    std::unordered_map<int64_t, int32_t> prev_rows_;  // seq_id -> sampled_ row of the last launched step
    struct GrowBuf {
        void* p = nullptr;
        size_t cap = 0;
        ~GrowBuf() {
            if (p) cudaFree(p);
        }
        Status reserve(size_t bytes) {
            if (bytes <= cap) return Status::ok();
            if (p) cudaFree(p);
            p = nullptr;
            cap = 0;
            DSV4_ASSIGN_OR_RETURN(p, cuda_malloc(bytes, "a step's sampling / page-copy arguments"));
            cap = bytes;
            return Status::ok();
        }
    };
    GrowBuf sample_args_, sample_toks_, sample_saved_;
    GrowBuf copy_pairs_;                          // the step's PageCopy pairs
    std::map<int, cudaGraphExec_t> head_graphs_;  // bench: non-layer work alone, per bucket
    OpProfile* prof_ = nullptr;                   // bench: op marks while capturing a profiled step
    Status lost_;                                 // the first sticky CUDA error (kDeviceLost); ok while healthy
    int64_t steps_launched_ = 0;                  // steps with a sequence so far (RuntimeOptions::fault_inject_step)
    int ep_first_ = 0, ep_count_ = 0;             // [ep2] local routed experts (count 0: all, no EP)
    std::optional<dist::ExpertPartition> ep_;     // [ep2] set when ep_size > 1
    void mark(const char* label) {
        if (prof_) prof_->mark(label, stream_);
    }
};

}  // namespace dsv4::cuda_runner_detail
