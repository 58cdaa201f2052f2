// Host side of the decode MoE ops: argument checks, variant choice for the expert GEMV (a forced
// variant from the run-time options, else the heuristic, else the first legal entry), launches.
#include "kernels/cuda/moe/moe.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/moe/moe_sm90.h"

namespace dsv4::cuda {
namespace {
Status wrap(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return Status::ok();
    return Status(StatusCode::kInternal, what + ": " + cudaGetErrorString(e));
}
// Warps per row tile splitting K (tensor-core entries; 1 = no split).
int k_slices(const KernelParams& p) { return p.split > 1 ? p.split : 1; }
const char* layout_name(MoeWeightLayout l) {
    return l == MoeWeightLayout::kPairRotated ? "pair-rotated" : "checkpoint";
}

bool legal(int i, const MoeExpertArgs& a) {
    const KernelParams p = sm90::moe_expert_params(i);
    if (sm90::moe_expert_layout(i) != a.layout) return false;  // would decode the codes wrongly
    if (sm90::moe_expert_is_mma(i)) {
        const int ks = k_slices(p);
        const int rows = p.warps / ks * (a.mode == MoeExpertMode::kGateUp ? 16 : 32);
        const size_t red = ks > 1 ? size_t(p.warps) * 32 * p.block_t * 4 : 0;  // moe_mma::red_bytes
        return a.K % (128 * ks) == 0 && a.N % rows == 0 && size_t(p.block_t) * (a.K + 8) * 2 + red <= 232448;
    }
    const int rows = a.mode == MoeExpertMode::kGateUp ? p.warps : 2 * p.warps;
    return a.K % 1024 == 0 && a.N % rows == 0 && size_t(p.block_t) * a.K * 2 <= 232448;
}
}  // namespace

bool moe_expert_variant_legal(int i, const MoeExpertArgs& a) {
    return i >= 0 && i < moe_expert_variant_count() && legal(i, a);
}

Status moe_route_launch(const MoeRouteArgs& a, cudaStream_t stream) {
    if (a.n_tokens <= 0) return Status::ok();
    if (a.n_experts < 1 || a.n_experts > 1024 || a.top_k < 1 || a.top_k > 8 || a.top_k > a.n_experts)
        return invalid_argument("moe_route: n_experts {} (1 .. 1024), top_k {} (1 .. min(8, n_experts))", a.n_experts,
                                a.top_k);
    if (!a.logits || !a.topk_ids || !a.topk_w || (a.tid2eid && !a.token_ids))
        return invalid_argument("moe_route: null pointer argument");
    return wrap(sm90::moe_route_run(a, stream), "moe_route");
}

Status moe_permute_launch(const MoePermuteArgs& a, cudaStream_t stream) {
    if (a.n_experts <= 0 || a.n_experts > 1024) return invalid_argument("moe_permute: n_experts {}", a.n_experts);
    if (!a.topk_ids || !a.topk_w || !a.expert_count || !a.expert_offset || !a.perm_token || !a.perm_dst || !a.perm_w)
        return invalid_argument("moe_permute: null pointer argument");
    return wrap(sm90::moe_permute_run(a, stream), "moe_permute");
}

Status moe_route_permute_launch(const MoeRouteArgs& r, const MoePermuteArgs& p, cudaStream_t stream) {
    if (r.topk_ids != p.topk_ids || r.topk_w != p.topk_w || r.n_tokens != p.n_tokens || r.top_k != p.top_k ||
        r.n_experts != p.n_experts)
        return invalid_argument("moe_route_permute: the permutation must read the routing's outputs");
    if (r.n_tokens > 0) {
        // The checks of moe_route_launch, without its launch.
        if (r.n_experts < 1 || r.n_experts > 1024 || r.top_k < 1 || r.top_k > 8 || r.top_k > r.n_experts)
            return invalid_argument("moe_route: n_experts {} (1 .. 1024), top_k {} (1 .. min(8, n_experts))",
                                    r.n_experts, r.top_k);
        if (!r.logits || !r.topk_ids || !r.topk_w || (r.tid2eid && !r.token_ids))
            return invalid_argument("moe_route: null pointer argument");
    }
    if (p.n_experts <= 0 || p.n_experts > 1024) return invalid_argument("moe_permute: n_experts {}", p.n_experts);
    if (!p.topk_ids || !p.topk_w || !p.expert_count || !p.expert_offset || !p.perm_token || !p.perm_dst || !p.perm_w)
        return invalid_argument("moe_permute: null pointer argument");
    return wrap(sm90::moe_route_permute_run(r, p, stream), "moe_route_permute");
}

Status moe_combine_launch(const MoeCombineArgs& a, cudaStream_t stream) {
    if (a.n_tokens <= 0) return Status::ok();
    if (!a.y || !a.out || a.d % 4 != 0) return invalid_argument("moe_combine: bad arguments (d {})", a.d);
    return wrap(sm90::moe_combine_run(a, stream), "moe_combine");
}

Status moe_weight_repack_launch(uint8_t* w, size_t bytes, cudaStream_t stream) {
    if (bytes % 4 != 0 || reinterpret_cast<uintptr_t>(w) % 4 != 0)
        return invalid_argument("moe_weight_repack: {} bytes at {} (need a 4-byte aligned multiple of 4)", bytes,
                                static_cast<const void*>(w));
    if (bytes == 0) return Status::ok();
    if (!w) return invalid_argument("moe_weight_repack: null pointer");
    return wrap(sm90::moe_weight_repack_run(reinterpret_cast<uint32_t*>(w), bytes / 4, stream), "moe_weight_repack");
}

int moe_expert_variant_count() { return sm90::moe_expert_count(); }
MoeWeightLayout moe_expert_variant_layout(int i) { return sm90::moe_expert_layout(i); }
KernelParams moe_expert_variant_params(int i) { return sm90::moe_expert_params(i); }
std::string moe_expert_variant_name(int i) {
    // bitdq: conversion-free dequant with swizzled x reads; bitdqc: natural x reads; bitdqp: x
    // re-paired in shared memory (docs/perf/ledger.md E6, E7); _mbN: register cap for N CTAs per SM.
    // bitdqpk: bitdqp on pair-rotated weights (docs/perf/ledger.md E17).
    static const char* const kDq[] = {"moe_mxfp4_mma", "moe_mxfp4_mma_bitdq", "moe_mxfp4_mma_bitdqc",
                                      "moe_mxfp4_mma_bitdqp", "moe_mxfp4_mma_bitdqpk"};
    std::string op = sm90::moe_expert_is_mma(i) ? kDq[sm90::moe_expert_dequant(i)] : "moe_mxfp4_gemv";
    if (sm90::moe_expert_min_blocks(i) > 1) op += "_mb" + std::to_string(sm90::moe_expert_min_blocks(i));
    // _ksN: N warps per row tile split K (docs/perf/ledger.md E11).
    if (sm90::moe_expert_params(i).split > 1) op += "_ks" + std::to_string(sm90::moe_expert_params(i).split);
    return variant_name(op, sm90::moe_expert_params(i));
}

int moe_expert_select_variant(const MoeExpertArgs& a) {
    if (a.variant >= 0) return a.variant;
    const int n = moe_expert_variant_count();
    // Heuristic (docs/perf/ledger.md E6): the conversion-free tensor-core kernel, 4 warps, 8 tokens
    // per pass, natural x-read order wins at every measured batch (1, 8, 64, 256: -35..-42% vs
    // the E5 choices). Batch 1 (docs/perf/ledger.md E11): when its grid, (N / rows per CTA) x the expert
    // rows of the grid, is at most ~1.5 CTAs per SM (192 at B=1 on the Flash shapes; 132 SMs on
    // the H200), the 2-way split-K form is 4% faster (51.4 vs 53.6 us); from 2 CTAs per SM on
    // (B >= 2) it loses 10-20%, and the 4-way split loses everywhere (+13% at B=1).
    const int grid_y = a.active_experts ? a.max_active : a.n_experts;
    const int64_t plain_ctas = int64_t(a.N / (4 * (a.mode == MoeExpertMode::kGateUp ? 16 : 32))) * grid_y;
    // Pair-rotated weights (docs/perf/ledger.md E17): bitdqpk at every batch, never split-K (at
    // batch 1 the plain form is 5% faster than its split, 47.1 vs 49.7 us).
    const bool pk = a.layout == MoeWeightLayout::kPairRotated;
    const int want_ks = !pk && plain_ctas <= 198 ? 2 : 1;
    const int want_dq = pk ? 4 : 2;
    for (int ks : {want_ks, 1})
        for (int i = 0; i < n; ++i) {
            const KernelParams p = sm90::moe_expert_params(i);
            if (sm90::moe_expert_dequant(i) == want_dq && sm90::moe_expert_min_blocks(i) == 1 && p.warps == 4 &&
                p.block_t == 8 && k_slices(p) == ks && legal(i, a))
                return i;
        }
    const bool many = a.n_rows >= 32;
    for (int i = 0; i < n; ++i) {
        const KernelParams p = sm90::moe_expert_params(i);
        const bool want = many ? (sm90::moe_expert_is_mma(i) && p.warps == 4 && p.block_t == 8)
                               : (!sm90::moe_expert_is_mma(i) && p.block_t == 2);
        if (want && legal(i, a)) return i;
    }
    for (int i = 0; i < n; ++i)
        if (legal(i, a)) return i;
    return -1;
}

Status moe_expert_launch(const MoeExpertArgs& a, cudaStream_t stream) {
    if (!a.x || !a.w1 || !a.w1_scale || !a.expert_count || !a.expert_offset || !a.out)
        return invalid_argument("moe_expert: null pointer argument");
    if (a.mode == MoeExpertMode::kGateUp && (!a.w3 || !a.w3_scale || !a.perm_token || !a.perm_w))
        return invalid_argument("moe_expert: gate-up needs w3, perm_token and perm_w");
    if (a.mode == MoeExpertMode::kDown && !a.perm_dst) return invalid_argument("moe_expert: down needs perm_dst");
    if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0) return invalid_argument("moe_expert: x must be 16-byte aligned");
    if (a.active_experts && (!a.n_active || a.max_active < 0 || a.max_active > a.n_experts))
        return invalid_argument("moe_expert: compact grid needs n_active and 0 <= max_active <= n_experts");
    const int v = moe_expert_select_variant(a);
    if (v >= 0 && v < moe_expert_variant_count() && sm90::moe_expert_layout(v) != a.layout)
        return invalid_argument("moe_expert: variant {} reads the {} code layout, the weights are {}",
                                moe_expert_variant_name(v), layout_name(sm90::moe_expert_layout(v)),
                                layout_name(a.layout));
    if (v < 0 || v >= moe_expert_variant_count() || !legal(v, a))
        return invalid_argument("moe_expert: no legal variant for N={} K={}", a.N, a.K);
    return wrap(sm90::moe_expert_run(a, v, stream), "moe_expert " + moe_expert_variant_name(v));
}

int moe_grouped_variant_count() { return sm90::moe_grouped_count(); }
MoeWeightLayout moe_grouped_variant_layout(int i) { return sm90::moe_grouped_shape(i).layout; }
bool moe_grouped_variant_is_wgmma(int i) { return sm90::moe_grouped_shape(i).wgmma; }
std::string moe_grouped_variant_name(int i) {
    const sm90::MoeGroupedShape s = sm90::moe_grouped_shape(i);
    if (s.wgmma)  // moe_wgmma_sm90.cu: 2 warpgroups x 2 m64 tiles, t = token rows per CTA
        return std::string(s.layout == MoeWeightLayout::kPairRotated ? "moe_wgmma_pk" : "moe_wgmma") + "_t" +
               std::to_string(s.mt) + "_s" + std::to_string(s.stages) + (s.warps == 4 ? "_wg1" : "") +
               (s.ws ? "_ws" : "") + (s.mixed ? "_mix" : "") + (s.balanced ? "_bal" : "") +
               (s.persistent ? "_pers" : "");
    std::string n = s.layout == MoeWeightLayout::kPairRotated ? "moe_gemm_pk" : "moe_gemm";
    n += "_w" + std::to_string(s.warps) + "_mt" + std::to_string(s.tiles) + "_t" + std::to_string(s.mt) + "_s" +
         std::to_string(s.stages);
    if (s.min_blocks > 1) n += "_mb" + std::to_string(s.min_blocks);
    return n;
}
bool moe_grouped_variant_legal(int i, const MoeExpertArgs& a) {
    if (i < 0 || i >= moe_grouped_variant_count()) return false;
    const sm90::MoeGroupedShape s = sm90::moe_grouped_shape(i);
    const int rows = s.warps * s.tiles * 16;
    const int cols = a.mode == MoeExpertMode::kGateUp ? rows / 2 : rows;
    // wgmma rows read the k-permuted x and stage the scales of all K (16-byte units of K / 32 bytes).
    if (s.wgmma != a.x_kperm || (s.wgmma && a.K % 512 != 0)) return false;
    // Mixed rows keep both work lists in the one tile_list of moe_grouped_max_tiles entries.
    if (s.mixed && sm90::moe_grouped_mixed_cap128(a.n_rows, a.n_experts) + std::min(a.n_experts, a.n_rows) >
                       moe_grouped_max_tiles(a.n_rows, a.n_experts))
        return false;
    return s.layout == a.layout && !a.x_f32 && a.K > 0 && a.K % 128 == 0 && a.N > 0 && a.N % cols == 0 &&
           a.n_experts >= 1 && a.n_experts <= 1024 && sm90::moe_grouped_smem_bytes(i, a.K) <= 232448;
}
constexpr double kPersistentMaxRowsPerExpert = 16.0;
int moe_grouped_select_variant(const MoeExpertArgs& a) {
    if (moe_grouped_variant_legal(a.variant, a)) return a.variant;
    // Token tile by the mean rows per expert (docs/perf/ledger.md E29, Flash shapes, one layer's
    // gate-up + down): 12 rows (512 tokens) 16-row tiles 2.12 ms vs 32-row 2.33 ms; 24 rows (1K)
    // 32-row 2.48 ms vs 16-row 3.76 ms; 96 rows (4K) 64-row, 2 CTAs per SM, 6.95 ms vs 32-row 7.92 ms.
    // wgmma (x_kperm): the balanced warp-specialised rows (each expert's rows on tiles of one width,
    // a multiple of 8) at every size measured (E44, 20-layer proxy prefill, one user, against the
    // mixed rows from 5 rows per expert and the plain 64-row rows below: 128 tokens 27.1 vs 30.9 ms,
    // 512 50.0 vs 64.7, 1K 68.6 vs 88.7, 4K 178.6 vs 178.5, 16K 823 vs 831).
    const double per_expert = double(a.n_rows) / std::max(1, a.n_experts);
    // Decode steps of at most kPersistentMaxRowsPerExpert rows per expert on average: the persistent
    // rows (ledger E56, 20-layer proxy at 8K: batch 256 50.8 -> 48.5 ms, 512 63.7 -> 62.3 ms; a
    // 512-token prefill step, also 12 rows per expert, 44.5 -> 47.9 ms, so not for prefill).
    if (a.x_kperm && a.decode_step && per_expert <= kPersistentMaxRowsPerExpert)
        for (int i = 0; i < moe_grouped_variant_count(); ++i)
            if (sm90::moe_grouped_shape(i).persistent && moe_grouped_variant_legal(i, a)) return i;
    if (a.x_kperm)
        for (int i = 0; i < moe_grouped_variant_count(); ++i)
            if (sm90::moe_grouped_shape(i).balanced && moe_grouped_variant_legal(i, a)) return i;
    const int want_mt = a.x_kperm ? (per_expert < 5 ? 64 : 128) : per_expert <= 16 ? 16 : per_expert <= 48 ? 32 : 64;
    for (int pass = 0; pass < 2; ++pass)
        for (int i = 0; i < moe_grouped_variant_count(); ++i)
            if ((pass == 1 || sm90::moe_grouped_shape(i).mt == want_mt) && moe_grouped_variant_legal(i, a)) return i;
    return -1;
}
int moe_grouped_max_tiles(int n_rows, int n_experts) { return sm90::moe_grouped_max_tiles(n_rows, n_experts, 16); }
Status moe_grouped_launch(const MoeExpertArgs& a, cudaStream_t stream) {
    if (!a.x || !a.w1 || !a.w1_scale || !a.expert_count || !a.expert_offset || !a.out || !a.tile_list || !a.n_tiles ||
        (a.mode == MoeExpertMode::kGateUp && (!a.w3 || !a.w3_scale || !a.perm_token || !a.perm_w)) ||
        (a.mode == MoeExpertMode::kDown && !a.perm_dst))
        return invalid_argument("moe_grouped: null pointer argument");
    const int v = moe_grouped_select_variant(a);
    if (v < 0)
        return invalid_argument("moe_grouped: no legal variant for N={} K={} ({} layout, x {})", a.N, a.K,
                                layout_name(a.layout), a.x_f32 ? "f32" : "bf16");
    return wrap(sm90::moe_grouped_run(a, v, stream), "moe_grouped");
}

}  // namespace dsv4::cuda
