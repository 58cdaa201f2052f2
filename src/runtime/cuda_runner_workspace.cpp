// CudaRunner's device workspace (see cuda_runner_impl.h, alloc_workspace): every activation, plan and
// output buffer of a step as one table of (name, bytes, destination), allocated once at start-up with
// fixed addresses (graphs replay them), then what depends on those addresses.
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

namespace {
// One device buffer: its name (errors and the start-up line), its bytes, where its address goes.
struct Buffer {
    const char* name;
    size_t bytes;
    std::function<void(void*)> place;
};
template <class T>
Buffer buf(const char* name, T*& dst, size_t n) {
    return {name, sizeof(T) * std::max<size_t>(n, 1), [&dst](void* p) { dst = static_cast<T*>(p); }};
}
Buffer raw(const char* name, void*& dst, size_t bytes) {
    return {name, std::max<size_t>(bytes, 1), [&dst](void* p) { dst = p; }};
}
}  // namespace

Status CudaRunner::alloc_workspace() {
    // Bm: sequences of a step; Bq: entries of the attention workspaces (batched prefill runs up to
    // pf_block_ pseudo-sequences per launch); Rm: logits rows (k + 1 per verify chunk).
    const size_t Tm = size_t(opt_.max_step_tokens), Bm = size_t(opt_.max_seqs);
    const size_t Bq = batched_ ? std::max(Bm, size_t(pf_block_)) : Bm;
    const size_t n = cfg_.hc_mult, d = cfg_.hidden_size, H = cfg_.n_heads, D = cfg_.head_dim, qr = cfg_.q_lora_rank;
    const size_t ID = std::max(cfg_.index_head_dim, 1), IH = std::max(cfg_.index_n_heads, 1);
    const size_t E = cfg_.n_routed_experts, K = cfg_.n_experts_per_tok, I = cfg_.moe_intermediate_size;
    const size_t G = cfg_.o_groups, orank = cfg_.o_lora_rank, V = size_t(cfg_.vocab_size);
    spec_tokens_ = layout_.spec_tokens;
    rows_cap_ = int(Bm) * (1 + spec_tokens_);
    const size_t Rm = size_t(rows_cap_), S = size_t(spec_tokens_);
    if (spec_tokens_ > 0) {
        if (w_.mtp.empty()) return error(StatusCode::kFailedPrecondition, "speculative decoding needs the MTP block");
        // The catch-up pass plans S + 1 slots per sequence in the token arrays.
        if (int64_t(Bm) * int64_t(S + 1) > opt_.max_step_tokens)
            return invalid_argument("max_step_tokens {} is below max_seqs x (speculative tokens + 1) = {}",
                                    opt_.max_step_tokens, int64_t(Bm) * int64_t(S + 1));
    }
    int min_ratio = 0;
    for (int l = 0; l < cfg_.n_layers; ++l)
        if (cfg_.layer_types[l] == AttnType::kCSA)
            min_ratio = min_ratio == 0 ? cfg_.compress_ratio(l) : std::min(min_ratio, cfg_.compress_ratio(l));
    ws_.max_rows = min_ratio > 0 ? opt_.max_context / min_ratio + 1 : 1;
    const size_t splits = size_t(variant_->max_splits), topk = size_t(std::max(cfg_.index_topk, 1));
    // At least 16 chunk rows per token: a prefill step's n*d reduction then splits into chunks of
    // <= 1024 elements, the width the token-group mixing kernel stages (with fewer rows a 4K-token step
    // fell back to the per-token form, re-reading the mixing matrix from L2 once per token: E33);
    // steps of fewer tokens get more rows each (mhc_mix_chunks halves its wish until it fits).
    ws_.mhc_mix_rows = int64_t(std::max(16 * Tm, 32 * Bm));
    const size_t old_path = fast_attn_ ? 0 : 1;  // the CUDA-core kernel's split partials
    std::vector<Buffer> t = {
        buf("X (streams)", ws_.X, Tm * n * d),
        buf("xn", ws_.xn, Tm * d),
        buf("mhc coeffs", ws_.coeffs, Tm * (2 * n + n * n)),
        buf("mhc mixing dots", ws_.mhc_mix, size_t(ws_.mhc_mix_rows) * ((2 + n) * n + 1)),
        buf("y", ws_.y, Tm * d),
        buf("q_lat raw", ws_.qlat_raw, Tm * qr),
        buf("q_lat", ws_.qlat, Tm * qr),
        buf("q", ws_.q, Tm * H * D),
        buf("kv raw", ws_.kv_raw, Tm * D),
        buf("kv", ws_.kv, Tm * D),
        buf("compressor kv", ws_.cv, Tm * 2 * D),
        buf("compressor gate", ws_.cg, Tm * 2 * D),
        buf("indexer kv", ws_.iv, Tm * 2 * ID),
        buf("indexer gate", ws_.ig, Tm * 2 * ID),
        buf("indexer q", ws_.iq, Tm * IH * ID),
        buf("indexer weights", ws_.iw, Tm * IH),
        buf("attention out", ws_.o, Tm * H * D),
        buf("wo_a out", ws_.z, Tm * G * orank),
        buf("router logits", ws_.glog, Tm * E),
        buf("router weights", ws_.wts, Tm * K),
        buf("expert h", ws_.h, Tm * K * I),
        buf("expert out", ws_.yp, Tm * K * d),
        buf("shared w1 out", ws_.sa, Tm * I),
        buf("shared w3 out", ws_.sb, Tm * I),
        buf("shared h", ws_.sh, Tm * I),
        buf("shared out", ws_.ys, Tm * d),
        buf("indexer scores", ws_.scores, Bq * size_t(ws_.max_rows)),
        buf("attn_decode partial acc", ws_.part_acc, old_path * Bm * H * splits * D),
        buf("attn_decode partial m/l", ws_.part_ml, old_path * Bm * H * splits * 2),
    };
    if (batched_ && min_ratio > 0 && opt_.rt.indexer_filter_min_rows > 0) {
        t.push_back(buf("indexer filter bounds / candidates", ws_.idx_lo, Bq * size_t(ws_.max_rows)));
        t.push_back(buf("indexer filter counts", ws_.idx_n_cand, Bq));
    }
    if (fast_attn_) {
        // Rows per sequence: the window plus the largest compressed set (CSA top-k, HCA all rows).
        int64_t max_comp = 0;
        for (int l = 0; l < cfg_.n_layers; ++l) {
            const int r = cfg_.compress_ratio(l);
            if (r > 0)
                max_comp =
                    std::max<int64_t>(max_comp, cfg_.layer_types[l] == AttnType::kCSA ? int64_t(cfg_.index_topk)
                                                                                      : opt_.max_context / r + 1);
        }
        ws_.row_cap = int64_t(Bq) * (cfg_.sliding_window + max_comp);
        // batch x splits <= max(batch, target CTAs): a forced split-KV target larger than 2 x SMs must fit too.
        int64_t target = std::max<int64_t>(
            {2 * int64_t(n_sms_), opt_.rt.split_kv_target_ctas, int64_t(opt_.split_kv_workspace_ctas)});
        for (const SparseDecodeRule& r : sd_rules_) target = std::max<int64_t>(target, r.target_ctas);
        ws_.sd_seq_splits = std::max<int64_t>(int64_t(Bq), target);
        t.push_back(raw("sparse_decode q bf16", ws_.qb, Bq * H * D * 2));
        t.push_back(raw("sparse_decode out bf16", ws_.ob, Bq * H * D * 2));
        t.push_back(buf("attention row offsets", ws_.row_offs, size_t(ws_.row_cap)));
        t.push_back(buf("attention row starts", ws_.row_start, Bq + 1));
        t.push_back(buf("sparse_decode split partials", ws_.sd_ws,
                        cuda::sparse_decode_workspace_floats(int(ws_.sd_seq_splits), int(H), 1)));
    }
    // With max_seqs below the threshold only prefill steps use them (the wide buffers; the narrow ones,
    // of max_seqs rows, are then never taken: bf16_input needs T <= rows).
    if (opt_.rt.x_bf16_min_tokens > 0 &&
        int64_t(std::max(Bm, opt_.rt.prefill_x_bf16 ? Tm : size_t(0))) >= opt_.rt.x_bf16_min_tokens) {
        ws_.xb_rows_wide = int64_t(opt_.rt.prefill_x_bf16 ? std::max(Bm, Tm) : Bm);
        const size_t Bw = size_t(ws_.xb_rows_wide);
        t.push_back(raw("bf16 attention out", ws_.xb_o, Bm * H * D * 2));
        t.push_back(raw("bf16 wo_a out", ws_.xb_z, Bm * G * orank * 2));
        t.push_back(raw("bf16 q_lat", ws_.xb_qlat, Bw * qr * 2));
        t.push_back(raw("bf16 xn", ws_.xb_xn, Bw * d * 2));
        t.push_back(raw("bf16 shared h", ws_.xb_sh, Bm * I * 2));
    }
    t.insert(t.end(),
             {buf("head rows", ws_.hn, Rm * d), buf("logits", ws_.logits, Rm * V), buf("routed ids", ws_.ids, Tm * K),
              buf("expert counts", ws_.counts, 3 * E + 1), buf("permutation", ws_.perm, Tm * K),
              buf("permutation slots", ws_.slot, Tm * K), buf("indexer selection", ws_.sel, Bq * topk),
              buf("indexer selected", ws_.n_sel, Bq), buf("plan: logits rows", ws_.logit_rows, Rm),
              buf("plan: token begin", ws_.tok_begin, Bm), buf("plan: tokens per sequence", ws_.n_tok, Bm),
              buf("plan: page tables", ws_.page_table, Bm * size_t(pt_stride_)), buf("plan: tokens", ws_.tokens, Tm),
              buf("plan: positions", ws_.pos, Tm), buf("plan: start positions", ws_.start_pos, Bm)});
    if (!w_.mtp.empty()) {  // the MTP block's input streams and next tokens (mtp_block)
        t.push_back(buf("MTP input streams", mtp_in_, Tm * n * d));
        t.push_back(buf("MTP next tokens", mtp_next_, Tm));
    }
    if (spec_tokens_ > 0) {  // speculative decoding's cycle (cuda_runner_spec.cpp): the second plan arrays and more
        t.insert(t.end(), {buf("aux plan: token begin", aux_.tok_begin, std::max(Bm, Tm)),
                           buf("aux plan: tokens per sequence", aux_.n_tok, Bm),
                           buf("aux plan: page tables", aux_.page_table, Bm * size_t(pt_stride_)),
                           buf("aux plan: tokens", aux_.tokens, Tm), buf("aux plan: positions", aux_.pos, Tm),
                           buf("aux plan: logits rows", aux_.logit_rows, Rm),
                           buf("aux plan: start positions", aux_.start_pos, Bm),
                           buf("spec: per-sequence flags", spec_seq_, 4 * Bm), buf("spec: drafts", drafts_, Bm * S),
                           buf("spec: draft picks", draft_ids_, Bm), buf("spec: MTP pass rows", gather_idx_, Tm),
                           buf("spec: MTP ring rows", ring_scratch_, Bm * S * size_t(layout_.row_words_main))});
        if (batched_) {
            t.push_back(buf("aux plan: prefill sequence", aux_.pf_seq, Tm));
            t.push_back(buf("aux plan: prefill positions", aux_.pf_start_pos, Tm));
            t.push_back(buf("aux plan: prefill staging", aux_.pf_stage_from, Tm));
        }
    }
    // Launched steps (launch / collect): sampled ids, pending-token lists, kFull results.
    t.push_back(buf("sampled ids", sampled_, Rm));
    if (opt_.rt.split_argmax) t.push_back(buf("split argmax keys", argmax_ws_, Rm * size_t(cuda::kArgmaxParts)));
    t.push_back(buf("pending tokens: destinations", pend_dst_, Tm));
    t.push_back(buf("pending tokens: sources", pend_src_, Tm));
    t.push_back(buf("kFull sampler results", sample_out_, Rm));
    if (batched_) {
        ws_.comp_pooled_ld = int(std::max(D, ID));  // the main and the indexer compressor's row widths
        t.insert(t.end(),
                 {buf("prefill: token begin", ws_.pf_tok_begin, Tm), buf("prefill: one token", ws_.pf_n_tok, Tm),
                  buf("prefill: sequence", ws_.pf_seq, Tm), buf("prefill: positions", ws_.pf_start_pos, Tm),
                  buf("prefill: staging", ws_.pf_stage_from, Tm),
                  buf("prefill: compressor pooling", ws_.comp_pooled, 2 * Tm * size_t(ws_.comp_pooled_ld))});
    }
    size_t total = 0;
    const Buffer* largest = nullptr;
    for (const Buffer& b : t) {
        auto p = arena_.alloc(b.bytes);
        if (!p.is_ok())
            return p.status().with_context(fmt::format("the step workspace '{}' ({} bytes)", b.name, b.bytes));
        b.place(*p);
        total += b.bytes;
        if (!largest || b.bytes > largest->bytes) largest = &b;
    }
    if (opt_.verbose && largest)
        std::fprintf(stderr, "dsv4 cuda: step workspace %zu buffers, %.1f MiB (largest: %s, %.1f MiB)\n", t.size(),
                     double(total) / 1048576.0, largest->name, double(largest->bytes) / 1048576.0);

    // What depends on the addresses.
    ws_.pf_ob = ws_.o;  // a batched step's bf16 q and attention output: the two halves of o's f32 storage
    ws_.pf_qb = reinterpret_cast<char*>(ws_.o) + Tm * H * D * 2;
    if (spec_tokens_ > 0) {
        const std::vector<SpecRegion> regions = spec_regions(layout_);
        n_spec_regions_ = int(regions.size());
        if (!regions.empty()) {
            DSV4_ASSIGN_OR_RETURN(void* r, arena_.upload(regions.data(), regions.size() * sizeof(SpecRegion)));
            spec_regions_ = static_cast<SpecRegion*>(r);
        }
    }
    if (batched_) {
        // Pseudo-sequence i is token i of the step: tok_begin i, one token (fixed for the runner's life).
        std::vector<int32_t> iota(Tm), ones(Tm, 1);
        for (size_t i = 0; i < Tm; ++i) iota[i] = int32_t(i);
        DSV4_CU(cudaMemcpy(ws_.pf_tok_begin, iota.data(), Tm * sizeof(int32_t), cudaMemcpyHostToDevice));
        DSV4_CU(cudaMemcpy(ws_.pf_n_tok, ones.data(), Tm * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
    // The two step slots' pinned staging, sized for the largest plan (penalty tokens grow when needed).
    const size_t plan_bytes = Bm * (3 * sizeof(int32_t) + sizeof(int64_t)) + Bm * size_t(pt_stride_) * sizeof(int32_t) +
                              Tm * (4 * sizeof(int32_t) + 3 * sizeof(int64_t)) + Tm * 2 * sizeof(int32_t) +
                              Rm * sizeof(cuda::SampleRowArgs) + 16 * 64;
    for (auto& sl : slots_) {
        DSV4_CU(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming));
        DSV4_CU(cudaEventCreateWithFlags(&sl.ready, cudaEventDisableTiming));
        DSV4_RETURN_IF_ERROR(sl.up.reserve(plan_bytes + Bm * 64 * sizeof(cuda::SamplePenaltyToken)));
        DSV4_RETURN_IF_ERROR(sl.ids.reserve(Rm * sizeof(int32_t)));
        DSV4_RETURN_IF_ERROR(sl.full.reserve(Rm * sizeof(cuda::SampleRowOut)));
        if (spec_tokens_ > 0) DSV4_RETURN_IF_ERROR(sl.drafts.reserve(Bm * S * sizeof(int32_t)));
    }
    return Status::ok();
}

}  // namespace dsv4::cuda_runner_detail
