// Manifold-constrained hyper-connections (mHC), spec §2.2: n residual streams per token, mixed
// around every sublayer by weights derived from the streams themselves, with the 4x4 "comb"
// matrix projected towards doubly-stochastic by Sinkhorn iterations.
#pragma once

#include <cstdint>

namespace dsv4::ref {

struct MhcParams {
    const float* fn = nullptr;     // [(2+n)*n, n*d] f32
    const float* base = nullptr;   // [(2+n)*n] f32
    const float* scale = nullptr;  // [3] f32
    int n = 4;                     // hc_mult
    int d = 0;                     // hidden size
    int sinkhorn_iters = 20;
    float hc_eps = 1e-6f;
    float rms_eps = 1e-6f;
};

// Per-token mixing coefficients.
struct MhcCoeffs {
    float pre[8];    // [n]
    float post[8];   // [n]
    float comb[64];  // [n, n] row-major, C[j][k]
};

// Computes pre/post/comb for one token's streams x[n*d] (stream-major). Spec §2.2 steps 1-5.
void mhc_coeffs(const float* x, const MhcParams& p, MhcCoeffs& out);
// u[d] = sum_j pre_j * x_j (step 6).
void mhc_collapse(const float* x, const MhcCoeffs& c, int n, int d, float* u);
// x'_k = post_k * y + sum_j C[j][k] * x_j, in place on x[n*d] (step 7).
void mhc_expand(float* x, const float* y, const MhcCoeffs& c, int n, int d);

// Final head collapse (no Sinkhorn, no post): h[d] = sum_j (sigmoid(m_j*scale + base_j) + eps) x_j.
// fn [n, n*d], base [n], scale [1].
void mhc_head(const float* x, const float* fn, const float* base, const float* scale, int n, int d, float hc_eps,
              float rms_eps, float* h);

}  // namespace dsv4::ref
