// cuda::linear, moe_experts and moe_combine: the dispatch of fast_path.h.
//
// MoE workspaces of the fast path live in the MoeArgs buffers the CUDA runner already sizes for
// the correct-first kernels (fixed addresses, no allocation: graph capture works):
//   ids / wts          -> route's topk_ids / topk_w [T, K]
//   counts [3E+1]      -> expert_count [E], expert_offset [E+1], active_experts [E]
//   perm / slot [T*K]  -> perm_token / perm_dst
//   h [T*K, I] f32     -> bf16 hidden [T*K, I] in its first half; perm_w [T*K] f32 and n_active
//                         [1] i32 right after it (fits: I >= 1024)
//   yp [T*K, d]        -> expert outputs in (t, k) order (perm_dst), read by the fast combine.
#include "kernels/cuda/ops/fast_path.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/gemm/dense_gemv.h"
#include "kernels/cuda/gemm/dense_gemv_sm90.h"
#include "kernels/cuda/moe/moe.h"
#include "kernels/cuda/moe/moe_sm90.h"
#include "kernels/cuda/ops/prefill_gemm.h"
#include "kernels/cuda/ops/simt.h"

namespace dsv4::cuda {

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// DenseGemvArgs for the linear, without pointers; groups == 0 when the layout does not map.
DenseGemvArgs gemv_args(const WeightDesc& w, int n_per_group, int64_t group_in, int64_t ldx, int T) {
    DenseGemvArgs g;
    g.format = w.fmt == WFmt::kBF16 ? WeightFormat::kBf16 : WeightFormat::kFp8Block;
    g.x_f32 = true;
    g.out_f32 = true;
    g.n_tokens = T;
    g.K = w.K;
    g.x_stride = ldx;
    if (n_per_group <= 0 || n_per_group == w.N) {
        g.N = w.N;
        g.groups = 1;
    } else if (w.N % n_per_group == 0 && group_in == w.K) {
        g.N = n_per_group;
        g.groups = w.N / n_per_group;
    } else {
        g.groups = 0;
    }
    return g;
}

bool mxfp4(const WeightDesc& w) { return w.fmt == WFmt::kMxfp4 || w.fmt == WFmt::kMxfp4PairRotated; }
MoeWeightLayout layout_of(const WeightDesc& w) {
    return w.fmt == WFmt::kMxfp4PairRotated ? MoeWeightLayout::kPairRotated : MoeWeightLayout::kCheckpoint;
}

bool stacked(const WeightDesc& w, int64_t N, int64_t K) {
    return mxfp4(w) && w.N == N && w.K == K && w.data && w.scale && w.expert_stride == N * K / 2 &&
           w.scale_expert_stride == N * K / 32;
}

MoeExpertArgs expert_args(const MoeArgs& a, bool gate_up) {
    MoeExpertArgs e;
    e.mode = gate_up ? MoeExpertMode::kGateUp : MoeExpertMode::kDown;
    e.n_experts = a.E;
    e.N = gate_up ? a.I : a.d;
    e.K = gate_up ? a.d : a.I;
    e.swiglu_limit = a.limit;
    e.n_rows = a.T * a.K;
    e.layout = layout_of(gate_up ? a.w1 : a.w2);  // w3 is w1's (moe_fast_decline)
    e.decode_step = a.decode_step;
    return e;
}

// Fast-path workspace views carved from the MoeArgs buffers (see the file comment).
struct MoeFastWs {
    int32_t *count, *offset, *active, *n_active;
    void* h;  // bf16 [T*K, I]
    float* perm_w;
};
MoeFastWs moe_ws(const MoeArgs& a) {
    MoeFastWs w;
    w.count = a.counts;
    w.offset = a.counts + a.E;
    w.active = a.counts + 2 * a.E + 1;
    w.h = a.h;
    const int64_t rows = int64_t(a.T) * a.K;
    w.perm_w = a.h + (rows * a.I + 1) / 2;
    w.n_active = reinterpret_cast<int32_t*>(w.perm_w + rows);
    return w;
}

// The grouped GEMM's extra workspace, after the fast path's in the same h buffer (f32 [T*K, I],
// of which the bf16 h uses half): n_tiles, the work list and x rounded to bf16 [T, d] (16-byte
// aligned). Null members when the buffer is too small (tiny top_k * I), then the GEMV runs.
struct MoeGroupedWs {
    int32_t *n_tiles = nullptr, *tile_list = nullptr;
    void* xb = nullptr;
};
MoeGroupedWs moe_grouped_ws(const MoeArgs& a, const MoeFastWs& f) {
    const int64_t rows = int64_t(a.T) * a.K;
    char* const end = reinterpret_cast<char*>(a.h + rows * a.I);
    char* p = reinterpret_cast<char*>(f.n_active + 1);
    MoeGroupedWs w;
    int32_t* n_tiles = reinterpret_cast<int32_t*>(p);
    int32_t* list = n_tiles + 2;  // [2] counts: the mixed rows keep two lists
    p = reinterpret_cast<char*>(list + moe_grouped_max_tiles(int(rows), a.ep_count > 0 ? a.ep_count : a.E));
    p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t(15));
    if (p + int64_t(a.T) * a.d * 2 > end) return w;
    w.n_tiles = n_tiles;
    w.tile_list = list;
    w.xb = p;
    return w;
}

// Whether the grouped GEMM runs its wgmma rows (x and h k-permuted): a forced variant decides,
// else grouped_wgmma from kWgmmaMinRowsPerExpert rows per expert where a wgmma row is legal for both
// gate-up and down. Measured (ledger E34, decode-bench, Flash shapes, one layer's gate-up + down):
// 24 rows per expert (1K tokens) mma.sync 32-row tiles 2.46 ms vs wgmma 64-row 2.54-2.64 ms; 48
// rows (2K) wgmma 2.48-2.74 ms vs mma.sync 3.58 ms; 96 rows (4K) 3.49-3.62 vs 6.95 ms. Since the
// balanced warp-specialised rows (E44, 20-layer proxy prefill, one user, forced against these
// defaults): 3 rows per expert (128 tokens) 27.1 vs 30.9 ms, 12 (512) 50.0 vs 64.7, 24 (1K) 68.6
// vs 88.7: the wgmma rows from the first row on.
constexpr int kWgmmaMinRowsPerExpert = 1;
// Mean rows per expert of the step: the routed experts' shape class in a tuning file.
int64_t mean_rows_per_expert(const MoeArgs& a) {
    const int64_t n_local = a.ep_count > 0 ? a.ep_count : a.E;
    return n_local > 0 ? (int64_t(a.T) * a.K + n_local - 1) / n_local : 0;
}
// The forced variant, else the tuning file's for this step's shape, else -1 (the heuristic).
int grouped_variant_of(const MoeArgs& a) {
    return a.grouped_variant >= 0 ? a.grouped_variant : shape_variant(a.grouped_rules, a.T, mean_rows_per_expert(a));
}
int expert_variant_of(const MoeArgs& a) {
    return a.moe_variant >= 0 ? a.moe_variant : shape_variant(a.moe_rules, a.T, mean_rows_per_expert(a));
}

bool moe_grouped_kperm(const MoeArgs& a) {
    const int forced = grouped_variant_of(a);
    if (forced >= 0 && forced < moe_grouped_variant_count()) return moe_grouped_variant_is_wgmma(forced);
    const int64_t n_local = a.ep_count > 0 ? a.ep_count : a.E;
    if (!a.grouped_wgmma || int64_t(a.T) * a.K < kWgmmaMinRowsPerExpert * n_local) return false;
    for (bool gate_up : {true, false}) {
        MoeExpertArgs e = expert_args(a, gate_up);
        e.x_f32 = false;
        e.x_kperm = true;
        e.n_experts = a.ep_count > 0 ? a.ep_count : a.E;
        if (moe_grouped_select_variant(e) < 0) return false;
    }
    return true;
}

}  // namespace

std::string linear_fast_decline(const WeightDesc& w, int n_per_group, int64_t group_in, int64_t ldx, int64_t ldy,
                                bool accumulate) {
    if (w.fmt != WFmt::kFp8E8M0 && w.fmt != WFmt::kBF16) return std::string("format ") + wfmt_name(w.fmt);
    if (accumulate) return "accumulating";
    if (ldy != w.N) return "strided output";
    if (ldx % 8 != 0) return "x row stride not a multiple of 8";
    const DenseGemvArgs g = gemv_args(w, n_per_group, group_in, ldx, 1);
    if (g.groups == 0) return "grouped layout does not map";
    // Decode-GEMV shapes only: the tensor-core variants are legal from K % 128 == 0 on, but small
    // matrices gain nothing and the tiny goldens must keep running the kernels they were checked with.
    if (w.K % 512 != 0) return "K % 512 != 0";
    if (dense_gemv_select_variant(g) < 0)
        return "no legal dense_gemv variant for N=" + std::to_string(g.N) + " K=" + std::to_string(g.K);
    return "";
}

std::string moe_fast_decline(const MoeArgs& a) {
    if (!stacked(a.w1, a.I, a.d) || !stacked(a.w3, a.I, a.d) || !stacked(a.w2, a.d, a.I))
        return std::string("experts ") + wfmt_name(a.w1.fmt) + " (fast path: stacked mxfp4)";
    if (a.w1.fmt != a.w3.fmt) return "w1 and w3 in different code layouts";
    if (a.E < 1 || a.E > 1024 || a.K < 1 || a.K > 8 || a.K > a.E) return "E/top_k out of range";
    if (a.tid2eid && !a.tokens) return "hash routing without token ids";
    if (a.d % 512 != 0 || a.I % 512 != 0) return "d or I not a multiple of 512";
    for (bool gate_up : {true, false}) {
        MoeExpertArgs e = expert_args(a, gate_up);
        e.n_rows = 1;
        if (moe_expert_select_variant(e) < 0)
            return "no legal expert variant for N=" + std::to_string(e.N) + " K=" + std::to_string(e.K);
    }
    return "";
}

std::string moe_grouped_decline(const MoeArgs& a) {
    const std::string fast = moe_fast_decline(a);
    if (!fast.empty()) return fast;
    if (!a.fast) return "fast kernels off";
    if (a.grouped_min_tokens <= 0 || a.T < a.grouped_min_tokens) return "fewer tokens than grouped_min_tokens";
    if (!moe_grouped_ws(a, moe_ws(a)).xb) return "h workspace too small for the grouped GEMM's";
    const bool kperm = moe_grouped_kperm(a);
    for (bool gate_up : {true, false}) {
        MoeExpertArgs e = expert_args(a, gate_up);
        e.x_f32 = false;
        e.x_kperm = kperm;
        e.n_experts = a.ep_count > 0 ? a.ep_count : a.E;
        e.variant = grouped_variant_of(a);
        const int v = moe_grouped_select_variant(e);
        if (v < 0) return "no legal grouped GEMM variant for N=" + std::to_string(e.N) + " K=" + std::to_string(e.K);
    }
    return "";
}

std::string linear_variant_refusal(const WeightDesc& w, int n_per_group, int64_t group_in, int64_t ldx, int T,
                                   int variant) {
    if (!w.fast || !linear_fast_decline(w, n_per_group, group_in, ldx, w.N, false).empty()) return "";
    const DenseGemvArgs g = gemv_args(w, n_per_group, group_in, ldx, T);
    if (variant < 0 || variant >= dense_gemv_variant_count()) return "no such dense_gemv variant";
    if (!dense_gemv_legal(variant, g))
        return "not legal for N=" + std::to_string(g.N) + " K=" + std::to_string(g.K) + " (" +
               std::to_string(g.groups) + " groups) at " + std::to_string(T) + " tokens";
    return "";
}

std::string moe_variant_refusal(const MoeArgs& a, int variant, bool grouped) {
    if (!moe_fast_decline(a).empty()) return "";  // the correct-first kernels: no variant applies
    const int count = grouped ? moe_grouped_variant_count() : moe_expert_variant_count();
    if (variant < 0 || variant >= count) return "no such variant";
    for (bool gate_up : {true, false}) {
        MoeExpertArgs e = expert_args(a, gate_up);
        e.n_experts = a.ep_count > 0 ? a.ep_count : a.E;
        bool ok = false;
        if (grouped) {
            e.x_f32 = false;
            e.x_kperm = moe_grouped_variant_is_wgmma(variant);
            ok = moe_grouped_variant_legal(variant, e);
        } else {
            e.x_f32 = gate_up;
            ok = moe_expert_variant_legal(variant, e);
        }
        if (!ok)
            return std::string("not legal for the ") + (gate_up ? "gate-up" : "down") +
                   " half (N=" + std::to_string(e.N) + " K=" + std::to_string(e.K) + ", " + std::to_string(e.n_rows) +
                   " rows, layout " + (e.layout == MoeWeightLayout::kPairRotated ? "pair-rotated" : "checkpoint") + ")";
    }
    return "";
}

bool linear_reads_only_bf16(const WeightDesc& w, int n_per_group, int64_t group_in, int64_t ldx, int64_t ldy, int T) {
    // The first branch of linear() below.
    return T > 0 && w.N > 0 && w.fast && w.gemm &&
           *prefill_gemm_decline(*w.gemm, w, n_per_group, group_in, ldx, ldy, false, T) == '\0';
}

cudaError_t linear_bf16_out(const WeightDesc& w, const void* x_bf16, int64_t ldx, void* y_bf16, int T,
                            cudaStream_t st) {
    if (T <= 0 || w.N <= 0) return cudaSuccess;
    if (!x_bf16 || !y_bf16 || !aligned16(x_bf16) || !linear_reads_only_bf16(w, w.N, 0, ldx, w.N, T))
        return cudaErrorInvalidValue;
    // x f32 is never read on this path (linear_reads_only_bf16); x_bf16 stands in for its pointer.
    return prefill_gemm_linear(*w.gemm, w, static_cast<const float*>(x_bf16), x_bf16, ldx, w.N, 0, nullptr, w.N, T, st,
                               y_bf16);
}

cudaError_t linear(const WeightDesc& w, int expert, const float* x, int64_t ldx, int n_per_group, int64_t group_in,
                   float* y, int64_t ldy, int T, bool accumulate, cudaStream_t st, const void* x_bf16) {
    if (T <= 0 || w.N <= 0) return cudaSuccess;
    if (w.fast && w.gemm && aligned16(x) &&
        *prefill_gemm_decline(*w.gemm, w, n_per_group, group_in, ldx, ldy, accumulate, T) == '\0')
        return prefill_gemm_linear(*w.gemm, w, x, x_bf16 && aligned16(x_bf16) ? x_bf16 : nullptr, ldx, n_per_group,
                                   group_in, y, ldy, T, st);
    if (w.fast && aligned16(x) && linear_fast_decline(w, n_per_group, group_in, ldx, ldy, accumulate).empty()) {
        DenseGemvArgs g = gemv_args(w, n_per_group, group_in, ldx, T);
        const int64_t e = expert > 0 ? expert : 0;
        g.x = x;
        if (x_bf16 && aligned16(x_bf16)) {
            g.x = x_bf16;
            g.x_f32 = false;
        }
        g.w = static_cast<const uint8_t*>(w.data) + e * w.expert_stride;
        g.w_scale =
            w.fmt == WFmt::kFp8E8M0 ? static_cast<const uint8_t*>(w.scale) + e * w.scale_expert_stride : nullptr;
        g.y = y;
        const int forced = w.gemv_variant >= 0 ? w.gemv_variant : shape_variant(w.gemv_rules, T);
        if (forced >= 0 && forced < dense_gemv_variant_count() && dense_gemv_legal(forced, g)) g.variant = forced;
        const int v = dense_gemv_select_variant(g);
        if (v >= 0 && dense_gemv_legal(v, g)) return sm90::dense_gemv_run(g, v, st);
    }
    return linear_simt(w, expert, x, ldx, n_per_group, group_in, y, ldy, T, accumulate, st);
}

cudaError_t moe_experts(const MoeArgs& a, cudaStream_t st) {
    if (a.T <= 0) return cudaSuccess;
    if (!a.fast || !aligned16(a.x) || !moe_fast_decline(a).empty()) return moe_experts_simt(a, st);
    const MoeFastWs ws = moe_ws(a);
    MoeRouteArgs r;
    r.logits = a.logits;
    r.bias = a.tid2eid ? nullptr : a.bias;
    r.tid2eid = a.tid2eid;
    r.token_ids = a.tokens;
    r.topk_ids = a.ids;
    r.topk_w = a.wts;
    r.n_tokens = a.T;
    r.n_experts = a.E;
    r.top_k = a.K;
    r.route_scale = a.route_scale;
    r.norm_topk = a.norm_topk;
    const int n_local = a.ep_count > 0 ? a.ep_count : a.E;  // [ep2]
    MoePermuteArgs p;
    p.topk_ids = a.ids;
    p.topk_w = a.wts;
    p.expert_count = ws.count;
    p.expert_offset = ws.offset;
    p.perm_token = a.perm;
    p.perm_dst = a.slot;
    p.perm_w = ws.perm_w;
    p.active_experts = ws.active;
    p.n_active = ws.n_active;
    p.n_tokens = a.T;
    p.n_experts = n_local;  // [ep2]
    p.top_k = a.K;
    cudaError_t err = cudaSuccess;
    if (a.ep_count > 0) {
        // [ep2] Expert parallel: route, then other ranks' assignments leave the permutation (id -1,
        // which the permute kernel skips) and their expert-output rows (assignment order) are zeroed
        // for the combine; permutation and expert kernels then run over the ep_count local experts.
        if ((err = sm90::moe_route_run(r, st)) != cudaSuccess) return err;
        if ((err = moe_ep_localize(a.ids, a.T * a.K, a.ep_first, a.ep_count, -1, a.yp, a.d, st)) != cudaSuccess)
            return err;
        if ((err = sm90::moe_permute_run(p, st)) != cudaSuccess) return err;
    } else {
        // One fused kernel for small batches (T * K <= 128, E <= 256), else route then permute.
        if ((err = sm90::moe_route_permute_run(r, p, st)) != cudaSuccess) return err;
    }
    const MoeGroupedWs gw =
        a.grouped_min_tokens > 0 && a.T >= a.grouped_min_tokens ? moe_grouped_ws(a, ws) : MoeGroupedWs{};
    const bool kperm = gw.xb && moe_grouped_kperm(a);
    if (gw.xb) {
        err = kperm ? sm90::moe_x_kperm_run(a.x, int64_t(a.T) * a.d, gw.xb, st)
                    : round_to_bf16(a.x, int64_t(a.T) * a.d, gw.xb, st);
        if (err != cudaSuccess) return err;
    }
    for (bool gate_up : {true, false}) {
        MoeExpertArgs e = expert_args(a, gate_up);
        const WeightDesc& w = gate_up ? a.w1 : a.w2;
        e.x = gate_up ? static_cast<const void*>(a.x) : ws.h;
        e.x_f32 = gate_up;
        e.w1 = static_cast<const uint8_t*>(w.data);
        e.w1_scale = static_cast<const uint8_t*>(w.scale);
        if (gate_up) {
            e.w3 = static_cast<const uint8_t*>(a.w3.data);
            e.w3_scale = static_cast<const uint8_t*>(a.w3.scale);
        }
        e.expert_count = ws.count;
        e.expert_offset = ws.offset;
        e.perm_token = a.perm;
        e.perm_dst = a.slot;
        e.perm_w = ws.perm_w;
        e.active_experts = ws.active;
        e.n_active = ws.n_active;
        e.n_experts = n_local;  // [ep2]
        e.max_active = std::min(n_local, a.T * a.K);
        e.out = gate_up ? ws.h : static_cast<void*>(a.yp);
        if (gw.xb) {
            // Prefill-sized step: the grouped GEMM, bf16 x in both modes.
            if (gate_up) {
                e.x = gw.xb;
                e.x_f32 = false;
            }
            e.tile_list = gw.tile_list;
            e.n_tiles = gw.n_tiles;
            e.variant = grouped_variant_of(a);
            e.x_kperm = kperm;
            if (moe_grouped_select_variant(e) >= 0) {
                if (!moe_grouped_launch(e, st).is_ok()) return cudaErrorLaunchFailure;
                continue;
            }
            if (gate_up) {  // no legal grouped shape: the GEMV, on f32 x
                e.x = static_cast<const void*>(a.x);
                e.x_f32 = true;
            }
            e.variant = -1;
        }
        if (const int forced = expert_variant_of(a); forced >= 0 && moe_expert_variant_legal(forced, e))
            e.variant = forced;
        const int v = moe_expert_select_variant(e);
        if (v < 0) return cudaErrorInvalidValue;  // moe_fast_decline checked legality: not reached
        if ((err = sm90::moe_expert_run(e, v, st)) != cudaSuccess) return err;
    }
    return cudaSuccess;
}

cudaError_t moe_expert_weights_to_fast_layout(WeightDesc* w1, WeightDesc* w3, WeightDesc* w2, int n_experts,
                                              bool enabled, cudaStream_t st) {
    if (!enabled) return cudaSuccess;
    for (const WeightDesc* w : {w1, w3, w2})
        if (w->fmt != WFmt::kMxfp4 || w->K % 128 != 0 || !stacked(*w, w->N, w->K)) return cudaSuccess;
    for (WeightDesc* w : {w1, w3, w2}) {
        const Status s = moe_weight_repack_launch(static_cast<uint8_t*>(const_cast<void*>(w->data)),
                                                  size_t(n_experts) * size_t(w->expert_stride), st);
        if (!s.is_ok()) return cudaErrorInvalidValue;
        w->fmt = WFmt::kMxfp4PairRotated;
    }
    return cudaSuccess;
}

cudaError_t moe_combine(const MoeArgs& a, const float* shared, float* out, cudaStream_t st) {
    if (a.T <= 0) return cudaSuccess;
    // Same decision as moe_experts (same arguments), so yp is in the layout the experts wrote.
    if (!a.fast || !aligned16(a.x) || !moe_fast_decline(a).empty()) return moe_combine_simt(a, shared, out, st);
    MoeCombineArgs c;
    c.y = a.yp;
    c.shared = shared;
    c.out = out;
    c.f32 = true;
    c.n_tokens = a.T;
    c.top_k = a.K;
    c.d = a.d;
    return sm90::moe_combine_run(c, st);
}

}  // namespace dsv4::cuda
