// CudaRunner's batched prefill attention (see cuda_runner_impl.h, attention_batched). Why: the
// token-at-a-time path launches kv_step, the indexer and the decode attention once per token of the
// longest chunk (about 7 launches x 4096 tokens per layer for a 4K prompt, ~800 tokens/s on the
// 20-layer proxy, ledger E23). Here each layer's state work is a few launches for the whole step
// and the query tokens run as one-token pseudo-sequences through the same decode kernels:
//   1. the step's K=V rows are written to staging rows in the pool's format;
//   2. every compressed row whose window closes inside a chunk is pooled (compress_chunk), then
//      the compressor state rows are left as the token loop leaves them (compress_state_chunk);
//   3. per block of prefill_query_block tokens: indexer scores + top-k (CSA), row lists (window
//      positions inside the chunk from staging, earlier ones from the ring), q to bf16,
//      sparse_prefill (wgmma; else sparse_decode), the inverse-RoPE output rows; on the bf16 route (bf16_route) q
//      arrives in bf16 for the whole step and the output rows are inverse-rotated in place once, after the blocks;
//   4. the ring gets each sequence's last W rows (ring_write_chunk).
// A pseudo-sequence sees exactly the rows its token saw in the loop (window positions <= p,
// compressed windows closed at or before p), in the same order, so with sparse_decode the output is
// bit-identical; sparse_prefill sums in another order (within bf16 tolerance).
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

Status CudaRunner::attention_batched(const cuda::StepPlan& sp, int T, int max_t, bool csa, cuda::KvStepArgs& ka,
                                     cuda::IndexerArgs& ia, cuda::RowListArgs& ra, cuda::SparseDecodeArgs& sa,
                                     const float* rope, bool bf16_route) {
    cudaStream_t st = stream_;
    const int H = cfg_.n_heads, D = cfg_.head_dim, R = cfg_.rope_dim;
    mark("prefill: stage rows + chunk compressors");
    DSV4_CU(cuda::stage_kv_rows(pool_, ka.kv, T, ws_.stage_word, st));
    if (ka.n_comp > 0) {
        DSV4_CU(cuda::compress_chunk(sp, pool_, ka, max_t, st, ws_.comp_pooled, T, ws_.comp_pooled_ld));
        DSV4_CU(cuda::compress_state_chunk(sp, pool_, ka, st));
    }
    ra.t = ia.t = 0;
    ra.stage_word = ws_.stage_word;
    for (int q0 = 0; q0 < T; q0 += pf_block_) {
        cuda::StepPlan qp = sp;  // pseudo-sequences q0 .. q0 + nq - 1: token i of the step each
        qp.n_seqs = std::min(pf_block_, T - q0);
        qp.tok_begin = ws_.pf_tok_begin + q0;
        qp.n_tok = ws_.pf_n_tok + q0;
        qp.start_pos = ws_.pf_start_pos + q0;
        qp.table_row = ws_.pf_seq + q0;
        ra.stage_from = ws_.pf_stage_from + q0;
        if (csa) {
            // Long rows: exact scores only where the top-k can still take the row (same selection).
            // Only where the block's positions are known (eager steps): captured graphs (verify steps)
            // replay at any position and keep the plain path.
            const size_t b = size_t(q0 / pf_block_);
            if (ws_.idx_lo && pf_block_end_ && b < pf_block_end_->size() &&
                (*pf_block_end_)[b] / std::max(ia.ratio, 1) >= opt_.rt.indexer_filter_min_rows &&
                cuda::indexer_filter_applies(pool_, ia)) {
                const cuda::IndexerFilter f{ws_.idx_lo, ws_.idx_n_cand};
                if ((*pf_block_end_)[b] / std::max(ia.ratio, 1) > ia.topk) ++filter_blocks_;  // some query scores
                mark("prefill: indexer bounds (bf16)");
                DSV4_CU(cuda::indexer_bounds(qp, pool_, ia, f, st));
                mark("prefill: indexer candidates");
                DSV4_CU(cuda::indexer_candidates(qp, ia, f, st));
                mark("prefill: indexer exact scores (listed)");
                DSV4_CU(cuda::indexer_scores_listed(qp, pool_, ia, f, st));
                mark("prefill: indexer top-k (listed)");
                DSV4_CU(cuda::indexer_select_listed(qp, ia, f, st));
            } else {
                mark("prefill: indexer scores + top-k");
                DSV4_CU(cuda::indexer_scores(qp, pool_, ia, st));
                DSV4_CU(cuda::indexer_select(qp, ia, st));
            }
        }
        mark(bf16_route ? "prefill: row lists" : "prefill: row lists + q bf16");
        DSV4_CU(cuda::build_row_lists(qp, pool_, ra, st));
        if (bf16_route) {  // this block's rows of the step's bf16 q and output
            sa.q = static_cast<const char*>(ws_.pf_qb) + int64_t(q0) * H * D * 2;
            sa.out = static_cast<char*>(ws_.pf_ob) + int64_t(q0) * H * D * 2;
        } else {
            DSV4_CU(cuda::q_rows_bf16(qp, 0, ws_.q, H * D, ws_.qb, st));
        }
        sa.batch = qp.n_seqs;
        if (opt_.rt.prefill_attn_wgmma && *cuda::sparse_prefill_decline(sa) == '\0') {
            mark("prefill: sparse_prefill (wgmma)");
            DSV4_CU(cuda::sparse_prefill_run(sa, st));
        } else {
            mark("prefill: sparse_decode");
            const int64_t splits = cuda::sparse_decode_splits_for(sa);
            if (int64_t(sa.batch) * splits > ws_.sd_seq_splits)
                return error(StatusCode::kInternal,
                             "sparse_decode: {} query tokens x {} splits exceed the workspace ({})", sa.batch, splits,
                             ws_.sd_seq_splits);
            DSV4_RETURN_IF_ERROR(cuda::sparse_decode_launch(sa, st));
        }
        if (!bf16_route) {
            mark("prefill: attn out (inv rope)");
            DSV4_CU(cuda::attn_out_rows(qp, 0, ws_.ob, H, D, rope, R, ws_.o, st));
        }
    }
    if (bf16_route) {
        mark("prefill: attn out (inv rope)");
        DSV4_CU(cuda::rope_rows_bf16(ws_.pf_ob, int64_t(T) * H, D, rope, R, ws_.pos, H, true, st));
    }
    sa.q = ws_.qb;
    sa.out = ws_.ob;
    sa.batch = sp.n_seqs;
    ra.stage_from = nullptr;
    mark("prefill: ring write-back");
    DSV4_CU(cuda::ring_write_chunk(sp, pool_, ka, ws_.stage_word, st));
    return Status::ok();
}

}  // namespace dsv4::cuda_runner_detail
