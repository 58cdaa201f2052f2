// CudaRunner's per-layer blocks (see cuda_runner_impl.h): the attention block (projections, KV
// step, indexer, decode attention, output projections) and the MoE block (router, routed and shared
// experts, combine, the expert-parallel all-reduce).
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

bool CudaRunner::bf16_route(int l, int T, int max_t) const {
    const int H = cfg_.n_heads, D = cfg_.head_dim, G = cfg_.o_groups, orank = cfg_.o_lora_rank;
    return batched_step(max_t) && gemm_step(T) &&
           cuda::linear_reads_only_bf16(block_w(l).wo_a, orank, int64_t(H / G) * D, int64_t(H) * D, int64_t(G) * orank,
                                        T);
}

Status CudaRunner::attention(int l, const cuda::StepPlan& sp, int T, int max_t, int splits) {
    const DevLayer& L = block_w(l);
    const int d = cfg_.hidden_size, H = cfg_.n_heads, D = cfg_.head_dim, qr = cfg_.q_lora_rank, R = cfg_.rope_dim;
    const float eps = float(cfg_.rms_norm_eps);
    const int r = block_ratio(l);
    const bool csa = block_type(l) == AttnType::kCSA;
    const float* rope = r == 0 ? w_.rope_main : w_.rope_compress;
    cudaStream_t st = stream_;
    const int IH = cfg_.index_n_heads, ID = cfg_.index_head_dim;
    const int kappa = csa ? 2 : 1;
    // No sequence of the step has more closed rows than the indexer selects: every row is attended
    // (indexer_select) and the indexer's queries and head weights are not needed.
    const bool idx_scores = csa && step_end_pos_ / r > cfg_.index_topk;
    // The projections of xn are independent until kv_step: q (then the indexer queries, which need
    // q_lat) on stream_, kv / compressor / indexer compressor + weights on side streams. At batch 1
    // each is a short, CTA-starved GEMV, so overlapping them fills the GPU.
    const bool ov = opt_.rt.side_streams && !gemm_step(T);
    const int n_side = !ov ? 0 : csa ? 3 : r > 0 ? 2 : 1;
    cudaStream_t s_kv = ov ? side_[0] : st, s_comp = ov ? side_[1] : st, s_idx = ov ? side_[2] : st;
    const void* xnb = nullptr;  // bf16 xn for every projection of xn (converted before the fork)
    DSV4_RETURN_IF_ERROR(bf16_input(ws_.xn, d, T, ws_.xb_xn, ws_.xb_rows_wide, st, &xnb));
    if (ov) DSV4_RETURN_IF_ERROR(fork(n_side));
    mark(ov ? "q|kv|compressor|indexer proj (streams)" : "q: wq_a+norm+wq_b+rope");
    DSV4_CU(cuda::linear(L.wq_a, -1, ws_.xn, d, 0, 0, ws_.qlat_raw, qr, T, false, st, xnb));
    DSV4_CU(
        cuda::norm_rope(ws_.qlat_raw, qr, ws_.qlat, qr, T, qr, true, L.q_norm, eps, nullptr, 0, ws_.pos, 1, false, st));
    const void* qlb = nullptr;
    DSV4_RETURN_IF_ERROR(bf16_input(ws_.qlat, qr, T, ws_.xb_qlat, ws_.xb_rows_wide, st, &qlb));
    const bool route = bf16_route(l, T, max_t);
    // Decode steps (never batched, never on the bf16 route): one token per sequence, token s of
    // sequence s (graph padding included), so the normed q rows are sparse_decode's q rows in order;
    // written as bf16 directly (q_rows_bf16's rounding, the same bits).
    const bool q_decode_bf16 = fast_attn_ && opt_.rt.decode_q_bf16 && max_t == 1;
    q_bf16_layers_ += q_decode_bf16;
    // Prefill on the bf16 route with q from the cuBLAS GEMM: written as bf16, normed in place (the
    // f32 q [T, H x 512] written and read back is the cost this skips).
    const bool q_bf16 = route && opt_.rt.prefill_q_bf16 && qlb && D == 512 &&
                        cuda::linear_reads_only_bf16(L.wq_b, H * D, 0, qr, int64_t(H) * D, T);
    if (q_bf16) {
        DSV4_CU(cuda::linear_bf16_out(L.wq_b, qlb, qr, ws_.pf_qb, T, st));
        DSV4_CU(cuda::norm_rope_bf16(ws_.pf_qb, D, T * H, D, true, nullptr, eps, rope, R, ws_.pos, H, st));
    } else {
        DSV4_CU(cuda::linear(L.wq_b, -1, ws_.qlat, qr, 0, 0, ws_.q, int64_t(H) * D, T, false, st, qlb));
        if (route || q_decode_bf16)
            DSV4_CU(cuda::norm_rope_to_bf16(ws_.q, D, route ? ws_.pf_qb : ws_.qb, D, T * H, D, true, nullptr, eps, rope,
                                            R, ws_.pos, H, st));
        else
            DSV4_CU(cuda::norm_rope(ws_.q, D, ws_.q, D, T * H, D, true, nullptr, eps, rope, R, ws_.pos, H, false, st));
    }
    if (idx_scores) {
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
        if (idx_scores) {
            DSV4_CU(cuda::linear(L.idx_wproj, -1, ws_.xn, d, 0, 0, ws_.iw, IH, T, false, s_idx, xnb));
            const float wscale = 1.0f / std::sqrt(float(ID)) / std::sqrt(float(IH));
            DSV4_CU(cuda::scale_inplace(ws_.iw, int64_t(T) * IH, wscale, s_idx));
        }
    }
    if (ov) DSV4_RETURN_IF_ERROR(join(n_side));
    LayerArgs la = layer_args_[size_t(l)];
    cuda::KvStepArgs& ka = la.kv;
    cuda::IndexerArgs& ia = la.idx;
    cuda::AttnArgs& aa = la.attn;
    cuda::RowListArgs& ra = la.rows;
    cuda::SparseDecodeArgs& sa = la.sd;
    if (fast_attn_) {  // row lists -> sparse_decode (bf16 q / out) -> f32 with inverse RoPE
        sa.batch = sp.n_seqs;
        sa.variant = sd_variant_;
        sa.target_ctas = opt_.rt.split_kv_target_ctas;
        if (sd_rule_ >= 0) {  // the tuning file's choice for this step's shape; a forced variant wins
            const SparseDecodeRule& rule = sd_rules_[size_t(sd_rule_)];
            if (sa.variant < 0) sa.variant = rule.variant;
            if (rule.target_ctas > 0) sa.target_ctas = rule.target_ctas;
        }
        const int64_t sd_splits = cuda::sparse_decode_splits_for(sa);
        if (int64_t(sa.batch) * sd_splits > ws_.sd_seq_splits)
            return error(StatusCode::kInternal, "sparse_decode: {} sequences x {} splits exceed the workspace ({})",
                         sa.batch, sd_splits, ws_.sd_seq_splits);
    }
    // Batched prefill (only built with fast attention) replaces the token loop below.
    const bool batched = batched_step(max_t);
    if (batched) DSV4_RETURN_IF_ERROR(attention_batched(sp, T, max_t, csa, ka, ia, ra, sa, rope, route));
    for (int t = 0; t < (batched ? 0 : max_t); ++t) {
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
            if (!q_decode_bf16) DSV4_CU(cuda::q_rows_bf16(sp, t, ws_.q, H * D, ws_.qb, st));
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
    const void* ob = route ? ws_.pf_ob : nullptr;  // the bf16 route: wo_a reads pf_ob only
    if (!route) DSV4_RETURN_IF_ERROR(bf16_input(ws_.o, int64_t(H) * D, T, ws_.xb_o, opt_.max_seqs, st, &ob));
    DSV4_CU(cuda::linear(L.wo_a, -1, ws_.o, int64_t(H) * D, orank, int64_t(hpg) * D, ws_.z, int64_t(G) * orank, T,
                         false, st, ob));
    const void* zb = nullptr;
    DSV4_RETURN_IF_ERROR(bf16_input(ws_.z, int64_t(G) * orank, T, ws_.xb_z, opt_.max_seqs, st, &zb));
    DSV4_CU(cuda::linear(L.wo_b, -1, ws_.z, int64_t(G) * orank, 0, 0, ws_.y, d, T, false, st, zb));
    return Status::ok();
}

cuda::MoeArgs CudaRunner::moe_args(int l, int T) const { return moe_step_args(layer_args_[size_t(l)].moe, T); }

cuda::MoeArgs CudaRunner::moe_step_args(cuda::MoeArgs a, int T) const {
    a.T = T;
    a.grouped_min_tokens = moe_gemm_min_tokens_;
    a.moe_rules = moe_rules_.empty() ? nullptr : &moe_rules_;
    a.grouped_rules = grouped_rules_.empty() ? nullptr : &grouped_rules_;
    a.decode_step = decode_only_step_;
    return a;
}

Status CudaRunner::moe(int l, int T) {
    const DevLayer& L = block_w(l);
    const int d = cfg_.hidden_size, E = cfg_.n_routed_experts, I = cfg_.moe_intermediate_size;
    const float lim = float(cfg_.swiglu_limit);
    cudaStream_t st = stream_;
    // The shared expert is independent of routing: on a side stream it overlaps the router and the
    // routed experts (joined before the combine, which adds its output).
    // [ep2] Under expert parallelism the shared expert of layer l runs on rank l % N only (the
    // ranks take turns, so no rank carries it in every layer); the others add no shared term.
    const bool shared_here = !ep_ || ep_->shared_expert_rank(l) == opt_.ep_rank;
    const bool ov = opt_.rt.side_streams && shared_here && !gemm_step(T);
    const void* xnb = nullptr;  // bf16 xn for the shared expert and the router (converted before the fork)
    DSV4_RETURN_IF_ERROR(bf16_input(ws_.xn, d, T, ws_.xb_xn, ws_.xb_rows_wide, st, &xnb));
    auto shared_expert = [&](cudaStream_t s) -> Status {  // ys = w2 SwiGLU(w1 xn, w3 xn)
        DSV4_CU(cuda::linear(L.sh_w1, -1, ws_.xn, d, 0, 0, ws_.sa, I, T, false, s, xnb));
        DSV4_CU(cuda::linear(L.sh_w3, -1, ws_.xn, d, 0, 0, ws_.sb, I, T, false, s, xnb));
        DSV4_CU(cuda::swiglu(ws_.sa, ws_.sb, ws_.sh, int64_t(T) * I, lim, s));
        const void* shb = nullptr;
        DSV4_RETURN_IF_ERROR(bf16_input(ws_.sh, I, T, ws_.xb_sh, opt_.max_seqs, s, &shb));
        DSV4_CU(cuda::linear(L.sh_w2, -1, ws_.sh, I, 0, 0, ws_.ys, d, T, false, s, shb));
        return Status::ok();
    };
    if (ov) {
        DSV4_RETURN_IF_ERROR(fork(1));
        DSV4_RETURN_IF_ERROR(shared_expert(side_[0]));
    }
    mark(ov ? "router gate (shared expert on a side stream)" : "router gate");
    DSV4_CU(cuda::linear(L.gate, -1, ws_.xn, d, 0, 0, ws_.glog, E, T, false, st, xnb));
    const cuda::MoeArgs a = moe_args(l, T);
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

}  // namespace dsv4::cuda_runner_detail
