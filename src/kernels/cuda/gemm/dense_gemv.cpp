// Host side of the dense weight-streaming GEMV: checks, variant choice (env DSV4_GEMV_VARIANT,
// else the smallest token chunk that covers n_tokens), launch.
#include "kernels/cuda/gemm/dense_gemv.h"

#include "kernels/cuda/gemm/dense_gemv_sm90.h"

namespace dsv4::cuda {

int dense_gemv_variant_count() { return sm90::dense_gemv_count(); }
KernelParams dense_gemv_variant_params(int i) { return sm90::dense_gemv_params(i); }
std::string dense_gemv_variant_name(int i) { return variant_name("dense_gemv", sm90::dense_gemv_params(i)); }

bool dense_gemv_legal(int i, const DenseGemvArgs& a) {
    const KernelParams p = sm90::dense_gemv_params(i);
    const int rows_per_cta = p.warps * p.block_h;
    const int step = a.format == WeightFormat::kFp8Block ? 512 : 256;
    const size_t smem = size_t(p.block_t) * a.K * 2;
    return a.N % rows_per_cta == 0 && a.K % step == 0 && smem <= 232448;
}

int dense_gemv_select_variant(const DenseGemvArgs& a) {
    if (a.variant >= 0) return a.variant;
    const int n = dense_gemv_variant_count();
    const int forced = variant_from_env("DSV4_GEMV_VARIANT", n, [](int i) { return dense_gemv_variant_name(i); });
    if (forced >= 0 && dense_gemv_legal(forced, a)) return forced;
    // Heuristic: default rows/warp 2, warps 8; the smallest token chunk >= min(n_tokens, 8).
    const int want = a.n_tokens <= 1 ? 1 : (a.n_tokens <= 4 ? 4 : 8);
    for (int i = 0; i < n; ++i) {
        const KernelParams p = sm90::dense_gemv_params(i);
        if (p.block_t == want && p.warps == 8 && p.block_h == 2 && dense_gemv_legal(i, a)) return i;
    }
    for (int i = 0; i < n; ++i)
        if (dense_gemv_legal(i, a)) return i;
    return -1;
}

Status dense_gemv_launch(const DenseGemvArgs& a, cudaStream_t stream) {
    if (a.n_tokens <= 0) return Status::ok();
    if (!a.x || !a.w || !a.y || (a.format == WeightFormat::kFp8Block && !a.w_scale))
        return invalid_argument("dense_gemv: null pointer argument");
    if (a.N <= 0 || a.K <= 0 || a.groups <= 0) return invalid_argument("dense_gemv: bad shape");
    const int v = dense_gemv_select_variant(a);
    if (v < 0 || v >= dense_gemv_variant_count() || !dense_gemv_legal(v, a))
        return invalid_argument("dense_gemv: no legal variant for N={} K={} (variant {})", a.N, a.K, v);
    const cudaError_t e = sm90::dense_gemv_run(a, v, stream);
    if (e != cudaSuccess)
        return Status(StatusCode::kInternal, "dense_gemv " + dense_gemv_variant_name(v) + ": " + cudaGetErrorString(e));
    return Status::ok();
}

}  // namespace dsv4::cuda
