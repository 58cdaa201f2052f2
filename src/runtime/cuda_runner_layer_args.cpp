// CudaRunner::build_layer_args (see cuda_runner_impl.h, LayerArgs): every block's kernel arguments that
// stay the same from step to step, built once at init after the workspace and the page pool exist.
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

cuda::MoeArgs CudaRunner::moe_block_args(int l) const {
    const DevLayer& L = block_w(l);
    cuda::MoeArgs m;
    m.E = cfg_.n_routed_experts;
    m.K = cfg_.n_experts_per_tok;
    m.d = cfg_.hidden_size;
    m.I = cfg_.moe_intermediate_size;
    m.logits = ws_.glog;
    const bool hash = block_routing(l) == MoeRouting::kHash;
    m.bias = hash ? nullptr : L.gate_bias;
    m.tid2eid = hash ? L.tid2eid : nullptr;
    m.tokens = ws_.tokens;
    m.route_scale = float(cfg_.routed_scaling_factor);
    m.norm_topk = cfg_.norm_topk_prob;
    m.limit = float(cfg_.swiglu_limit);
    m.ids = ws_.ids;
    m.wts = ws_.wts;
    m.counts = ws_.counts;
    m.perm = ws_.perm;
    m.slot = ws_.slot;
    m.x = ws_.xn;
    m.h = ws_.h;
    m.yp = ws_.yp;
    m.w1 = L.ex_w1;
    m.w3 = L.ex_w3;
    m.w2 = L.ex_w2;
    m.ep_first = ep_first_;  // [ep2] local experts only (count 0: all)
    m.ep_count = ep_count_;
    m.fast = opt_.rt.fast_kernels;
    m.moe_variant = moe_variant_;
    m.grouped_variant = moe_gemm_variant_;
    m.grouped_wgmma = opt_.rt.moe_gemm_wgmma;
    return m;
}

void CudaRunner::build_layer_args() {
    const int n_blocks = cfg_.n_layers + int(w_.mtp.size());
    layer_args_.assign(size_t(n_blocks), LayerArgs{});
    const int H = cfg_.n_heads, D = cfg_.head_dim, R = cfg_.rope_dim;
    const float eps = float(cfg_.rms_norm_eps);
    const int IH = cfg_.index_n_heads, ID = cfg_.index_head_dim;
    for (int l = 0; l < n_blocks; ++l) {
        LayerArgs& a = layer_args_[size_t(l)];
        const DevLayer& L = block_w(l);
        const LayerStateLayout& S = layout_.layers[size_t(l)];
        const int r = block_ratio(l);
        const bool csa = block_type(l) == AttnType::kCSA;
        const float* rope = r == 0 ? w_.rope_main : w_.rope_compress;
        cuda::KvStepArgs& ka = a.kv;
        ka.W = cfg_.sliding_window;
        ka.D = D;
        ka.ring_off = S.ring_offset;
        ka.kv = ws_.kv;
        ka.rope_inv_freq = w_.rope_compress;
        ka.rope_dim = R;
        ka.eps = eps;
        if (r > 0) {
            ka.comp[0] = {r,          D,      csa,    S.comp_kv_offset, S.comp_gate_offset, S.row_offset,
                          pool_.main, ws_.cv, ws_.cg, L.comp.ape,       L.comp.norm};
            ka.n_comp = 1;
        }
        if (csa) {
            ka.comp[1] = {r,           ID,     true,   S.idx_kv_offset, S.idx_gate_offset, S.idx_row_offset,
                          pool_.index, ws_.iv, ws_.ig, L.idx_comp.ape,  L.idx_comp.norm};
            ka.n_comp = 2;
        }
        cuda::IndexerArgs& ia = a.idx;
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
        cuda::AttnArgs& aa = a.attn;
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
        cuda::RowListArgs& ra = a.rows;
        cuda::SparseDecodeArgs& sa = a.sd;
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
            sa.n_heads = H;
            sa.max_rows = int(cfg_.sliding_window + (r == 0 ? 0 : csa ? int64_t(aa.topk) : opt_.max_context / r));
            sa.scale = aa.scale;
        }

        a.moe = moe_block_args(l);
    }
}

}  // namespace dsv4::cuda_runner_detail
