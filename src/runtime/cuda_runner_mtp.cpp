// CudaRunner's MTP block (spec §2.11; see cuda_runner_impl.h, mtp_block): the draft model of speculative
// decoding (issue 24), one decoder block run after the main model over positions whose next token is
// known, through the same attention() and moe() as the decoder layers (block n_layers + m: compress
// ratio 0, its own window ring in the sequence's state, learned routing).
#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

Status CudaRunner::mtp_block(int m, int B, int T, int max_t, int R, float* streams, const int32_t* next) {
    if (m < 0 || m >= int(w_.mtp.size()))
        return error(StatusCode::kFailedPrecondition,
                     "MTP block {} asked; the runner holds {} (CudaRunnerOptions::mtp_blocks)", m, w_.mtp.size());
    const DevMtp& M = w_.mtp[size_t(m)];
    const int l = cfg_.n_layers + m, n = cfg_.hc_mult, d = cfg_.hidden_size;
    const float eps = float(cfg_.rms_norm_eps);
    cudaStream_t st = stream_;
    const cuda::StepPlan sp = step_plan(B);
    set_gemm_thresholds(max_t);
    // X[t, j] = e_proj enorm(E[next_t]) + h_proj hnorm(streams[t, j]), the reference's order of the sum.
    mark("mtp: embed + enorm + e_proj");
    DSV4_CU(cuda::embed(w_.embed, next, T, 1, ws_.y, st));
    DSV4_CU(cuda::norm_rope(ws_.y, d, ws_.xn, d, T, d, true, M.enorm, eps, nullptr, 0, ws_.pos, 1, false, st));
    DSV4_CU(cuda::linear(M.e_proj, -1, ws_.xn, d, 0, 0, ws_.ys, d, T, false, st));
    mark("mtp: hnorm + h_proj (hc_mult rows per token) + add");
    DSV4_CU(cuda::norm_rope(streams, d, streams, d, T * n, d, true, M.hnorm, eps, nullptr, 0, ws_.pos, n, false, st));
    DSV4_CU(cuda::linear(M.h_proj, -1, streams, d, 0, 0, ws_.X, d, T * n, false, st));
    DSV4_CU(cuda::add_broadcast_rows(ws_.X, ws_.ys, T, n, d, st));
    const int splits = cuda::attn_splits(*variant_, B, cfg_.n_heads, n_sms_);
    for (int site = 0; site < 2; ++site) {
        const cuda::MhcArgs ma = site_args(l, site);
        mark("mtp: mhc_pre");
        DSV4_CU(cuda::mhc_pre_mix(ws_.X, T, ma, st));
        DSV4_CU(cuda::mhc_pre_apply(ws_.X, T, ma, ws_.coeffs, ws_.xn, st));
        if (site == 0)
            DSV4_RETURN_IF_ERROR(attention(l, sp, T, max_t, splits));
        else
            DSV4_RETURN_IF_ERROR(moe(l, T));
        mark("mtp: mhc_post");
        DSV4_CU(cuda::mhc_post(ws_.X, ws_.y, ws_.coeffs, T, n, d, st));
    }
    mark("mtp: head");
    if (R > 0) DSV4_RETURN_IF_ERROR(lm_head(R, M.hc_head, M.norm));
    return Status::ok();
}

}  // namespace dsv4::cuda_runner_detail
