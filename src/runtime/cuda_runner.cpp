// CudaRunner (see cuda_runner.h): init, plan, eager step (graphs: cuda_runner_graphs.cpp).
#include "runtime/cuda_runner.h"
#include "runtime/cuda_runner_impl.h"

#include <chrono>

namespace dsv4 {

namespace cuda_runner_detail {

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
    {
        auto w = source ? source(arena_) : upload_weights(*model_, ckpt, arena_, ep_first_, ep_count_, opt_.mtp_blocks);
        if (!w.is_ok()) return w.status().with_context("the weights");
        w_ = std::move(w).value();
        if (int(w_.mtp.size()) != opt_.mtp_blocks)  // a source that ignored CudaRunnerOptions::mtp_blocks
            return error(StatusCode::kUnimplemented, "{} MTP block(s) asked; this weight source provides {}",
                         opt_.mtp_blocks, w_.mtp.size());
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
    // Batched prefill stages the step's window rows right after the pages (row offsets are pool words).
    batched_ = fast_attn_ && opt_.rt.batched_prefill && rows != KvRowFormat::kF32;
    pf_block_ = std::max(1, opt_.rt.prefill_query_block);
    pt_stride_ = int(layout_.pages_for_tokens(opt_.max_context));
    // The tuning file's rules: after the weights are stamped and repacked (the checks need each
    // weight's fast flag and code layout) and the attention path is known; before the workspaces
    // (the split-KV workspace is sized for the largest target a rule names).
    DSV4_RETURN_IF_ERROR(apply_tuning_rules());

    DSV4_RETURN_IF_ERROR(alloc_workspace());

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

    // The page pool last, so that a pool sized from memory sees everything else allocated.
    const size_t stage_words = batched_ ? size_t(opt_.max_step_tokens) * size_t(layout_.row_words_main) : 0;
    if (opt_.n_pages <= 0) DSV4_RETURN_IF_ERROR(size_pool_from_memory(stage_words * sizeof(float)));
    const size_t page_words = size_t(opt_.n_pages) * size_t(layout_.page_elems);
    {
        // The pool is allocated once, here: nothing grows it later, so this is the one place its
        // size can fail (an --n-pages larger than the memory left says so, with the bytes).
        auto pool = arena_.alloc_n<float>(page_words + stage_words);
        if (!pool.is_ok())
            return pool.status().with_context(fmt::format(
                "the KV/state page pool ({} pages of {} bytes{}; lower --n-pages, or 0 to size it from memory)",
                opt_.n_pages, layout_.page_bytes,
                stage_words ? fmt::format(" + {} bytes of prefill staging", stage_words * sizeof(float))
                            : std::string()));
        pool_.base = *pool;
    }
    ws_.stage_word = int64_t(page_words);
    build_layer_args();
    DSV4_CU(cudaDeviceSynchronize());
    // Capturing records the launches without running them, and a decode graph depends only on its
    // bucket and rule (the plan's buffers are filled before each replay), so this is what the first
    // steps of each size would have captured.
    if (opt_.rt.cuda_graphs && opt_.rt.capture_graphs_at_start) {
        const auto t0 = std::chrono::steady_clock::now();
        auto n = capture_decode_graphs();
        if (!n.is_ok()) return n.status().with_context("capturing the decode graphs at start-up");
        if (opt_.verbose)
            std::fprintf(stderr, "dsv4 cuda: %d decode graphs captured at start-up in %.2f s\n", *n,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
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

Status CudaRunner::size_pool_from_memory(size_t stage_bytes) {
    size_t free_b = 0, total_b = 0;
    DSV4_CU(cudaMemGetInfo(&free_b, &total_b));
    const double util = opt_.gpu_memory_utilization;
    if (!(util > 0.0 && util <= 1.0))
        return invalid_argument("gpu_memory_utilization {} is not in (0, 1] (and n_pages is 0)", util);
    // Still to come outside the pool: the kFull sampler's weights (allocated on first use), graphs.
    const double reserve = double(opt_.max_seqs) * double(cfg_.vocab_size) * 4.0 + double(size_t(2) << 30);
    const double used = double(total_b - free_b);
    const double room = util * double(total_b) - used - reserve - double(stage_bytes);
    const int64_t need = layout_.n_state_pages + 1;
    const int64_t pages = room > 0 ? int64_t(room / double(layout_.page_bytes)) : 0;
    if (pages < need)
        return error(StatusCode::kResourceExhausted,
                     "no room for the KV/state page pool: {:.1f} GiB of {:.1f} GiB in use after the weights and "
                     "workspaces, {:.0f}% allowed (gpu_memory_utilization), {:.1f} GiB reserved; one sequence needs "
                     "{} pages of {} B (use more GPUs, see `dsv4 plan`, or a higher utilization)",
                     used / 1073741824.0, double(total_b) / 1073741824.0, util * 100.0, reserve / 1073741824.0, need,
                     layout_.page_bytes);
    // More than max_seqs sequences at max_context never hold pages at once (preempted ones hold none).
    opt_.n_pages = std::min<int64_t>({pages, int64_t(opt_.max_seqs) * pt_stride_, INT32_MAX});
    if (opt_.verbose)
        std::fprintf(stderr,
                     "dsv4 cuda: page pool sized from memory: %lld pages of %lld B (%.1f GiB; %.0f%% of %.1f GiB)\n",
                     (long long)opt_.n_pages, (long long)layout_.page_bytes,
                     double(opt_.n_pages) * double(layout_.page_bytes) / 1073741824.0, util * 100.0,
                     double(total_b) / 1073741824.0);
    return Status::ok();
}

Status CudaRunner::setup_prefill_gemm() {
    const RuntimeOptions& rt = opt_.rt;
    auto usable = [&](int min_tokens) { return min_tokens > 0 && opt_.max_step_tokens >= min_tokens; };
    if (!rt.fast_kernels || (!usable(rt.prefill_gemm_min_tokens) && !usable(rt.decode_gemm_min_tokens)))
        return Status::ok();
    // Scratch: the largest FP8 dense weight as bf16, and a slice of the widest x rows.
    int64_t w_elems = 0, x_cols = 0;
    for (const DevLayer* Lp : all_blocks())
        for (const DevLayer& L = *Lp;
             const cuda::WeightDesc* w :
             {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.comp.wkv, &L.comp.wgate, &L.idx_comp.wkv,
              &L.idx_comp.wgate, &L.idx_wq_b, &L.idx_wproj, &L.gate, &L.sh_w1, &L.sh_w3, &L.sh_w2}) {
            if (w->fmt == cuda::WFmt::kFp8E8M0) w_elems = std::max(w_elems, int64_t(w->N) * w->K);
            x_cols = std::max<int64_t>(x_cols, w->K);
        }
    x_cols = std::max<int64_t>(x_cols, int64_t(cfg_.n_heads) * cfg_.head_dim);  // wo_a reads all heads' rows
    gemm_.x_rows = std::min<int64_t>(opt_.max_step_tokens, 2048);
    gemm_.x_cols = x_cols;
    gemm_.w_scratch_elems = w_elems;
    gemm_.min_tokens = rt.prefill_gemm_min_tokens;
    DSV4_ASSIGN_OR_RETURN(gemm_.x_scratch, arena_.alloc(size_t(gemm_.x_rows * x_cols) * 2));
    if (w_elems > 0) {
        DSV4_ASSIGN_OR_RETURN(gemm_.w_scratch, arena_.alloc(size_t(w_elems) * 2));
    }
    constexpr size_t kCublasWorkspace = size_t(32) << 20;
    DSV4_ASSIGN_OR_RETURN(void* cw, arena_.alloc(kCublasWorkspace));
    gemm_.handle = cuda::lt_gemm_create(cw, kCublasWorkspace);
    if (!gemm_.handle) return error(StatusCode::kInternal, "cuBLASLt: cublasLtCreate failed (prefill GEMMs)");
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
            for (int i = 0; i < cuda::sparse_decode_variant_count(); ++i)
                known += ", " + cuda::sparse_decode_variant_name(i);
            return invalid_argument("option attn_variant: unknown variant '{}' (known: {})", rt.attn_variant, known);
        }
    }
    int gemv = -1;
    if (!rt.gemv_variant.empty()) {
        gemv = cuda::variant_by_name(rt.gemv_variant, cuda::dense_gemv_variant_count(),
                                     [](int i) { return cuda::dense_gemv_variant_name(i); });
        if (gemv < 0)
            return invalid_argument("option gemv_variant: unknown variant '{}' (dsv4 decode-bench lists them)",
                                    rt.gemv_variant);
    }
    if (!rt.moe_variant.empty()) {
        moe_variant_ = cuda::variant_by_name(rt.moe_variant, cuda::moe_expert_variant_count(),
                                             [](int i) { return cuda::moe_expert_variant_name(i); });
        if (moe_variant_ < 0)
            return invalid_argument("option moe_variant: unknown variant '{}' (dsv4 decode-bench lists them)",
                                    rt.moe_variant);
    }
    if (!rt.moe_gemm_variant.empty()) {
        moe_gemm_variant_ = cuda::variant_by_name(rt.moe_gemm_variant, cuda::moe_grouped_variant_count(),
                                                  [](int i) { return cuda::moe_grouped_variant_name(i); });
        if (moe_gemm_variant_ < 0)
            return invalid_argument("option moe_gemm_variant: unknown variant '{}' (dsv4 decode-bench lists them)",
                                    rt.moe_gemm_variant);
    }
    DSV4_RETURN_IF_ERROR(setup_prefill_gemm());
    auto stamp = [&](cuda::WeightDesc& w) {
        w.fast = rt.fast_kernels;
        w.gemv_variant = gemv;
        w.gemv_rules = &gemv_rules_;  // empty: no rule (set_tuning_rules may fill it later)
        w.gemm = gemm_.handle ? &gemm_ : nullptr;
    };
    stamp(w_.embed);
    stamp(w_.head);
    const bool repack = rt.fast_kernels && rt.moe_layout == "pair-rotated";
    const int n_local = ep_count_ > 0 ? ep_count_ : cfg_.n_routed_experts;
    for (DevMtp& M : w_.mtp) {
        stamp(M.e_proj);
        stamp(M.h_proj);
    }
    for (DevLayer* Lp : all_blocks()) {
        DevLayer& L = *Lp;
        for (cuda::WeightDesc* w : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.comp.wkv, &L.comp.wgate,
                                    &L.idx_comp.wkv, &L.idx_comp.wgate, &L.idx_wq_b, &L.idx_wproj, &L.gate, &L.sh_w1,
                                    &L.sh_w3, &L.sh_w2, &L.ex_w1, &L.ex_w3, &L.ex_w2})
            stamp(*w);
        // The fast expert GEMV's code layout where it applies (fast_path.h); "checkpoint" keeps the file's.
        DSV4_CU(cuda::moe_expert_weights_to_fast_layout(&L.ex_w1, &L.ex_w3, &L.ex_w2, n_local, repack, stream_));
    }
    return cuda_ok(cudaStreamSynchronize(stream_), "expert weight repack");
}

Status CudaRunner::plan(const ForwardBatch& batch, int graph_tokens, HostPlan& hp) const {
    const int B = int(batch.seqs.size());
    if (B > opt_.max_seqs)
        return invalid_argument("{} sequences in one step, the CUDA runner takes {}", B, opt_.max_seqs);
    const int Bp = graph_tokens > 0 ? decode_bucket(B) : B;
    hp = HostPlan{};
    hp.B = Bp;
    hp.tok_begin.assign(Bp, 0);
    hp.n_tok.assign(Bp, 0);
    hp.start_pos.assign(Bp, 0);
    hp.page_table.assign(size_t(Bp) * pt_stride_, 0);
    if (spec_tokens_ > 0) hp.spec_seq.assign(size_t(4) * size_t(Bp), 0);
    for (int s = 0; s < B; ++s) {
        const SeqChunk& c = batch.seqs[s];
        const int k = c.draft_tokens;
        const int64_t nt = int64_t(c.tokens.size()) + k;  // a verify chunk runs its drafts too
        if (c.tokens.empty()) return invalid_argument("sequence {}: empty chunk", c.seq_id);
        if ((c.mtp || k != 0) && spec_tokens_ == 0)
            return invalid_argument("sequence {}: this runner was built without speculative decoding", c.seq_id);
        if (k < 0 || k > spec_tokens_)
            return invalid_argument("sequence {}: {} draft tokens asked; this runner verifies at most {}", c.seq_id, k,
                                    spec_tokens_);
        if (k > 0 && (c.start_pos == 0 || c.tokens.size() != 1 || !c.want_logits || !c.mtp))
            return invalid_argument(
                "sequence {}: a verify chunk is one token after the prompt of a speculating sequence, "
                "with want_logits (got {} tokens at {})",
                c.seq_id, c.tokens.size(), c.start_pos);
        // The MTP pass after a chunk of two or more tokens reads them from the host plan (spec_after).
        if (c.mtp && c.tokens.size() > 1 &&
            std::find(c.tokens.begin() + 1, c.tokens.end(), kPendingToken) != c.tokens.end())
            return invalid_argument("sequence {}: a speculating sequence's chunk has a pending token after its first",
                                    c.seq_id);
        if (spec_tokens_ > 0) {
            hp.spec_seq[size_t(s)] = c.mtp ? 1 : 0;
            hp.spec_seq[size_t(Bp + s)] = k;
            hp.spec_seq[size_t(2 * Bp + s)] = k > 0 ? k + 1 : 0;
            hp.spec_seq[size_t(3 * Bp + s)] = c.start_pos > 0 ? 1 : 0;
            hp.spec_live = hp.spec_live || (c.mtp && c.start_pos > 0);
            hp.spec_verify = hp.spec_verify || k > 0;
        }
        for (int32_t t : c.tokens) {
            if (t == kPendingToken) {
                if (!prev_rows_.count(c.seq_id))
                    return error(StatusCode::kFailedPrecondition,
                                 "sequence {}: a pending token, but the previous step sampled no token for it",
                                 c.seq_id);
                continue;
            }
            if (t < 0 || t >= cfg_.vocab_size)
                return error(StatusCode::kOutOfRange, "sequence {}: token id {} is outside the vocabulary [0, {})",
                             c.seq_id, t, cfg_.vocab_size);
        }
        if (c.start_pos + nt > opt_.max_context)
            return error(StatusCode::kOutOfRange, "sequence {}: position {} beyond the CUDA runner's max context {}",
                         c.seq_id, c.start_pos + nt - 1, opt_.max_context);
        const int64_t need = layout_.pages_for_tokens(c.start_pos + nt);
        if (int64_t(c.page_table.size()) < need)
            return error(StatusCode::kFailedPrecondition,
                         "sequence {}: page table has {} pages, positions up to {} need {}", c.seq_id,
                         c.page_table.size(), c.start_pos + nt - 1, need);
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
            // Drafts (i past the chunk's tokens) are written on the device (cuda::spec_fill_drafts).
            const int32_t t = i < int64_t(c.tokens.size()) ? c.tokens[size_t(i)] : 0;
            if (t == kPendingToken) {  // filled in on the device (cuda::fill_pending_tokens)
                hp.pend_dst.push_back(int32_t(hp.tokens.size()));
                hp.pend_src.push_back(prev_rows_.at(c.seq_id));
            }
            hp.tokens.push_back(t == kPendingToken ? 0 : t);
            hp.pos.push_back(int32_t(c.start_pos + i));
        }
        if (k > 0) {
            for (int64_t i = nt; i > 0; --i) hp.logit_rows.push_back(int32_t(hp.tokens.size() - i));
        } else if (c.want_logits) {
            hp.logit_rows.push_back(int32_t(hp.tokens.size() - 1));
        }
    }
    for (int s = B; s < Bp; ++s) {  // graph padding: graph_tokens dummy tokens each, n_tok 0 (skipped by stateful ops)
        hp.tok_begin[s] = int32_t(hp.tokens.size());
        for (int i = 0; i < graph_tokens; ++i) {
            hp.tokens.push_back(0);
            hp.pos.push_back(0);
        }
    }
    hp.T = int(hp.tokens.size());
    if (hp.T > opt_.max_step_tokens)
        return invalid_argument("{} tokens in one step, the CUDA runner takes {}", hp.T, opt_.max_step_tokens);
    hp.R = int(hp.logit_rows.size());
    // Graph rows: one per sequence of the bucket, or every token of a verify graph with verify chunks.
    hp.R_pad = graph_tokens == 0 ? hp.R : graph_tokens > 1 && hp.spec_verify ? hp.T : Bp;
    // The tuning file's sparse_decode rule: decode-only steps (one token per sequence), by the real
    // batch (graphs are captured per rule, so sizes sharing a padded bucket may differ) and the
    // longest context before the decoded token.
    int64_t longest = 0;
    for (int s = 0; s < B; ++s) longest = std::max<int64_t>(longest, hp.start_pos[s] + hp.n_tok[s] - 1);
    hp.end_pos = longest + 1;
    hp.sd_rule = hp.max_t == 1 ? sparse_decode_rule_for(B, longest) : -1;
    hp.batched = batched_step(hp.max_t);
    if (hp.batched) {
        // A padded sequence's dummy tokens (a verify graph's) are pseudo-sequences at position 0 of its
        // own all-zero page table: they only read, and their scores and outputs are not used.
        hp.pf_seq.resize(size_t(hp.T));
        hp.pf_pos.assign(size_t(hp.T), 0);
        hp.pf_stage_from.assign(size_t(hp.T), 0);
        for (int s = B; s < Bp; ++s)
            for (int i = 0; i < graph_tokens; ++i) hp.pf_seq[size_t(hp.tok_begin[s] + i)] = s;
        for (int s = 0; s < B; ++s)
            for (int i = 0; i < hp.n_tok[s]; ++i) {
                const size_t tok = size_t(hp.tok_begin[s] + i);
                hp.pf_seq[tok] = s;
                hp.pf_pos[tok] = hp.start_pos[s] + i;
                hp.pf_stage_from[tok] = hp.start_pos[s];
            }
        hp.pf_block_end.assign(size_t((hp.T + pf_block_ - 1) / pf_block_), 0);
        for (int tok = 0; tok < hp.T; ++tok) {
            int64_t& e = hp.pf_block_end[size_t(tok / pf_block_)];
            e = std::max(e, hp.pf_pos[size_t(tok)] + 1);
        }
    }
    return Status::ok();
}

Status CudaRunner::upload_plan(const HostPlan& hp) {
    const std::vector<int32_t> rows = plan_rows(hp);
    for (const HostPiece& p : plan_pieces(hp, step_plan_bufs(), rows))
        if (p.bytes) DSV4_CU(cudaMemcpyAsync(p.dst, p.src, p.bytes, cudaMemcpyHostToDevice, stream_));
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

void CudaRunner::set_gemm_thresholds(int max_t) {
    const StepGemmThresholds t = step_gemm_thresholds(opt_.rt, max_t);
    moe_gemm_min_tokens_ = t.moe_min_tokens;
    decode_only_step_ = t.decode_step;
    if (gemm_.handle) gemm_.min_tokens = t.dense_min_tokens;
}

cuda::MhcArgs CudaRunner::site_args(int l, int site) const {
    const DevLayer& L = block_w(l);
    const DevMhc& m = site == 0 ? L.hc_attn : L.hc_ffn;
    return cuda::MhcArgs{m.fn,
                         m.base,
                         m.scale,
                         site == 0 ? L.attn_norm : L.ffn_norm,
                         cfg_.hc_mult,
                         cfg_.hidden_size,
                         cfg_.hc_sinkhorn_iters,
                         float(cfg_.hc_eps),
                         float(cfg_.rms_norm_eps),
                         ws_.mhc_mix,
                         ws_.mhc_mix_rows};
}

Status CudaRunner::run_step(int B, int T, int max_t, int R, int64_t end_pos, const std::vector<int64_t>* block_end) {
    step_end_pos_ = end_pos;
    pf_block_end_ = block_end;
    struct Reset {
        int64_t& v;
        const std::vector<int64_t>*& b;
        ~Reset() { v = kAnyEndPos, b = nullptr; }
    } reset{step_end_pos_, pf_block_end_};
    const cuda::StepPlan sp = step_plan(B);
    cudaStream_t st = stream_;
    const int n = cfg_.hc_mult, d = cfg_.hidden_size;
    const int splits = cuda::attn_splits(*variant_, B, cfg_.n_heads, n_sms_);
    set_gemm_thresholds(max_t);
    if (test_delay_ns_ > 0) DSV4_CU(cuda::spin_device_ns(test_delay_ns_, st));  // bench hook, 0 in serving
    mark("reset+embed");
    DSV4_CU(cuda::reset_state(sp, pool_, layout_.state_elems, ws_.gate_off, ws_.gate_len, n_gate_ranges_, st));
    DSV4_CU(cuda::embed(w_.embed, ws_.tokens, T, n, ws_.X, st));
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
            if (site == 0)
                DSV4_RETURN_IF_ERROR(attention(l, sp, T, max_t, splits));
            else
                DSV4_RETURN_IF_ERROR(moe(l, T));
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
    if (batch.seqs.empty()) return Status::ok();
    DSV4_RETURN_IF_ERROR(launch_step(batch, false));
    StepOutput out;
    out.logits = std::move(logits);
    Status s = collect(out);
    logits = std::move(out.logits);
    return s;
}

Status CudaRunner::forward_sampled(const ForwardBatch& batch, StepOutput& out) {
    out = StepOutput{};
    if (batch.seqs.empty()) return Status::ok();
    DSV4_RETURN_IF_ERROR(launch_step(batch, true));
    return collect(out);
}

Status CudaRunner::lm_head(int R, const DevMhc& hc_head, const float* norm) {
    const int n = cfg_.hc_mult, d = cfg_.hidden_size;
    const cuda::MhcArgs ha{
        hc_head.fn,  hc_head.base,    hc_head.scale, norm, n, d, 0, float(cfg_.hc_eps), float(cfg_.rms_norm_eps),
        ws_.mhc_mix, ws_.mhc_mix_rows};
    DSV4_CU(cuda::mhc_head(ws_.X, ws_.logit_rows, R, ha, ws_.hn, stream_));
    DSV4_CU(cuda::linear(w_.head, -1, ws_.hn, d, 0, 0, ws_.logits, cfg_.vocab_size, R, false, stream_));
    return Status::ok();
}

// The non-layer work of a step (run_step without the layers): embedding, mHC head, LM head.
Status CudaRunner::run_head(int T, int R) {
    DSV4_CU(cuda::embed(w_.embed, ws_.tokens, T, cfg_.hc_mult, ws_.X, stream_));
    return lm_head(R);
}

}  // namespace cuda_runner_detail

using cuda_runner_detail::CudaRunner;

// The KV/state page layout of `cfg` in opt.rt.kv_rows rows; fills opt.n_pages (0: room for 64 sequences of
// 4096 tokens, unless gpu_memory_utilization sizes the pool in init()). Errors: a bad row format, a pool that cannot
// hold one sequence, page ids beyond int32.
static Result<KvLayout> runner_layout(const ModelConfig& cfg, CudaRunnerOptions& opt) {
    DSV4_ASSIGN_OR_RETURN(KvRowFormat rows, parse_kv_row_format(opt.rt.kv_rows));
    if (opt.mtp_blocks < 0 || opt.mtp_blocks > cfg.num_nextn_predict_layers)
        return invalid_argument("{} MTP blocks asked; the model config has {}", opt.mtp_blocks,
                                cfg.num_nextn_predict_layers);
    for (int m = 0; m < opt.mtp_blocks && m < int(cfg.mtp_compress_ratios.size()); ++m)
        if (cfg.mtp_compress_ratios[size_t(m)] != 0)
            return error(StatusCode::kUnimplemented,
                         "MTP block {} has compress ratio {}; only window-only MTP blocks run", m,
                         cfg.mtp_compress_ratios[size_t(m)]);
    if (opt.spec_tokens > 0 && opt.mtp_blocks < 1)
        return invalid_argument(
            "speculative decoding on the CUDA runner drafts with the MTP block: mtp_blocks must be 1");
    if (opt.spec_tokens > 0 && opt.ep_size > 1)
        return error(StatusCode::kUnimplemented,
                     "speculative decoding runs on one GPU only so far (expert parallel size {})", opt.ep_size);
    DSV4_ASSIGN_OR_RETURN(KvLayout layout,
                          KvLayout::make(cfg, opt.page_tokens, 4, rows, opt.mtp_blocks, opt.spec_tokens));
    if (opt.n_pages <= 0 && opt.gpu_memory_utilization > 0) return layout;  // sized in init()
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
    w.mtp_blocks = opt.mtp_blocks;
    if (opt.ep_size > 1 && cfg.n_routed_experts % opt.ep_size == 0) {  // [ep2] this rank's experts only
        w.expert_count = cfg.n_routed_experts / opt.ep_size;
        w.expert_first = opt.ep_rank * w.expert_count;
    }
    DSV4_RETURN_IF_ERROR(
        runner->init(nullptr, [&](DeviceArena& arena) { return make_synthetic_weights(cfg, w, arena, bytes); }));
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
    DSV4_ASSIGN_OR_RETURN(LoadPlan plan, make_load_plan(cfg, ckpt, ex_first, ex_count, opt.mtp_blocks));
    // The RefModel only carries the config here: no host weights.
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights{});
    auto runner = std::make_unique<CudaRunner>(std::move(model), std::move(layout), opt);
    CheckpointLoadOptions lo;
    lo.progress = opt.verbose && opt.ep_rank == 0;
    DSV4_RETURN_IF_ERROR(
        runner->init(nullptr, [&](DeviceArena& arena) { return load_checkpoint_weights(cfg, plan, arena, lo); }));
    return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace dsv4
