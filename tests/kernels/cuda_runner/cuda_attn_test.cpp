// Stateful CUDA ops against the CPU reference on a hand-built page pool: split-KV sink attention
// (every variant, several split counts; window + HCA-style all rows or CSA-style selected rows;
// first token, first compressed row, zero compressed rows, batch of 5, ring straddling pages,
// scattered page ids beyond 2^31 bytes: B03/B09), the indexer with exact tie-breaking top-k
// (B08), and mHC pre/post/head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "kernels/cuda/attention/attn_variants.h"
#include "kernels/cuda/ops/ops.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/mhc.h"
#include "kernels/ref/ops.h"
#include "runtime/cuda_runner.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"

namespace dsv4 {
namespace {

// A small paged world: B sequences at positions pos[s], ring [W, D] in 2 state pages, compressed
// rows (main D, index ID) in token pages, page ids scattered near the top of a large pool.
struct World {
    static constexpr int H = 8, D = 64, W = 16, R = 16, r = 4, ID = 32, IH = 4, topk = 4;
    static constexpr int64_t pe = 512, page_tokens = 16, n_pages = 1200000;  // 2.4 GB: offsets > 2^31 bytes
    static constexpr int64_t row_off = 0, idx_row_off = (page_tokens / r) * D;
    std::vector<int64_t> pos = {0, 3, 17, 70, 200};
    int B = 5;
    int pt_stride = 0;
    std::vector<int32_t> tables;
    std::vector<std::vector<float>> ring, comp, idx;  // per seq: [W*D], [n_c*D], [n_c*ID]
    float* pool = nullptr;
    cuda::PagePool pp;
    std::mt19937 g{5};

    float rnd(bool integer) {
        if (integer) return float(int(g() % 5) - 2);
        return std::normal_distribution<float>(0.f, 1.f)(g);
    }
    void put(int64_t page, int64_t off, const float* src, int64_t n) {
        ASSERT_EQ(cudaMemcpy(pool + page * pe + off, src, sizeof(float) * n, cudaMemcpyHostToDevice), cudaSuccess);
    }
    void build(bool integer_rows) {
        ASSERT_EQ(cudaMalloc(&pool, sizeof(float) * pe * n_pages), cudaSuccess);
        pp = {pool, pe, 2, page_tokens, {0, D, R, D}, {0, ID, 0, ID}};  // f32 rows
        pt_stride = int(2 + 200 / page_tokens + 2);
        tables.assign(size_t(B) * pt_stride, 0);
        int32_t next = int32_t(n_pages - 1);
        for (int s = 0; s < B; ++s) {
            const int64_t p = pos[s], n_c = (p + 1) / r;
            const int64_t n_tok_pages = p / page_tokens + 1;
            for (int64_t i = 0; i < 2 + n_tok_pages; ++i) tables[size_t(s) * pt_stride + i] = (next -= 7);
            const int32_t* t = &tables[size_t(s) * pt_stride];
            ring.emplace_back(size_t(W) * D);
            for (float& v : ring.back()) v = rnd(integer_rows);
            for (int64_t e = 0; e < W * D; ++e) put(t[e / pe], e % pe, &ring.back()[e], 1);
            comp.emplace_back(size_t(n_c) * D);
            idx.emplace_back(size_t(n_c) * ID);
            for (float& v : comp.back()) v = rnd(integer_rows);
            for (float& v : idx.back()) v = rnd(true);
            for (int64_t w = 0; w < n_c; ++w) {
                const int64_t page = t[2 + (w * r) / page_tokens], slot = ((w * r) % page_tokens) / r;
                put(page, row_off + slot * D, &comp.back()[w * D], D);
                put(page, idx_row_off + slot * ID, &idx.back()[w * ID], ID);
            }
        }
    }
    ~World() { cudaFree(pool); }
};

struct PlanBufs {
    cuda::StepPlan sp;
    std::vector<void*> ptrs;
    PlanBufs(const World& w) {
        std::vector<int32_t> tb(w.B), nt(w.B, 1), toks(w.B, 0), ps(w.B);
        for (int s = 0; s < w.B; ++s) tb[s] = s, ps[s] = int32_t(w.pos[s]);
        sp.n_seqs = w.B;
        sp.tok_begin = track(dev(tb));
        sp.n_tok = track(dev(nt));
        sp.start_pos = track(dev(w.pos));
        sp.page_table = track(dev(w.tables));
        sp.pt_stride = w.pt_stride;
        sp.tokens = track(dev(toks));
        sp.pos = track(dev(ps));
    }
    template <class T>
    T* track(T* p) {
        ptrs.push_back(p);
        return p;
    }
    ~PlanBufs() {
        for (void* p : ptrs) cudaFree(p);
    }
};

TEST(CudaOpsPaged, SplitKvAttentionEveryVariant) {
    SKIP_WITHOUT_GPU();
    World w;
    w.build(false);
    PlanBufs pb(w);
    const int H = World::H, D = World::D;
    std::vector<float> q(size_t(w.B) * H * D), sink(H);
    for (float& v : q) v = w.rnd(false);
    for (float& v : sink) v = w.rnd(false);
    sink[1] = -INFINITY;
    const auto rope = ref::make_rope_table(10000.0, World::R, false, 1, 1, 1, 1);
    // CSA selection: the last min(topk, n_c) rows in reverse order (any order the indexer gives).
    std::vector<int32_t> sel(size_t(w.B) * World::topk, 0), n_sel(w.B);
    for (int s = 0; s < w.B; ++s) {
        const int64_t n_c = (w.pos[s] + 1) / World::r;
        n_sel[s] = int32_t(std::min<int64_t>(World::topk, n_c));
        for (int i = 0; i < n_sel[s]; ++i) sel[size_t(s) * World::topk + i] = int32_t(n_c - 1 - i);
    }
    float *dq = dev(q), *dsink = dev(sink), *dfreq = dev(rope.inv_freq);
    int32_t *dsel = dev(sel), *dnsel = dev(n_sel);
    float *acc = nullptr, *ml = nullptr, *out = nullptr;
    ASSERT_EQ(cudaMalloc(&acc, sizeof(float) * w.B * H * 64 * D), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&ml, sizeof(float) * w.B * H * 64 * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out, sizeof(float) * w.B * H * D), cudaSuccess);
    double worst = 0;
    for (bool csa : {false, true}) {
        // Expected output per sequence.
        std::vector<float> want(size_t(w.B) * H * D);
        for (int s = 0; s < w.B; ++s) {
            const int64_t p = w.pos[s], n_c = (p + 1) / World::r;
            std::vector<const float*> rows;
            for (int64_t t = std::max<int64_t>(0, p - World::W + 1); t <= p; ++t)
                rows.push_back(&w.ring[s][(t % World::W) * D]);
            if (!csa)
                for (int64_t c = 0; c < n_c; ++c) rows.push_back(&w.comp[s][c * D]);
            else
                for (int i = 0; i < n_sel[s]; ++i)
                    rows.push_back(&w.comp[s][size_t(sel[size_t(s) * World::topk + i]) * D]);
            float* o = &want[size_t(s) * H * D];
            ref::sink_attention(&q[size_t(s) * H * D], rows.data(), int64_t(rows.size()), sink.data(), H, D,
                                1.0f / std::sqrt(float(D)), o);
            for (int h = 0; h < H; ++h) ref::apply_rope(o + h * D, D, rope, p, true);
        }
        // The table's rows: every variant at 1, 3 and its planned number of splits (rows above the
        // variant's max_splits are not legal).
        const auto& vars = cuda::attn_variants();
        auto splits_of = [&](int r) {
            const auto& v = vars[size_t(r / 3)];
            return r % 3 == 0 ? 1 : r % 3 == 1 ? 3 : cuda::attn_splits(v, w.B, H, 132);
        };
        VariantTable table{int(vars.size()) * 3,
                           [&](int r) {
                               return std::string(vars[size_t(r / 3)].name) + " splits " +
                                      std::to_string(splits_of(r)) + (csa ? " csa" : " hca");
                           },
                           [&](int r) { return splits_of(r) <= vars[size_t(r / 3)].max_splits; }};
        OpCase op;
        op.ref.assign(want.begin(), want.end());  // the f32 CPU reference (sink attention, inverse RoPE)
        op.tol = {INFINITY, 1e-5};
        op.poison = [&] { ASSERT_EQ(cudaMemset(out, 0xff, sizeof(float) * want.size()), cudaSuccess); };
        op.run = [&](int r) -> Status {
            cuda::AttnArgs a;
            a.t = 0, a.H = H, a.D = D, a.W = World::W, a.ratio = World::r, a.csa = csa;
            a.ring_off = 0, a.row_off = World::row_off, a.topk = World::topk, a.sel = dsel, a.n_sel = dnsel;
            a.q = dq, a.sink = dsink, a.inv_freq = dfreq, a.rope_dim = World::R;
            a.scale = 1.0f / std::sqrt(float(D));
            a.part_acc = acc, a.part_ml = ml, a.out = out;
            const cudaError_t e = cuda::attn_decode(pb.sp, w.pp, a, vars[size_t(r / 3)], splits_of(r), nullptr);
            return e == cudaSuccess ? Status::ok() : Status(StatusCode::kInternal, cudaGetErrorString(e));
        };
        op.read = [&] { return host(out, want.size()); };
        op.check = [&](int, const std::vector<float>& got) {
            for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
        };
        EXPECT_GT(check_variants(table, op), 0);
    }
    std::printf(
        "[op attention split-KV] %zu variants x splits {1,3,target} x {HCA,CSA}, B=5 (p 0,3,17,70,200): max |err| "
        "%.3g\n",
        cuda::attn_variants().size(), worst);
    cudaFree(dq), cudaFree(dsink), cudaFree(dfreq), cudaFree(dsel), cudaFree(dnsel), cudaFree(acc), cudaFree(ml),
        cudaFree(out);
}

TEST(CudaOpsPaged, IndexerTopkExactWithTies) {
    SKIP_WITHOUT_GPU();
    World w;
    w.build(true);
    PlanBufs pb(w);
    const int IH = World::IH, ID = World::ID, K = World::topk;
    std::vector<float> q(size_t(w.B) * IH * ID), hw(size_t(w.B) * IH);
    for (float& v : q) v = w.rnd(true);
    for (float& v : hw) v = (w.g() % 2) ? 0.5f : 1.0f;
    const int64_t max_rows = 64;
    float *dq = dev(q), *dw = dev(hw), *scores = nullptr;
    ASSERT_EQ(cudaMalloc(&scores, sizeof(float) * w.B * max_rows), cudaSuccess);
    int32_t *sel = nullptr, *n_sel = nullptr;
    ASSERT_EQ(cudaMalloc(&sel, sizeof(int32_t) * w.B * K), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&n_sel, sizeof(int32_t) * w.B), cudaSuccess);
    cuda::IndexerArgs a;
    a.t = 0, a.ratio = World::r, a.IH = IH, a.ID = ID, a.topk = K, a.idx_row_off = World::idx_row_off;
    a.q = dq, a.w = dw, a.scores = scores, a.max_rows = max_rows, a.sel = sel, a.n_sel = n_sel;
    ASSERT_EQ(cuda::indexer_topk(pb.sp, w.pp, a, nullptr), cudaSuccess);
    const auto gs = host(sel, size_t(w.B) * K);
    const auto gn = host(n_sel, size_t(w.B));
    int ties = 0;
    for (int s = 0; s < w.B; ++s) {
        const int64_t n_c = (w.pos[s] + 1) / World::r;
        std::vector<float> sc(static_cast<size_t>(n_c));
        for (int64_t c = 0; c < n_c; ++c) {
            double acc = 0;
            for (int h = 0; h < IH; ++h) {
                double dot = 0;
                for (int i = 0; i < ID; ++i) dot += double(q[(size_t(s) * IH + h) * ID + i]) * w.idx[s][c * ID + i];
                acc += double(hw[size_t(s) * IH + h]) * std::max(0.0, dot);
            }
            sc[c] = float(acc);
        }
        for (int64_t i = 1; i < n_c; ++i) ties += std::count(sc.begin(), sc.begin() + i, sc[i]) > 0;
        const auto want = ref::index_select(sc, K);
        ASSERT_EQ(gn[s], int32_t(want.size())) << "seq " << s;
        EXPECT_EQ(std::vector<int32_t>(gs.begin() + s * K, gs.begin() + s * K + gn[s]), want) << "seq " << s;
    }
    std::printf("[op indexer top-k] B=5 (n_c 0..50), %d tied scores: selections identical to the CPU\n", ties);
    cudaFree(dq), cudaFree(dw), cudaFree(scores), cudaFree(sel), cudaFree(n_sel);
}

// k draws of nd(g) scaled by s (one generator and distribution per test, so the draws continue
// from call to call).
std::vector<float> randn(std::mt19937& g, std::normal_distribution<float>& nd, size_t k, float s) {
    std::vector<float> v(k);
    for (float& x : v) x = nd(g) * s;
    return v;
}

// d = 96: 2 chunks; d = 1000: n d = 4000 splits into 16 chunks of 256 (the last partial); d = 98:
// not a multiple of 4, so mhc_kernel reads x and the norm weight from global memory. T > 8: chunks
// of 512 run as token groups (mhc_mix_tokens_kernel: 16 tokens per CTA, the last group partial and
// odd), the head over 11 of the T rows.
void check_mhc(int d, int T = 5) {
    const int n = 4, mix = (2 + n) * n;
    std::mt19937 g(9);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto rv = [&](size_t k, float s) { return randn(g, nd, k, s); };
    const auto X = rv(size_t(T) * n * d, 1.f), fn = rv(size_t(mix) * n * d, 0.05f), base = rv(mix, 0.5f);
    const auto y = rv(size_t(T) * d, 1.f), norm = rv(d, 1.f), hfn = rv(size_t(n) * n * d, 0.05f), hbase = rv(n, 0.5f);
    const std::vector<float> scale = {0.7f, 1.1f, 0.9f}, hscale = {0.8f};
    float *dX = dev(X), *dfn = dev(fn), *dbase = dev(base), *dscale = dev(scale), *dnorm = dev(norm), *dy = dev(y);
    float *dhfn = dev(hfn), *dhbase = dev(hbase), *dhscale = dev(hscale), *coeffs = nullptr, *xn = nullptr,
          *hn = nullptr;
    ASSERT_EQ(cudaMalloc(&coeffs, sizeof(float) * T * 24), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&xn, sizeof(float) * T * d), cudaSuccess);
    std::vector<int32_t> rows = {4, 0, 2};
    if (T > 8) {
        rows.clear();
        for (int r = 0; r < 11; ++r) rows.push_back(int32_t((7 * r + 3) % T));
    }
    const int R = int(rows.size());
    ASSERT_EQ(cudaMalloc(&hn, sizeof(float) * R * d), cudaSuccess);
    // The forms: one CTA per token; the dot products over (token, mix) CTAs (workspace of T
    // rows); over (token, chunk) CTAs (workspace of 32 T rows: chunks of 256 at T <= 8); over 3 wider
    // chunks per token (workspace of 3 T rows, as a prefill step with a short workspace); and with
    // workspaces of 43 T rows (a room that does not divide the row: prefill halves its wish instead)
    // and 64 T rows (prefill below 2048 tokens: 64 chunks of 256).
    double* dmix = nullptr;
    ASSERT_EQ(cudaMalloc(&dmix, sizeof(double) * 64 * T * (mix + 1)), cudaSuccess);
    int32_t* drows = dev(rows);
    for (int use_ws = 0; use_ws < 6; ++use_ws) {
        static const char* const kForms[] = {"one CTA per token", "mix workspace",           "chunked mix workspace",
                                             "3 wide chunks",     "43 chunk rows per token", "64 chunk rows per token"};
        SCOPED_TRACE(kForms[use_ws]);
        const int64_t ws_rows = use_ws == 2   ? 32 * T
                                : use_ws == 3 ? 3 * T
                                : use_ws == 4 ? 43 * T
                                : use_ws == 5 ? 64 * T
                                              : T;
        ASSERT_EQ(cudaMemcpy(dX, X.data(), sizeof(float) * X.size(), cudaMemcpyHostToDevice), cudaSuccess);
        const cuda::MhcArgs a{dfn, dbase, dscale, dnorm, n, d, 20, 1e-6f, 1e-6f, use_ws ? dmix : nullptr, ws_rows};
        // Chunks of 256 elements up to 8 tokens, 512 above; from 1024 tokens 256, 512 from 2048 and
        // 1024 from 4096 (about 256 CTAs of the FP64 tensor-core form); as many as the workspace holds
        // (32 or 3 per token).
        const int chunk = T <= 8 ? 256 : T < 1024 ? 512 : T < 2048 ? 256 : T < 4096 ? 512 : 1024;
        const int want = (n * d + chunk - 1) / chunk;
        auto expect_chunks = [&](int room) {
            int w = want;
            if (T >= 1024)
                while (w > room && w % 2 == 0) w /= 2;
            const int c = std::min(w, room);
            return c < 2 ? 1 : c;
        };
        if (use_ws >= 2) {
            EXPECT_EQ(cuda::mhc_mix_chunks(T, a), expect_chunks(int(ws_rows / T)));
        }
        ASSERT_EQ(cuda::mhc_pre(dX, T, a, coeffs, xn, nullptr), cudaSuccess);
        const auto gxn = host(xn, size_t(T) * d);
        ASSERT_EQ(cuda::mhc_post(dX, dy, coeffs, T, n, d, nullptr), cudaSuccess);
        const auto gX = host(dX, X.size());
        const cuda::MhcArgs ha{dhfn, dhbase, dhscale, dnorm, n, d, 0, 1e-6f, 1e-6f, use_ws ? dmix : nullptr, ws_rows};
        ASSERT_EQ(cuda::mhc_head(dX, drows, R, ha, hn, nullptr), cudaSuccess);
        const auto ghn = host(hn, size_t(R) * d);
        double e_pre = 0, e_post = 0, e_head = 0;
        std::vector<float> Xc = X;
        const ref::MhcParams mp{fn.data(), base.data(), scale.data(), n, d, 20, 1e-6f, 1e-6f};
        for (int t = 0; t < T; ++t) {
            ref::MhcCoeffs c;
            ref::mhc_coeffs(&Xc[size_t(t) * n * d], mp, c);
            std::vector<float> u(d), want(d);
            ref::mhc_collapse(&Xc[size_t(t) * n * d], c, n, d, u.data());
            ref::rms_norm(u.data(), norm.data(), want.data(), 1, d, 1e-6f);
            for (int i = 0; i < d; ++i) e_pre = std::max(e_pre, double(std::fabs(want[i] - gxn[size_t(t) * d + i])));
            ref::mhc_expand(&Xc[size_t(t) * n * d], &y[size_t(t) * d], c, n, d);
        }
        for (size_t i = 0; i < X.size(); ++i) e_post = std::max(e_post, double(std::fabs(Xc[i] - gX[i])));
        for (int r = 0; r < R; ++r) {
            std::vector<float> h(d), want(d);
            ref::mhc_head(&Xc[size_t(rows[r]) * n * d], hfn.data(), hbase.data(), hscale.data(), n, d, 1e-6f, 1e-6f,
                          h.data());
            ref::rms_norm(h.data(), norm.data(), want.data(), 1, d, 1e-6f);
            for (int i = 0; i < d; ++i) e_head = std::max(e_head, double(std::fabs(want[i] - ghn[size_t(r) * d + i])));
        }
        std::printf("[op mhc d=%d T=%d%s] pre+norm max |err| %.3g, post %.3g, head+norm %.3g\n", d, T,
                    use_ws == 1   ? " mix-ws"
                    : use_ws == 2 ? " mix-ws chunked"
                    : use_ws == 3 ? " mix-ws 3 chunks"
                                  : "",
                    e_pre, e_post, e_head);
        EXPECT_LT(e_pre, 1e-4);
        EXPECT_LT(e_post, 1e-4);
        EXPECT_LT(e_head, 1e-4);
    }
    cudaFree(dmix);
    for (void* p : {(void*)dX, (void*)dfn, (void*)dbase, (void*)dscale, (void*)dnorm, (void*)dy, (void*)dhfn,
                    (void*)dhbase, (void*)dhscale, (void*)coeffs, (void*)xn, (void*)hn, (void*)drows})
        cudaFree(p);
}

// mhc_post_mix (expand fused with the next site's mixing dots) against mhc_post then mhc_pre_mix:
// X identical bit for bit, the next site's xn and coefficients within double-rounding noise.
void check_mhc_post_mix(int d, int T) {
    const int n = 4, mix = (2 + n) * n;
    std::mt19937 g(17 + d + T);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto rv = [&](size_t k, float s) { return randn(g, nd, k, s); };
    const auto X = rv(size_t(T) * n * d, 1.f), fn = rv(size_t(mix) * n * d, 0.05f), base = rv(mix, 0.5f);
    const auto y = rv(size_t(T) * d, 1.f), norm = rv(d, 1.f), fn2 = rv(size_t(mix) * n * d, 0.05f);
    const std::vector<float> scale = {0.7f, 1.1f, 0.9f};
    float *dX = dev(X), *dfn = dev(fn), *dfn2 = dev(fn2), *dbase = dev(base), *dscale = dev(scale), *dnorm = dev(norm),
          *dy = dev(y), *coeffs = nullptr, *xn = nullptr;
    double* dmix = nullptr;
    ASSERT_EQ(cudaMalloc(&coeffs, sizeof(float) * T * 24), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&xn, sizeof(float) * T * d), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dmix, sizeof(double) * 64 * T * (mix + 1)), cudaSuccess);
    const cuda::MhcArgs a{dfn, dbase, dscale, dnorm, n, d, 20, 1e-6f, 1e-6f, dmix, 64 * T};
    const cuda::MhcArgs next{dfn2, dbase, dscale, dnorm, n, d, 20, 1e-6f, 1e-6f, dmix, 64 * T};
    ASSERT_TRUE(cuda::mhc_post_mix_fusable(T, next));
    std::vector<float> gX[2], gxn[2], gc[2];
    for (int fused = 0; fused < 2; ++fused) {
        ASSERT_EQ(cudaMemcpy(dX, X.data(), sizeof(float) * X.size(), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cuda::mhc_pre(dX, T, a, coeffs, xn, nullptr), cudaSuccess);
        if (fused) {
            ASSERT_EQ(cuda::mhc_post_mix(dX, dy, coeffs, T, next, nullptr), cudaSuccess);
        } else {
            ASSERT_EQ(cuda::mhc_post(dX, dy, coeffs, T, n, d, nullptr), cudaSuccess);
            ASSERT_EQ(cuda::mhc_pre_mix(dX, T, next, nullptr), cudaSuccess);
        }
        ASSERT_EQ(cuda::mhc_pre_apply(dX, T, next, coeffs, xn, nullptr), cudaSuccess);
        gX[fused] = host(dX, X.size()), gxn[fused] = host(xn, size_t(T) * d), gc[fused] = host(coeffs, size_t(T) * 24);
    }
    EXPECT_EQ(gX[0], gX[1]);
    double e_xn = 0, e_c = 0;
    for (size_t i = 0; i < gxn[0].size(); ++i) e_xn = std::max(e_xn, double(std::fabs(gxn[0][i] - gxn[1][i])));
    for (size_t i = 0; i < gc[0].size(); ++i) e_c = std::max(e_c, double(std::fabs(gc[0][i] - gc[1][i])));
    std::printf("[op mhc post+mix fused d=%d T=%d] X identical, next xn max |diff| %.3g, coefficients %.3g\n", d, T,
                e_xn, e_c);
    EXPECT_LT(e_xn, 1e-5);
    EXPECT_LT(e_c, 1e-6);
    for (void* p : {(void*)dX, (void*)dfn, (void*)dfn2, (void*)dbase, (void*)dscale, (void*)dnorm, (void*)dy,
                    (void*)coeffs, (void*)xn, (void*)dmix})
        cudaFree(p);
}

TEST(CudaOps, MhcPostMixFused) {
    SKIP_WITHOUT_GPU();
    check_mhc_post_mix(1024, 5);  // 16 chunks of 64 features x 4 streams
    check_mhc_post_mix(4096, 1);  // the Flash width at batch 1: 64 chunks
    check_mhc_post_mix(4096, 8);
    const cuda::MhcArgs wide{nullptr, nullptr, nullptr, nullptr, 4, 1000, 20, 1e-6f, 1e-6f, nullptr, 0};
    EXPECT_FALSE(cuda::mhc_post_mix_fusable(5, wide));  // no workspace
}

// The collapse's three forms give the same bits for a token: prefetched into registers (T > 512,
// d = 4096), staged in shared memory (T <= 512) and read from global memory (X not 16-byte aligned).
// Why it matters: a prompt's tokens must not change with the chunking of its prefill.
TEST(CudaOps, MhcCollapseFormsBitIdentical) {
    SKIP_WITHOUT_GPU();
    const int n = 4, d = 4096, mix = (2 + n) * n, T = 600, Ts = 8;
    std::mt19937 g(23);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto rv = [&](size_t k, float s) { return randn(g, nd, k, s); };
    const auto X = rv(size_t(T) * n * d, 1.f), fn = rv(size_t(mix) * n * d, 0.05f), base = rv(mix, 0.5f);
    const auto norm = rv(d, 1.f);
    const std::vector<float> scale = {0.7f, 1.1f, 0.9f};
    std::vector<float> Xpad(X.size() + 1);
    std::copy(X.begin(), X.end(), Xpad.begin() + 1);
    float *dX = dev(X), *dXpad = dev(Xpad), *dfn = dev(fn), *dbase = dev(base), *dscale = dev(scale),
          *dnorm = dev(norm);
    float *coeffs = nullptr, *xn = nullptr;
    ASSERT_EQ(cudaMalloc(&coeffs, sizeof(float) * T * 24), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&xn, sizeof(float) * T * d), cudaSuccess);
    // No mix workspace: the dot products are computed in the same kernel, identically for every T.
    const cuda::MhcArgs a{dfn, dbase, dscale, dnorm, n, d, 20, 1e-6f, 1e-6f, nullptr, 0};
    auto run = [&](const float* x, int t) {
        EXPECT_EQ(cuda::mhc_pre_apply(x, t, a, coeffs, xn, nullptr), cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return std::make_pair(host(coeffs, size_t(t) * 24), host(xn, size_t(t) * d));
    };
    const auto [c_pre, x_pre] = run(dX, T);         // prefetched
    const auto [c_stg, x_stg] = run(dX, Ts);        // staged
    const auto [c_glb, x_glb] = run(dXpad + 1, T);  // global loads
    auto same = [](const std::vector<float>& p, const std::vector<float>& q, size_t cnt) {
        return std::memcmp(p.data(), q.data(), cnt * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(c_pre, c_stg, size_t(Ts) * 24));
    EXPECT_TRUE(same(x_pre, x_stg, size_t(Ts) * d));
    EXPECT_TRUE(same(c_pre, c_glb, size_t(T) * 24));
    EXPECT_TRUE(same(x_pre, x_glb, size_t(T) * d));
    for (float* p : {dX, dXpad, dfn, dbase, dscale, dnorm, coeffs, xn}) cudaFree(p);
}

TEST(CudaOps, MhcPrePostHead) {
    SKIP_WITHOUT_GPU();
    check_mhc(96);        // x and the norm weight staged in shared memory
    check_mhc(1000);      // staged, 16 mixing chunks
    check_mhc(98);        // d % 4 != 0: read from global memory
    check_mhc(1000, 19);  // 8 chunks of 500 as token groups (16 + 3 tokens); 3 wide chunks: per-token form
    check_mhc(4096, 40);  // the Flash width: 32 chunks of 512, 3 token groups
    // Prefill-sized, FP64 tensor cores (5 token tiles, 76 tokens in the last): 64 chunks of 256 wanted;
    // rooms of 32 and 43 rows per token give 32 of 512, 64 rows the 64 wanted.
    check_mhc(4096, 1100);
}

}  // namespace
}  // namespace dsv4
