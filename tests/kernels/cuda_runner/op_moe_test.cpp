// Decode MoE ops against the fp64 references of spec §2.9 (kernels/ref/fp64.h): routing
// (sqrt-softplus scores, bias for selection only, NaN-safe top-k, hash routing), permutation, and the
// MXFP4 grouped expert GEMV (gate-up with SwiGLU clamp and routing weight, down) with the combine: every
// expert variant of the op's table, on the full and the compact grid, through check_variants, over a
// table of cases: batch 1, batch not a multiple of the token chunk, skewed routing (many rows per
// expert), scales across the subnormal and rare-exponent paths.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/mxfp4_pair_rotated.h"
#include "kernels/cuda/moe/moe.h"
#include "kernels/ref/fp64.h"
#include "tests/kernels/cuda_runner/op_test_util.h"

namespace dsv4::cuda::test {
namespace {

TEST(OpMoe, RouteScoresHashAndNaN) {
    SKIP_WITHOUT_GPU();
    std::mt19937 g(7);
    const int T = 37, E = 256, K = 6;
    std::vector<float> logits = randn_bf16(g, size_t(T) * E, 2.0f), bias = randn_bf16(g, E, 0.1f);
    for (int e = 0; e < E; e += 3) logits[5 * E + e] = NAN;  // token 5: many NaN logits
    for (int e = 0; e < E; ++e) logits[6 * E + e] = NAN;     // token 6: all NaN
    DevBuf<float> d_l(logits), d_b(bias), d_w(size_t(T) * K);
    DevBuf<int32_t> d_ids(size_t(T) * K);
    MoeRouteArgs a;
    a.logits = d_l.p;
    a.bias = d_b.p;
    a.topk_ids = d_ids.p;
    a.topk_w = d_w.p;
    a.n_tokens = T;
    ASSERT_TRUE(moe_route_launch(a, nullptr).is_ok());
    CUDA_OK(cudaDeviceSynchronize());
    const auto ids = d_ids.download();
    const auto w = d_w.download();
    for (int t = 0; t < T; ++t) {
        std::vector<int> rid;
        std::vector<float> rw;
        ref::moe_route_f64(&logits[size_t(t) * E], bias.data(), E, K, 1.5, rid, rw);
        for (int k = 0; k < K; ++k) {
            EXPECT_EQ(ids[t * K + k], rid[k]) << "t " << t << " k " << k;
            EXPECT_NEAR(w[t * K + k], rw[k], 1e-5 * std::max(1.0f, std::abs(rw[k]))) << "t " << t;
            EXPECT_TRUE(std::isfinite(w[t * K + k]));
        }
    }
    // Hash routing: ids come from tid2eid.
    std::vector<int32_t> tid2eid(100 * K), tok(T);
    for (auto& x : tid2eid) x = int32_t(g() % E);
    for (auto& x : tok) x = int32_t(g() % 100);
    DevBuf<int32_t> d_t2e(tid2eid), d_tok(tok);
    a.tid2eid = d_t2e.p;
    a.token_ids = d_tok.p;
    a.bias = nullptr;
    ASSERT_TRUE(moe_route_launch(a, nullptr).is_ok());
    CUDA_OK(cudaDeviceSynchronize());
    const auto hids = d_ids.download();
    for (int t = 0; t < T; ++t)
        for (int k = 0; k < K; ++k) EXPECT_EQ(hids[t * K + k], tid2eid[tok[t] * K + k]);
}

// Fused route + permute (small batches) and the two-kernel path beyond 128 rows: ids / weights vs
// the CPU routing, then the permutation: counts, offsets, active list, and every (t, k) row once
// at its expert with its weight. The fused kernel also orders each expert's rows by (t, k).
TEST(OpMoe, RoutePermuteFusedAndSplit) {
    SKIP_WITHOUT_GPU();
    std::mt19937 g(11);
    const int E = 256, K = 6;
    for (const int T : {1, 3, 8, 21, 22, 37}) {  // 21 * 6 = 126 rows: fused; 22 * 6 = 132: two kernels
        for (const bool hash : {false, true}) {
            SCOPED_TRACE("T " + std::to_string(T) + (hash ? " hash" : " score"));
            std::vector<float> logits = randn_bf16(g, size_t(T) * E, 2.0f), bias = randn_bf16(g, E, 0.1f);
            if (T > 2)
                for (int e = 0; e < E; e += 3) logits[2 * E + e] = NAN;  // token 2: many NaN logits
            std::vector<int32_t> tid2eid(100 * K), tok(T);
            for (int v = 0; v < 100; ++v) {
                std::vector<int> perm(E);
                std::iota(perm.begin(), perm.end(), 0);
                std::shuffle(perm.begin(), perm.end(), g);
                for (int k = 0; k < K; ++k) tid2eid[v * K + k] = perm[k];
            }
            for (auto& x : tok) x = int32_t(g() % 100);
            DevBuf<float> d_l(logits), d_b(bias), d_w(size_t(T) * K), d_pw(size_t(T) * K);
            DevBuf<int32_t> d_ids(size_t(T) * K), d_t2e(tid2eid), d_tok(tok), d_cnt(E), d_off(E + 1),
                d_ptok(size_t(T) * K), d_pdst(size_t(T) * K), d_act(E), d_nact(1);
            d_act.poison();
            MoeRouteArgs r;
            r.logits = d_l.p;
            r.bias = hash ? nullptr : d_b.p;
            r.tid2eid = hash ? d_t2e.p : nullptr;
            r.token_ids = d_tok.p;
            r.topk_ids = d_ids.p;
            r.topk_w = d_w.p;
            r.n_tokens = T;
            MoePermuteArgs p;
            p.topk_ids = d_ids.p;
            p.topk_w = d_w.p;
            p.expert_count = d_cnt.p;
            p.expert_offset = d_off.p;
            p.perm_token = d_ptok.p;
            p.perm_dst = d_pdst.p;
            p.perm_w = d_pw.p;
            p.active_experts = d_act.p;
            p.n_active = d_nact.p;
            p.n_tokens = T;
            const Status st = moe_route_permute_launch(r, p, nullptr);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            CUDA_OK(cudaDeviceSynchronize());
            const auto ids = d_ids.download(), cnt = d_cnt.download(), off = d_off.download(), ptok = d_ptok.download(),
                       pdst = d_pdst.download(), act = d_act.download(), nact = d_nact.download();
            const auto w = d_w.download(), pw = d_pw.download();
            for (int t = 0; t < T; ++t) {
                std::vector<int> rid;
                std::vector<float> rw;
                ref::moe_route_f64(&logits[size_t(t) * E], bias.data(), E, K, 1.5, rid, rw);
                for (int k = 0; k < K; ++k) {
                    if (hash) {
                        ASSERT_EQ(ids[t * K + k], tid2eid[tok[t] * K + k]) << "t " << t;
                    } else {
                        ASSERT_EQ(ids[t * K + k], rid[k]) << "t " << t << " k " << k;
                        EXPECT_NEAR(w[t * K + k], rw[k], 1e-5 * std::max(1.0f, std::abs(rw[k]))) << "t " << t;
                    }
                }
            }
            std::vector<int> hist(E, 0);
            for (int v : ids) ++hist[v];
            int acc = 0, n_act = 0;
            std::vector<int> seen(size_t(T) * K, 0);
            for (int e = 0; e < E; ++e) {
                ASSERT_EQ(cnt[e], hist[e]) << "e " << e;
                ASSERT_EQ(off[e], acc) << "e " << e;
                acc += hist[e];
                if (hist[e] > 0) {
                    ASSERT_EQ(act[n_act], e);
                    ++n_act;
                }
                for (int q = off[e]; q < off[e] + cnt[e]; ++q) {
                    ASSERT_EQ(ids[pdst[q]], e);
                    ASSERT_EQ(ptok[q], pdst[q] / K);
                    ASSERT_EQ(pw[q], w[pdst[q]]);
                    if (T * K <= 128 && q > off[e]) {
                        ASSERT_LT(pdst[q - 1], pdst[q]) << "fused: (t, k) order";
                    }
                    ++seen[pdst[q]];
                }
            }
            ASSERT_EQ(off[E], T * K);
            ASSERT_EQ(nact[0], n_act);
            for (int v : seen) ASSERT_EQ(v, 1);
        }
    }
}

struct MoeCase {
    const char* name;
    uint32_t seed;
    int T;
    bool skewed;
    int s_lo = 118, s_hi = 121;  // UE8M0 bytes of w1/w3 (w2: one higher); > 128 takes the rare
                                 // two-multiply path of the conversion-free (bitdq) dequant
};

// Full expert path: permute -> gate-up -> down -> combine (+ shared), vs CPU.
void run_expert_case(const MoeCase& c) {
    std::mt19937 g(c.seed);
    const int E = 32, K = 6, d = 2048, I = 1024;
    const float limit = 1.0f;  // small, so the clamp is exercised
    const int T = c.T;
    // Routing: distinct random experts (or the same 6 for every token when skewed).
    std::vector<int32_t> ids(size_t(T) * K);
    std::vector<float> w(size_t(T) * K);
    std::uniform_real_distribution<float> uw(0.1f, 0.5f);
    for (int t = 0; t < T; ++t) {
        std::vector<int> perm(E);
        std::iota(perm.begin(), perm.end(), 0);
        if (!c.skewed) std::shuffle(perm.begin(), perm.end(), g);
        for (int k = 0; k < K; ++k) {
            ids[t * K + k] = perm[k];
            w[t * K + k] = uw(g);
        }
    }
    std::vector<float> x = randn_bf16(g, size_t(T) * d);
    std::vector<float> shared = randn_bf16(g, size_t(T) * d, 0.1f);
    auto rnd_bytes = [&](size_t n, int lo, int hi) {
        std::vector<uint8_t> v(n);
        std::uniform_int_distribution<int> u(lo, hi);
        for (auto& b : v) b = uint8_t(u(g));
        return v;
    };
    std::vector<uint8_t> w1 = rnd_bytes(size_t(E) * I * d / 2, 0, 255), w3 = rnd_bytes(size_t(E) * I * d / 2, 0, 255);
    std::vector<uint8_t> s1 = rnd_bytes(size_t(E) * I * d / 32, c.s_lo, c.s_hi),
                         s3 = rnd_bytes(size_t(E) * I * d / 32, c.s_lo, c.s_hi);
    std::vector<uint8_t> w2 = rnd_bytes(size_t(E) * d * I / 2, 0, 255),
                         s2 = rnd_bytes(size_t(E) * d * I / 32, c.s_lo + 1, c.s_hi + 1);

    // CPU reference (bf16 rounding of h as in the reference: weight multiplied in before W2).
    // Dequantise each used expert once.
    auto deq = [](const std::vector<uint8_t>& pk, const std::vector<uint8_t>& sc, int e, int N, int Kd) {
        std::vector<float> out(size_t(N) * Kd);
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < Kd; ++k) {
                const uint8_t byte = pk[(size_t(e) * N + n) * (Kd / 2) + k / 2];
                const uint8_t code = (k & 1) ? (byte >> 4) : (byte & 0xf);
                out[size_t(n) * Kd + k] =
                    fp4e2m1_to_f32(code) * ue8m0_to_f32(sc[(size_t(e) * N + n) * (Kd / 32) + k / 32]);
            }
        return out;
    };
    std::vector<std::vector<float>> W1(E), W3(E), W2(E);
    for (int v : ids)
        if (W1[v].empty()) {
            W1[v] = deq(w1, s1, v, I, d);
            W3[v] = deq(w3, s3, v, I, d);
            W2[v] = deq(w2, s2, v, d, I);
        }
    std::vector<double> ref(size_t(T) * d, 0.0);
    for (int t = 0; t < T; ++t) {
        for (int k = 0; k < K; ++k) {
            const int e = ids[t * K + k];
            ref::swiglu_expert_f64(&x[size_t(t) * d], W1[e].data(), W3[e].data(), W2[e].data(), d, I, limit,
                                   w[t * K + k], &ref[size_t(t) * d]);
        }
        for (int n = 0; n < d; ++n) ref[size_t(t) * d + n] += shared[size_t(t) * d + n];
    }
    DevBuf<int32_t> d_ids(ids), d_cnt(E), d_off(E + 1), d_ptok(size_t(T) * K), d_pdst(size_t(T) * K);
    DevBuf<float> d_w(w), d_pw(size_t(T) * K), d_y(size_t(T) * K * d);
    DevBuf<uint16_t> d_x(to_bf16(x)), d_sh(to_bf16(shared)), d_h(size_t(T) * K * I), d_out(size_t(T) * d);
    DevBuf<uint8_t> d_w1(w1), d_w3(w3), d_s1(s1), d_s3(s3), d_w2(w2), d_s2(s2);
    // The same codes repacked on the device into the pair-rotated layout (bitdqpk variants); the
    // device repack must match the host one word for word.
    DevBuf<uint8_t> d_w1p(w1), d_w3p(w3), d_w2p(w2);
    for (auto [buf, host] : {std::pair{&d_w1p, &w1}, std::pair{&d_w3p, &w3}, std::pair{&d_w2p, &w2}}) {
        ASSERT_TRUE(moe_weight_repack_launch(buf->p, buf->n, nullptr).is_ok());
        const std::vector<uint8_t> got = buf->download();
        for (size_t i = 0; i < host->size(); i += 4) {
            uint32_t wv, gv;
            std::memcpy(&wv, host->data() + i, 4);
            std::memcpy(&gv, got.data() + i, 4);
            ASSERT_EQ(gv, mxfp4_pk::repack_word(wv)) << "word " << i / 4;
        }
    }
    DevBuf<int32_t> d_act(E), d_nact(1);
    // The table's rows: every expert variant on the full grid, then on the compact (active-experts) grid.
    const int nv = moe_expert_variant_count();
    VariantTable table{
        2 * nv, [nv](int r) { return moe_expert_variant_name(r % nv) + (r >= nv ? " compact grid" : " full grid"); },
        nullptr};
    OpCase op;
    op.ref = std::move(ref);
    op.tol.rel_l2 = 1e-2;
    op.deterministic = false;  // not required of the expert path (not checked before either)
    op.poison = [&] {
        d_h.poison();
        d_y.poison();
        d_out.poison();
    };
    op.run = [&](int r) -> Status {
        const int v = r % nv;
        const bool compact = r >= nv;
        const MoeWeightLayout layout = moe_expert_variant_layout(v);
        const bool pk = layout == MoeWeightLayout::kPairRotated;
        MoePermuteArgs pa;
        pa.topk_ids = d_ids.p;
        pa.topk_w = d_w.p;
        pa.expert_count = d_cnt.p;
        pa.expert_offset = d_off.p;
        pa.perm_token = d_ptok.p;
        pa.perm_dst = d_pdst.p;
        pa.perm_w = d_pw.p;
        pa.n_tokens = T;
        pa.n_experts = E;
        pa.active_experts = compact ? d_act.p : nullptr;
        pa.n_active = compact ? d_nact.p : nullptr;
        DSV4_RETURN_IF_ERROR(moe_permute_launch(pa, nullptr));
        MoeExpertArgs gu;
        gu.mode = MoeExpertMode::kGateUp;
        gu.x = d_x.p;
        gu.w1 = pk ? d_w1p.p : d_w1.p;
        gu.w1_scale = d_s1.p;
        gu.w3 = pk ? d_w3p.p : d_w3.p;
        gu.w3_scale = d_s3.p;
        gu.layout = layout;
        gu.expert_count = d_cnt.p;
        gu.expert_offset = d_off.p;
        gu.perm_token = d_ptok.p;
        gu.perm_dst = d_pdst.p;
        gu.perm_w = d_pw.p;
        gu.out = d_h.p;
        gu.n_experts = E;
        gu.N = I;
        gu.K = d;
        gu.swiglu_limit = limit;
        gu.variant = v;
        if (compact) {
            gu.active_experts = d_act.p;
            gu.n_active = d_nact.p;
            gu.max_active = std::min(E, T * K);
        }
        DSV4_RETURN_IF_ERROR(moe_expert_launch(gu, nullptr));
        MoeExpertArgs dn = gu;
        dn.mode = MoeExpertMode::kDown;
        dn.x = d_h.p;
        dn.w1 = pk ? d_w2p.p : d_w2.p;
        dn.w1_scale = d_s2.p;
        dn.w3 = nullptr;
        dn.w3_scale = nullptr;
        dn.out = d_y.p;
        dn.N = d;
        dn.K = I;
        DSV4_RETURN_IF_ERROR(moe_expert_launch(dn, nullptr));
        MoeCombineArgs ca;
        ca.y = d_y.p;
        ca.shared = d_sh.p;
        ca.out = d_out.p;
        ca.n_tokens = T;
        ca.d = d;
        return moe_combine_launch(ca, nullptr);
    };
    op.read = [&] { return from_bf16(d_out.download()); };
    // Permutation invariants: every (t, k) row once, at its expert.
    op.check = [&](int, const std::vector<float>&) {
        const auto cnt = d_cnt.download(), off = d_off.download(), pdst = d_pdst.download();
        std::vector<int> hist(E, 0);
        for (int v : ids) ++hist[v];
        std::vector<int> seen(size_t(T) * K, 0);
        for (int e = 0; e < E; ++e) {
            ASSERT_EQ(cnt[e], hist[e]);
            for (int p = off[e]; p < off[e] + cnt[e]; ++p) {
                ASSERT_EQ(ids[pdst[p]], e);
                ++seen[pdst[p]];
            }
        }
        for (int s : seen) ASSERT_EQ(s, 1);
    };
    EXPECT_EQ(check_variants(table, op), 2 * nv);
}

// A variant only runs on the code layout it reads: forced mismatches are refused, and the
// heuristic picks within the layout of the weights.
TEST(OpMoe, ExpertLayoutMismatchRefused) {
    SKIP_WITHOUT_GPU();
    const int E = 4, N = 256, K = 1024, T = 1;
    DevBuf<uint8_t> w(size_t(E) * N * K / 2), sc(size_t(E) * N * K / 32);
    DevBuf<uint16_t> x(size_t(T) * K), h(size_t(T) * 6 * N);
    DevBuf<int32_t> cnt(std::vector<int32_t>(E, 0)), off(std::vector<int32_t>(E + 1, 0)), ptok(6), pdst(6);
    DevBuf<float> pw(6);
    MoeExpertArgs a;
    a.mode = MoeExpertMode::kGateUp;
    a.x = x.p;
    a.w1 = a.w3 = w.p;
    a.w1_scale = a.w3_scale = sc.p;
    a.expert_count = cnt.p;
    a.expert_offset = off.p;
    a.perm_token = ptok.p;
    a.perm_dst = pdst.p;
    a.perm_w = pw.p;
    a.out = h.p;
    a.n_experts = E;
    a.N = N;
    a.K = K;
    a.n_rows = 6;
    int n_pk = 0;
    for (MoeWeightLayout l : {MoeWeightLayout::kCheckpoint, MoeWeightLayout::kPairRotated}) {
        a.layout = l;
        a.variant = -1;
        const int chosen = moe_expert_select_variant(a);
        ASSERT_GE(chosen, 0);
        EXPECT_EQ(moe_expert_variant_layout(chosen), l) << moe_expert_variant_name(chosen);
        for (int v = 0; v < moe_expert_variant_count(); ++v) {
            a.variant = v;
            const Status st = moe_expert_launch(a, nullptr);
            if (l == MoeWeightLayout::kPairRotated && moe_expert_variant_layout(v) == l) ++n_pk;
            if (moe_expert_variant_layout(v) == l) {
                EXPECT_TRUE(st.is_ok()) << moe_expert_variant_name(v) << ": " << st.to_string();
            } else {
                EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << moe_expert_variant_name(v);
            }
        }
    }
    EXPECT_GE(n_pk, 1);
    CUDA_OK(cudaDeviceSynchronize());
}

class OpMoeExperts : public ::testing::TestWithParam<MoeCase> {};

TEST_P(OpMoeExperts, EveryVariantMatchesFp64) {
    SKIP_WITHOUT_GPU();
    run_expert_case(GetParam());
}

// {name, seed, T, skewed, scale bytes lo, hi}
const MoeCase kMoeCases[] = {
    {"batch1", 100, 1, false},
    {"T3", 150, 3, false},
    {"T8", 170, 8, false},
    {"T5", 200, 5, false},
    {"skewed_one_full_token_chunk", 250, 8, true},  // 8 rows on each of 6 experts
    {"skewed_chunk_loop_and_tail", 300, 11, true},  // 11 rows on each of 6 experts
    {"scales_subnormal_to_2e8", 400, 3, false, 0, 134},
};
INSTANTIATE_TEST_SUITE_P(Cases, OpMoeExperts, ::testing::ValuesIn(kMoeCases),
                         [](const ::testing::TestParamInfo<MoeCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace dsv4::cuda::test
