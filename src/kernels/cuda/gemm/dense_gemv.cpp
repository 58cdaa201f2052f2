// Host side of the dense weight-streaming GEMV: checks, variant choice (DenseGemvArgs::variant, set
// from RuntimeOptions::gemv_variant by the caller, else the heuristic in dense_gemv_select_variant), launch.
#include "kernels/cuda/gemm/dense_gemv.h"

#include <cstdint>

#include "kernels/cuda/gemm/dense_gemm_kc_sm90.h"
#include "kernels/cuda/gemm/dense_gemv_sm90.h"

namespace dsv4::cuda {

int dense_gemv_variant_count() { return sm90::dense_gemv_count(); }
KernelParams dense_gemv_variant_params(int i) { return sm90::dense_gemv_params(i); }
std::string dense_gemv_variant_name(int i) {
    const sm90::GemvKind k = sm90::dense_gemv_kind(i);
    const char* op = k == sm90::GemvKind::kKChunk3   ? "dense_gemm_kc3"
                     : k == sm90::GemvKind::kKChunk2 ? "dense_gemm_kc2"
                     : k == sm90::GemvKind::kKChunk  ? "dense_gemm_kc"
                     : k == sm90::GemvKind::kMma     ? "dense_gemv_mma"
                                                     : "dense_gemv";
    return variant_name(op, sm90::dense_gemv_params(i));
}

bool dense_gemv_legal(int i, const DenseGemvArgs& a) {
    const KernelParams p = sm90::dense_gemv_params(i);
    const int rows_per_cta = p.warps * p.block_h;
    const sm90::GemvKind kind = sm90::dense_gemv_kind(i);
    if (kind == sm90::GemvKind::kKChunk)
        return a.N % rows_per_cta == 0 && a.K % 128 == 0 &&
               sm90::dense_gemm_kc_smem(p.warps, p.block_h, p.block_t, a.x_f32) <= 232448;
    if (kind == sm90::GemvKind::kKChunk2)
        return a.N % rows_per_cta == 0 && a.K % 128 == 0 &&
               sm90::dense_gemm_kc2_smem(p.warps, p.block_h, p.block_t, a.x_f32) <= 232448;
    if (kind == sm90::GemvKind::kKChunk3)
        return a.N % rows_per_cta == 0 && a.K % 128 == 0 && a.K <= 32768 && rows_per_cta <= 128 &&
               sm90::dense_gemm_kc3_smem(p.warps, p.block_h, p.block_t, p.stages, a.format == WeightFormat::kFp8Block,
                                         a.x_f32) <= 232448;
    if (kind == sm90::GemvKind::kMma) {
        const size_t smem = size_t(p.block_t) * (a.K + 8) * 2;
        return a.N % rows_per_cta == 0 && a.K % 128 == 0 && smem <= 232448;
    }
    const int step = a.format == WeightFormat::kFp8Block ? 512 : 256;
    const size_t smem = size_t(p.block_t) * a.K * 2;
    return a.N % rows_per_cta == 0 && a.K % step == 0 && smem <= 232448;
}

int dense_gemv_select_variant(const DenseGemvArgs& a) {
    if (a.variant >= 0) return a.variant;
    const int n = dense_gemv_variant_count();
    // Heuristic (docs/perf/ledger.md E5, E10, measured with f32 x on
    // wo_a, wo_b, shared w1/w2, wq_a, wq_b, LM head at T = 1..256): CUDA cores with the smallest
    // token chunk for n_tokens <= 4 (one weight pass at HBM speed; the K-chunked kernel costs
    // 1.1-1.6x more at T = 1). From 5 tokens on, the K-chunked tensor-core GEMM, whose time is
    // nearly flat from T = 1 to 8 and beat the older default at T = 8 on every shape but wq_b
    // (tie): 32 tokens per pass up to 64 tokens (two passes at T = 33..64 were as fast as one
    // 64-token pass on fp8: half the shared memory, more CTAs per SM), 64 per pass above; 16 rows
    // per warp (more CTAs, 127 registers) except for tall bf16 matrices (the LM head), where 32
    // rows per warp halve the x traffic from shared memory and win by 1.3-1.6x (and 64-token
    // passes from 33 tokens on: 526 vs 648 us at T = 64). Short matrices are kept
    // busy by the kernel's own split-K. The older kernels stay as fallbacks.
    // Session 4 (docs/perf/ledger.md E18, f32 x, alternating rounds), only for the measured
    // shape classes: fp8 with K >= 4096 and >= 2048 rows (wo_a, wo_b, shared w1) take the
    // cp.async-ring form (dense_gemm_kc3, 3 stages) at T <= 32, and at T <= 64 when >= 4096
    // rows (wo_b T = 64 55.2 vs 62.0 us, wo_a 59.3 vs 63.8; shared w1 T = 64 lost: 24.5 vs
    // 23.2); fp8 with K <= 1024 and >= 16384 rows (wq_b) take the bf16-staging form
    // (dense_gemm_kc2) at T <= 32 (22.8 vs 25.9 us at T = 32) and dense_gemm_kc3 above (42.0 vs
    // 48.7 at T = 64, 150.1 vs 164.3 at 256). Elsewhere (T > 64 on the K >= 4096 matrices, bf16,
    // short matrices) the E10 choice stays: the new forms tied or lost there.
    const int rows = a.groups * a.N;
    const auto kind_of = [](int i) { return sm90::dense_gemv_kind(i); };
    auto pick = [&](sm90::GemvKind kind, int warps, int block_t, int block_h, int stages = 0) {
        for (int i = 0; i < n; ++i) {
            const KernelParams p = sm90::dense_gemv_params(i);
            if (kind_of(i) == kind && p.warps == warps && p.block_t == block_t && p.block_h == block_h &&
                (stages == 0 || p.stages == stages) && dense_gemv_legal(i, a))
                return i;
        }
        return -1;
    };
    using K = sm90::GemvKind;
    int v = -1;
    if (a.n_tokens <= 4) {
        v = pick(K::kSimt, 8, a.n_tokens <= 1 ? 1 : 4, 2);
    } else {
        const bool tall_bf16 = a.format == WeightFormat::kBf16 && rows >= 8192;
        const bool fp8 = a.format == WeightFormat::kFp8Block;
        if (fp8 && a.K >= 4096 && rows >= 2048 && (a.n_tokens <= 32 || (a.n_tokens <= 64 && rows >= 4096)))
            v = pick(K::kKChunk3, 4, 32, 16, 3);
        else if (fp8 && a.K <= 1024 && rows >= 16384)
            v = a.n_tokens <= 32 ? pick(K::kKChunk2, 4, 32, 16) : pick(K::kKChunk3, 4, 32, 16, 3);
        if (v < 0) v = pick(K::kKChunk, 4, a.n_tokens <= (tall_bf16 ? 32 : 64) ? 32 : 64, tall_bf16 ? 32 : 16);
        if (v < 0) v = pick(K::kKChunk, 4, 32, 16);
        if (v < 0 && rows >= 4096)
            v = a.n_tokens > 8 && pick(K::kMma, 4, 16, 16) >= 0 ? pick(K::kMma, 4, 16, 16) : pick(K::kMma, 4, 8, 16);
    }
    if (v < 0) v = pick(K::kSimt, 8, 8, 2);
    if (v >= 0) return v;
    for (int i = 0; i < n; ++i)
        if (dense_gemv_legal(i, a)) return i;
    return -1;
}

Status dense_gemv_launch(const DenseGemvArgs& a, cudaStream_t stream) {
    if (a.n_tokens <= 0) return Status::ok();
    if (!a.x || !a.w || !a.y || (a.format == WeightFormat::kFp8Block && !a.w_scale))
        return invalid_argument("dense_gemv: null pointer argument");
    if (a.N <= 0 || a.K <= 0 || a.groups <= 0) return invalid_argument("dense_gemv: bad shape");
    if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0 || a.x_stride % 8 != 0)
        return invalid_argument("dense_gemv: x must be 16-byte aligned with x_stride % 8 == 0 (got {})", a.x_stride);
    const int v = dense_gemv_select_variant(a);
    if (v < 0 || v >= dense_gemv_variant_count() || !dense_gemv_legal(v, a))
        return invalid_argument("dense_gemv: no legal variant for N={} K={} (variant {})", a.N, a.K, v);
    const cudaError_t e = sm90::dense_gemv_run(a, v, stream);
    if (e != cudaSuccess)
        return Status(StatusCode::kInternal, "dense_gemv " + dense_gemv_variant_name(v) + ": " + cudaGetErrorString(e));
    return Status::ok();
}

}  // namespace dsv4::cuda
