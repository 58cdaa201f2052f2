// Per-op CUDA tests against the CPU reference for the ops that were only covered end to end:
// the compressors inside kv_step (CSA ratio 4 with overlap + indexer compressor, HCA ratio 128;
// a compressed row appears exactly when a window closes, the first row, state carried across
// prefill chunks and decode steps, f32 and bf16 row storage), MoE routing (score + bias + top-k
// with norm and route scale, tid2eid hash layers, ties to the lowest index, NaN/Inf rows: B12,
// bit-identical across runs: B08) and the expert/combine output, RMSNorm + RoPE (strided input
// slices with canaries around the output: B10, forward and inverse RoPE, main and YaRN tables,
// large positions), embedding in every weight format, the SwiGLU clamp, the indexer on edge
// shapes (no, fewer than top-k, exactly top-k candidates; integer scores with ties; batch 1 and
// 33) and the exact top-k at the B08 sizes. Page ids are scattered near the top of a pool of more
// than 2^31 f32 elements (B09); graph-padding sequences (n_tok 0) must not write (B03).
// Every test prints "[op ...] max |err|" lines; thresholds are far above f32 rounding only where
// the two sides use different libm functions (expf/cosf on the GPU, glibc on the host).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "core/dtype.h"
#include "kernels/cuda/ops/indexer_filter.h"
#include "kernels/cuda/ops/ops.h"
#include "kernels/ref/compressor.h"
#include "kernels/ref/ops.h"
#include "model/quant.h"
#include "runtime/cuda_runner.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"
#include "tests/kernels/cuda_runner/weight_formats.h"

namespace dsv4 {
namespace {

// Frees every pointer it was given at scope exit.
struct DevFree {
    std::vector<void*> ptrs;
    template <class T>
    T* operator()(T* p) {
        ptrs.push_back((void*)p);
        return p;
    }
    ~DevFree() {
        for (void* p : ptrs) cudaFree(p);
    }
};

std::vector<float> randn(size_t n, std::mt19937& g, float s = 1.0f) {
    std::normal_distribution<float> d(0.0f, s);
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    return v;
}
// m = max(m, d), but a NaN d sticks (std::max would drop it and hide a NaN output).
void upd(double& m, double d) {
    if (!(d <= m)) m = d;
}

constexpr uint32_t kCanary = 0xC0C0C0C0u;  // f32 -6.02; its bf16 halves 0xC0C0 as well

// =============================================================================================
// Compressors (kv_step) on a paged state.
// =============================================================================================

// A pool of more than 2^31 f32 elements; each sequence's pages are scattered near the top.
struct BigPool {
    static constexpr int64_t pe = 2048, page_tokens = 16, n_pages = 1100000;  // 2.25e9 elements, 9 GB
    float* base = nullptr;
    BigPool() { EXPECT_EQ(cudaMalloc(&base, sizeof(float) * pe * n_pages), cudaSuccess); }
    ~BigPool() { cudaFree(base); }
    void fill_canary(int32_t page) const {
        std::vector<uint32_t> c(pe, kCanary);
        EXPECT_EQ(cudaMemcpy(base + int64_t(page) * pe, c.data(), sizeof(float) * pe, cudaMemcpyHostToDevice),
                  cudaSuccess);
    }
    std::vector<float> page(int32_t p) const { return host(base + int64_t(p) * pe, size_t(pe)); }
};

struct CompCase {
    const char* name;
    int r;
    bool csa;
    bool bf16_rows;
};

// CPU mirror of one sequence: ring, compressor states, finished rows.
struct SeqMirror {
    int64_t pos = 0;  // next position
    std::vector<float> ring, ckv, cgate, ikv, igate;
    std::map<int64_t, std::vector<float>> rows, irows;
};

TEST(CudaOpsEdge, CompressorsInKvStepMatchReference) {
    SKIP_WITHOUT_GPU();
    constexpr int W = 16, D = 64, ID = 32, R = 16;
    constexpr float eps = 1e-6f;
    const auto yarn = ref::make_rope_table(160000.0, R, true, 16.0, 65536.0, 32.0, 1.0);
    BigPool bp;
    double worst_row = 0, worst_row_bf16 = 0, worst_state = 0;
    int rows_checked = 0, early_checks = 0;
    for (const CompCase cc : {CompCase{"CSA r4", 4, true, false}, CompCase{"CSA r4 bf16 rows", 4, true, true},
                              CompCase{"HCA r128", 128, false, false}}) {
        SCOPED_TRACE(cc.name);
        const int r = cc.r;
        const ref::CompressorShape ms{r, D, cc.csa}, is{r, ID, true};
        const int64_t mwd = ms.state_width(), iwd = is.state_width();
        const int64_t ring_off = 0, ckv_off = W * D, cg_off = ckv_off + ms.state_rows() * mwd;
        const int64_t ikv_off = cg_off + ms.state_rows() * mwd, ig_off = ikv_off + (cc.csa ? is.state_rows() * iwd : 0);
        const int64_t state_elems = ig_off + (cc.csa ? is.state_rows() * iwd : 0);
        const int64_t n_state_pages = (state_elems + BigPool::pe - 1) / BigPool::pe;
        const int64_t row_off = 0, idx_row_off = r <= BigPool::page_tokens ? (BigPool::page_tokens / r) * D : D;
        // Chunks per stage: prefill, a second chunk (start_pos > 0), then decode steps. One
        // padding sequence (n_tok 0, page table of zeros) rides along in every stage.
        const std::vector<std::vector<int>> stages =
            r == 4 ? std::vector<std::vector<int>>{{3, 4, 9}, {5, 1, 7}, {1, 1, 1}, {1, 1, 1},
                                                   {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}
                   : std::vector<std::vector<int>>{{127, 128, 130}, {1, 1, 1}, {60, 2, 125}, {1, 1, 1}, {70, 1, 1}};
        const int B = 3, Bp = 4;
        int64_t max_len = 0;
        for (int s = 0; s < B; ++s) {
            int64_t len = 0;
            for (const auto& st : stages) len += st[s];
            max_len = std::max(max_len, len);
        }
        const int64_t n_tok_pages = (max_len + r) / BigPool::page_tokens + 2;  // room for the row after the last
        const int pt_stride = int(n_state_pages + n_tok_pages);
        std::vector<int32_t> tables(size_t(Bp) * pt_stride, 0);
        int32_t next = int32_t(BigPool::n_pages - 3);
        for (int s = 0; s < B; ++s)
            for (int i = 0; i < pt_stride; ++i) {
                tables[size_t(s) * pt_stride + i] = next;
                bp.fill_canary(next);
                next -= 5 + (i % 3) * 1000;  // scattered, descending, far apart
            }
        bp.fill_canary(0);  // the padding sequence's page table points at page 0
        // bf16 rows are packed two per 4-byte word (ring rows too); f32 rows one per word.
        const cuda::RowFormat mainf = cc.bf16_rows ? cuda::RowFormat{1, D, R, D / 2} : cuda::RowFormat{0, D, R, D};
        const cuda::RowFormat idxf = cc.bf16_rows ? cuda::RowFormat{1, ID, R, ID / 2} : cuda::RowFormat{0, ID, R, ID};
        cuda::PagePool pool{bp.base, BigPool::pe, n_state_pages, BigPool::page_tokens, mainf, idxf};
        std::mt19937 g(11 + r + cc.bf16_rows);
        const auto ape = randn(size_t(r) * mwd, g, 0.5f), iape = randn(size_t(r) * iwd, g, 0.5f);
        auto norm = randn(D, g, 0.2f), inorm = randn(ID, g, 0.2f);
        for (float& v : norm) v += 1.0f;
        for (float& v : inorm) v += 1.0f;
        DevFree F;
        float *dape = F(dev(ape)), *diape = F(dev(iape)), *dnorm = F(dev(norm)), *dinorm = F(dev(inorm));
        float* dfreq = F(dev(yarn.inv_freq));
        int32_t* dtables = F(dev(tables));
        std::vector<int64_t> goff = {cg_off}, glen = {ms.state_rows() * mwd};
        if (cc.csa) goff.push_back(ig_off), glen.push_back(is.state_rows() * iwd);
        int64_t *dgoff = F(dev(goff)), *dglen = F(dev(glen));

        std::vector<SeqMirror> mir(B);
        for (auto& m : mir) {
            m.ring.assign(size_t(W) * D, 0.0f);
            m.ckv.resize(size_t(ms.state_rows() * mwd));
            m.cgate.resize(m.ckv.size());
            ref::compressor_reset(ms, m.ckv.data(), m.cgate.data());
            if (cc.csa) {
                m.ikv.resize(size_t(is.state_rows() * iwd));
                m.igate.resize(m.ikv.size());
                ref::compressor_reset(is, m.ikv.data(), m.igate.data());
            }
        }
        for (size_t stage = 0; stage < stages.size(); ++stage) {
            std::vector<int32_t> tb(Bp), nt(Bp, 0), toks, ps;
            std::vector<int64_t> sp(Bp, 0);
            int max_t = 0;
            for (int s = 0; s < Bp; ++s) {
                tb[s] = int32_t(toks.size());
                const int n = s < B ? stages[stage][s] : 0;
                nt[s] = n;
                sp[s] = s < B ? mir[s].pos : 0;
                for (int i = 0; i < std::max(n, 1); ++i) toks.push_back(7), ps.push_back(int32_t(sp[s] + i));
                max_t = std::max(max_t, n);
            }
            const size_t T = toks.size();
            const auto kv = randn(T * D, g), cv = randn(T * mwd, g), cg = randn(T * mwd, g, 2.0f);
            const auto iv = randn(T * iwd, g), ig = randn(T * iwd, g, 2.0f);
            DevFree S;
            cuda::StepPlan plan;
            plan.n_seqs = Bp;
            plan.tok_begin = S(dev(tb));
            plan.n_tok = S(dev(nt));
            plan.start_pos = S(dev(sp));
            plan.page_table = dtables;
            plan.pt_stride = pt_stride;
            plan.tokens = S(dev(toks));
            plan.pos = S(dev(ps));
            cuda::KvStepArgs ka;
            ka.W = W, ka.D = D, ka.ring_off = ring_off, ka.kv = S(dev(kv));
            ka.comp[0] = {r, D, cc.csa, ckv_off, cg_off, row_off, mainf, S(dev(cv)), S(dev(cg)), dape, dnorm};
            ka.n_comp = 1;
            if (cc.csa) {
                ka.comp[1] = {r, ID, true, ikv_off, ig_off, idx_row_off, idxf, S(dev(iv)), S(dev(ig)), diape, dinorm};
                ka.n_comp = 2;
            }
            ka.rope_inv_freq = dfreq, ka.rope_dim = R, ka.eps = eps;
            ASSERT_EQ(cuda::reset_state(plan, pool, state_elems, dgoff, dglen, int(goff.size()), nullptr), cudaSuccess);
            for (int t = 0; t < max_t; ++t) {
                ka.t = t;
                ASSERT_EQ(cuda::kv_step(plan, pool, ka, nullptr), cudaSuccess);
            }
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            // CPU reference, token by token.
            std::vector<float> entry(D), gate(std::max(mwd, iwd));
            auto finish = [&](std::vector<float>& e, int dim, const std::vector<float>& nw, int64_t w) {
                std::vector<float> in(e.begin(), e.begin() + dim), out(dim);
                ref::rms_norm(in.data(), nw.data(), out.data(), 1, dim, eps);
                ref::apply_rope(out.data(), dim, yarn, w * r);
                return out;
            };
            for (int s = 0; s < B; ++s) {
                SeqMirror& m = mir[s];
                for (int i = 0; i < nt[s]; ++i) {
                    const size_t tok = size_t(tb[s] + i);
                    const int64_t p = m.pos++;
                    std::memcpy(&m.ring[size_t(p % W) * D], &kv[tok * D], sizeof(float) * D);
                    for (int64_t j = 0; j < mwd; ++j) gate[j] = cg[tok * mwd + j] + ape[size_t(p % r) * mwd + j];
                    if (ref::compressor_push(ms, m.ckv.data(), m.cgate.data(), &cv[tok * mwd], gate.data(), p,
                                             entry.data()))
                        m.rows[p / r] = finish(entry, D, norm, p / r);
                    if (cc.csa) {
                        for (int64_t j = 0; j < iwd; ++j) gate[j] = ig[tok * iwd + j] + iape[size_t(p % r) * iwd + j];
                        if (ref::compressor_push(is, m.ikv.data(), m.igate.data(), &iv[tok * iwd], gate.data(), p,
                                                 entry.data()))
                            m.irows[p / r] = finish(entry, ID, inorm, p / r);
                    }
                }
            }
            // Compare: state area (bit-exact: copies and one f32 add), rows, and the row after the last (untouched).
            for (int s = 0; s < B; ++s) {
                const SeqMirror& m = mir[s];
                const int32_t* t = &tables[size_t(s) * pt_stride];
                std::vector<float> state;
                for (int64_t i = 0; i < n_state_pages; ++i) {
                    const auto pg = bp.page(t[i]);
                    state.insert(state.end(), pg.begin(), pg.end());
                }
                auto cmp_state = [&](int64_t off, const std::vector<float>& want, const char* what) {
                    std::vector<float> got(state.begin() + off, state.begin() + off + int64_t(want.size()));
                    int bad = 0;
                    for (size_t i = 0; i < want.size(); ++i) {
                        const bool same = std::memcmp(&got[i], &want[i], 4) == 0;
                        bad += !same;
                        if (!same && std::isfinite(want[i])) upd(worst_state, std::fabs(double(got[i]) - want[i]));
                    }
                    EXPECT_EQ(bad, 0) << what << " state of seq " << s << " after stage " << stage;
                };
                if (!cc.bf16_rows) {
                    cmp_state(ring_off, m.ring, "ring");
                } else {  // packed bf16 ring rows: the GPU stores round-to-nearest-even of the f32 kv
                    int bad = 0;
                    const auto* got = reinterpret_cast<const uint16_t*>(state.data() + ring_off);
                    for (size_t i = 0; i < m.ring.size(); ++i) bad += got[i] != f32_to_bf16(m.ring[i]);
                    EXPECT_EQ(bad, 0) << "bf16 ring of seq " << s << " after stage " << stage;
                }
                cmp_state(ckv_off, m.ckv, "compressor kv");
                cmp_state(cg_off, m.cgate, "compressor gate");
                if (cc.csa) cmp_state(ikv_off, m.ikv, "indexer kv"), cmp_state(ig_off, m.igate, "indexer gate");
                const int64_t n_c = m.pos / r;
                ASSERT_EQ(int64_t(m.rows.size()), n_c);
                // Every row 0..n_c: emitted rows match, row n_c is still the canary.
                for (int64_t w = 0; w <= n_c; ++w) {
                    const int64_t tokpos = w * r;
                    const int32_t page = t[n_state_pages + tokpos / BigPool::page_tokens];
                    const int64_t slot = r <= BigPool::page_tokens ? (tokpos % BigPool::page_tokens) / r : 0;
                    const auto pg = bp.page(page);
                    for (int which = 0; which < (cc.csa ? 2 : 1); ++which) {
                        const int dim = which ? ID : D;
                        const int64_t off = which ? idx_row_off : row_off;
                        std::vector<float> got(dim);
                        std::vector<uint32_t> bits(dim);
                        for (int i = 0; i < dim; ++i) {
                            if (cc.bf16_rows) {
                                uint16_t h;
                                std::memcpy(&h, reinterpret_cast<const uint16_t*>(pg.data() + off) + slot * dim + i, 2);
                                got[i] = bf16_to_f32(h);
                                bits[i] = uint32_t(h) | (uint32_t(h) << 16);
                            } else {
                                got[i] = pg[size_t(off + slot * dim + i)];
                                std::memcpy(&bits[i], &got[i], 4);
                            }
                        }
                        if (w == n_c) {
                            ++early_checks;
                            EXPECT_TRUE(std::all_of(bits.begin(), bits.end(), [](uint32_t b) { return b == kCanary; }))
                                << "row " << w << (which ? " (indexer)" : "") << " of seq " << s
                                << " written before its window closed (pos " << m.pos << ")";
                            continue;
                        }
                        const auto& want = which ? m.irows.at(w) : m.rows.at(w);
                        double e = 0;
                        for (int i = 0; i < dim; ++i) {
                            const double d = std::fabs(double(got[i]) - want[i]);
                            upd(e, cc.bf16_rows ? d / std::max(1.0, double(std::fabs(want[i]))) : d);
                        }
                        ++rows_checked;
                        if (cc.bf16_rows) {
                            upd(worst_row_bf16, e);
                            EXPECT_LT(e, 8e-3) << "row " << w << " seq " << s;
                        } else {
                            upd(worst_row, e);
                            EXPECT_LT(e, 2e-5) << "row " << w << " seq " << s;
                        }
                    }
                }
            }
        }
        // The padding sequence wrote nothing (B03).
        const auto p0 = bp.page(0);
        EXPECT_TRUE(std::all_of(p0.begin(), p0.end(), [](float v) {
            uint32_t b;
            std::memcpy(&b, &v, 4);
            return b == kCanary;
        })) << "graph-padding sequence wrote into page 0";
    }
    std::printf(
        "[op compressor kv_step] CSA r4 (+indexer) / HCA r128, B=3 + 1 padding, prefill + chunk + decode, "
        "page offsets > 2^31 elements: %d rows, max |err| %.3g (bf16 rows: rel %.3g), state bit-exact "
        "(max |diff| %.3g), %d not-yet-closed rows untouched\n",
        rows_checked, worst_row, worst_row_bf16, worst_state, early_checks);
}

// =============================================================================================
// MoE routing + experts + combine.
// =============================================================================================

struct MoeCase {
    const char* name;
    int T, K;
    bool hash, norm;
    float scale;
    cuda::WFmt fmt;
};

TEST(CudaOpsEdge, MoeRoutingAndExpertsMatchReference) {
    SKIP_WITHOUT_GPU();
    const int E = 16, d = 64, I = 64, V = 1000;
    const float lim = 7.0f;
    std::mt19937 g(21);
    // Expert weights (f32 masters; MXFP4 copies dequantised for the CPU side).
    std::vector<std::vector<float>> w1(E), w3(E), w2(E);
    for (int e = 0; e < E; ++e)
        w1[e] = randn(size_t(I) * d, g, 0.3f), w3[e] = randn(size_t(I) * d, g, 0.3f),
        w2[e] = randn(size_t(d) * I, g, 0.2f);
    std::vector<float> bias = randn(E, g, 0.05f);
    for (int e = 8; e < E; ++e) bias[e] = bias[e - 8];  // equal-bias pairs (e, e+8): exact key ties possible
    std::vector<int32_t> tid2eid_all;                   // [V, 6]: distinct experts per row
    for (int v = 0; v < V; ++v) {
        std::vector<int32_t> ex(E);
        for (int e = 0; e < E; ++e) ex[e] = e;
        std::shuffle(ex.begin(), ex.end(), g);
        tid2eid_all.insert(tid2eid_all.end(), ex.begin(), ex.begin() + 6);
    }
    double worst_w = 0, worst_y = 0, worst_y_rel = 0;
    int cases = 0;
    for (const MoeCase mc : {MoeCase{"bias top6 norm x2.5 f32", 37, 6, false, true, 2.5f, cuda::WFmt::kF32},
                             MoeCase{"bias top2 no-norm x1.5 f32", 130, 2, false, false, 1.5f, cuda::WFmt::kF32},
                             MoeCase{"bias top6 norm T=1 mxfp4", 1, 6, false, true, 1.0f, cuda::WFmt::kMxfp4},
                             MoeCase{"bias top6 norm mxfp4", 37, 6, false, true, 2.5f, cuda::WFmt::kMxfp4},
                             MoeCase{"hash top6 norm x2.5 f32", 37, 6, true, true, 2.5f, cuda::WFmt::kF32}}) {
        SCOPED_TRACE(mc.name);
        const int T = mc.T, K = mc.K;
        std::vector<float> logits = randn(size_t(T) * E, g, 1.5f);
        auto row = [&](int t) { return &logits[size_t(t) * E]; };
        if (T >= 8) {
            std::fill(row(1), row(1) + E, 0.3f);       // all equal
            std::fill(row(2), row(2) + E, NAN);        // all NaN (B12)
            row(3)[5] = NAN;                           // one NaN
            row(4)[2] = INFINITY;                      // +Inf
            std::fill(row(5), row(5) + E, -INFINITY);  // all -Inf
            // Row 6: K-1 clear winners, then experts 4 and 12 (equal bias) tied for the K-th slot: 4 wins.
            std::fill(row(6), row(6) + E, -3.0f);
            const int highs[] = {0, 1, 2, 3, 5, 6};
            for (int i = 0; i < K - 1; ++i) row(6)[highs[i]] = 5.0f;
            row(6)[4] = row(6)[12] = 2.0f;
        }
        std::vector<int32_t> tokens(T);
        for (int t = 0; t < T; ++t) tokens[t] = int32_t(g() % V);
        tokens[0] = V - 1;
        std::vector<int32_t> tid2eid;
        for (int v = 0; v < V; ++v)
            tid2eid.insert(tid2eid.end(), &tid2eid_all[size_t(v) * 6], &tid2eid_all[size_t(v) * 6] + K);
        const auto x = randn(size_t(T) * d, g), shared = randn(size_t(T) * d, g);

        // Weights in the case's format, experts `stride` bytes apart.
        std::vector<std::vector<float>> c1(E), c3(E), c2(E);  // what the CPU multiplies with
        auto pack = [&](const std::vector<std::vector<float>>& w, int N, int Kd, std::vector<std::vector<float>>& cpu,
                        DevFree& F) {
            cuda::WeightDesc desc;
            desc.fmt = mc.fmt, desc.N = N, desc.K = Kd;
            std::vector<uint8_t> data, scale;
            for (int e = 0; e < E; ++e) {
                cpu[e].resize(size_t(N) * Kd);
                if (mc.fmt == cuda::WFmt::kF32) {
                    cpu[e] = w[e];
                    const auto* b = reinterpret_cast<const uint8_t*>(w[e].data());
                    data.insert(data.end(), b, b + w[e].size() * 4);
                } else {
                    auto q = quantize_mxfp4(w[e].data(), N, Kd);
                    dequantize_mxfp4(q.packed.data(), q.scales.data(), N, Kd, cpu[e].data());
                    desc.expert_stride = int64_t(q.packed.size());
                    desc.scale_expert_stride = int64_t(q.scales.size());
                    data.insert(data.end(), q.packed.begin(), q.packed.end());
                    scale.insert(scale.end(), q.scales.begin(), q.scales.end());
                }
            }
            if (mc.fmt == cuda::WFmt::kF32) desc.expert_stride = int64_t(N) * Kd * 4;
            desc.data = F(dev(data));
            desc.scale = scale.empty() ? nullptr : F(dev(scale));
            return desc;
        };
        DevFree F;
        cuda::MoeArgs a;
        a.T = T, a.E = E, a.K = K, a.d = d, a.I = I;
        a.logits = F(dev(logits));
        a.bias = mc.hash ? nullptr : F(dev(bias));
        a.tid2eid = mc.hash ? F(dev(tid2eid)) : nullptr;
        a.tokens = F(dev(tokens));
        a.route_scale = mc.scale, a.norm_topk = mc.norm, a.limit = lim;
        int32_t *ids = nullptr, *counts = nullptr, *perm = nullptr, *slot = nullptr;
        float *wts = nullptr, *h = nullptr, *yp = nullptr, *out = nullptr;
        ASSERT_EQ(cudaMalloc(&ids, sizeof(int32_t) * T * K), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&counts, sizeof(int32_t) * (3 * E + 1)), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&perm, sizeof(int32_t) * T * K), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&slot, sizeof(int32_t) * T * K), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&wts, sizeof(float) * T * K), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&h, sizeof(float) * T * K * I), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&yp, sizeof(float) * T * K * d), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&out, sizeof(float) * T * d), cudaSuccess);
        F(ids), F(counts), F(perm), F(slot), F(wts), F(h), F(yp), F(out);
        a.ids = ids, a.wts = wts, a.counts = counts, a.perm = perm, a.slot = slot;
        a.x = F(dev(x)), a.h = h, a.yp = yp;
        a.w1 = pack(w1, I, d, c1, F), a.w3 = pack(w3, I, d, c3, F), a.w2 = pack(w2, d, I, c2, F);
        const float* dshared = F(dev(shared));
        std::vector<int32_t> ids0;
        std::vector<float> wts0, out0;
        for (int run = 0; run < 3; ++run) {  // bit-identical across runs (B08)
            ASSERT_EQ(cuda::moe_experts(a, nullptr), cudaSuccess);
            ASSERT_EQ(cuda::moe_combine(a, dshared, out, nullptr), cudaSuccess);
            auto gi = host(ids, size_t(T) * K);
            auto gw = host(wts, size_t(T) * K);
            auto go = host(out, size_t(T) * d);
            if (run == 0) {
                ids0 = gi, wts0 = gw, out0 = go;
                continue;
            }
            EXPECT_EQ(gi, ids0) << "run " << run;
            EXPECT_EQ(std::memcmp(gw.data(), wts0.data(), gw.size() * 4), 0) << "run " << run;
            EXPECT_EQ(std::memcmp(go.data(), out0.data(), go.size() * 4), 0) << "run " << run;
        }
        // CPU reference (the routing of RefModel::moe, spec §2.9).
        for (int t = 0; t < T; ++t) {
            std::vector<float> s(E), key(E);
            for (int e = 0; e < E; ++e) s[e] = std::sqrt(ref::softplus(row(t)[e]));
            std::vector<int32_t> chosen;
            if (mc.hash) {
                chosen.assign(&tid2eid[size_t(tokens[t]) * K], &tid2eid[size_t(tokens[t]) * K] + K);
            } else {
                for (int e = 0; e < E; ++e) key[e] = s[e] + bias[e];
                chosen = ref::topk_indices(key, K);
            }
            EXPECT_EQ(std::vector<int32_t>(ids0.begin() + t * K, ids0.begin() + (t + 1) * K), chosen) << "token " << t;
            double sum = 0;
            for (int32_t e : chosen) sum += std::isfinite(s[e]) ? s[e] : 0.0f;
            std::vector<float> y(shared.begin() + size_t(t) * d, shared.begin() + size_t(t + 1) * d);
            for (int k = 0; k < K; ++k) {
                const int32_t e = chosen[k];
                float wgt = mc.scale;
                if (mc.norm)
                    wgt *= float(s[e] / (sum + 1e-20));
                else
                    wgt *= s[e];
                if (!std::isfinite(wgt)) wgt = 0.0f;
                upd(worst_w, std::fabs(double(wgt) - wts0[size_t(t) * K + k]));
                EXPECT_NEAR(wts0[size_t(t) * K + k], wgt, 1e-5f * std::max(1.0f, std::fabs(wgt))) << "token " << t;
                std::vector<float> ga(I), ub(I);
                ref::linear(&x[size_t(t) * d], c1[e].data(), ga.data(), 1, I, d);
                ref::linear(&x[size_t(t) * d], c3[e].data(), ub.data(), 1, I, d);
                for (int i = 0; i < I; ++i)
                    ga[i] = ref::silu(std::min(ga[i], lim)) * std::clamp(ub[i], -lim, lim) * wgt;
                ref::linear(ga.data(), c2[e].data(), y.data(), 1, d, I, true);
            }
            double ymax = 1.0;  // errors relative to the token's largest output (sums of terms of either sign)
            for (int i = 0; i < d; ++i) ymax = std::max(ymax, double(std::fabs(y[i])));
            for (int i = 0; i < d; ++i) {
                const double e = std::fabs(double(out0[size_t(t) * d + i]) - y[i]);
                upd(worst_y, e);
                upd(worst_y_rel, e / ymax);
                EXPECT_LT(e / ymax, 1e-5) << "token " << t << " dim " << i;
            }
        }
        if (T >= 8 && !mc.hash) {  // the tie rows, spelled out
            EXPECT_EQ(std::vector<int32_t>(ids0.begin() + 2 * K, ids0.begin() + 3 * K),
                      ref::topk_indices(std::vector<float>(E, -INFINITY), K));
            EXPECT_EQ(ids0[size_t(6) * K + K - 1], 4) << "K-th slot tie must go to the lower index";
            for (int k = 0; k < K; ++k) EXPECT_EQ(wts0[size_t(2) * K + k], 0.0f) << "all-NaN row weights";
        }
        ++cases;
    }
    std::printf(
        "[op moe routing+experts] %d cases (bias/hash, top-2/6, norm on/off, route scale, f32/mxfp4, T 1/37/130, "
        "tie/NaN/Inf rows), ids identical to the CPU, bit-identical over 3 runs: weights max |err| %.3g, "
        "output max |err| %.3g (relative to the token's max |y|: %.3g)\n",
        cases, worst_w, worst_y, worst_y_rel);
}

// =============================================================================================
// RMSNorm + RoPE (B10 strided slices), embedding, SwiGLU clamp.
// =============================================================================================

// y buffer with `guard` canary floats before and after, and canaries in row gaps (ldy > n).
struct Guarded {
    static constexpr int64_t guard = 1024;
    float* buf = nullptr;
    int64_t total = 0;
    Guarded(int64_t n) : total(n + 2 * guard) {
        std::vector<uint32_t> c(size_t(total), kCanary);
        EXPECT_EQ(cudaMalloc(&buf, sizeof(float) * total), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(buf, c.data(), sizeof(float) * total, cudaMemcpyHostToDevice), cudaSuccess);
    }
    ~Guarded() { cudaFree(buf); }
    float* y() const { return buf + guard; }
    // Reads rows [rows, n] out of a [rows, ldy] layout; counts canaries overwritten outside it.
    std::vector<float> read(int64_t rows, int64_t n, int64_t ldy, int64_t& stomped) const {
        auto all = host(buf, size_t(total));
        std::vector<float> out;
        out.reserve(size_t(rows * n));
        stomped = 0;
        for (int64_t i = 0; i < total; ++i) {
            const int64_t j = i - guard;
            const bool inside = j >= 0 && j < rows * ldy && (j % ldy) < n;
            if (inside) {
                out.push_back(all[size_t(i)]);
            } else {
                uint32_t b;
                std::memcpy(&b, &all[size_t(i)], 4);
                stomped += b != kCanary;
            }
        }
        return out;
    }
};

TEST(CudaOpsEdge, RmsNormOnStridedSlices) {
    SKIP_WITHOUT_GPU();
    const float eps = 1e-6f;
    std::mt19937 g(31);
    double worst = 0;
    for (int64_t rows : {1, 31, 4032, 65536}) {
        const int64_t ld = 576;
        const auto X = randn(size_t(rows * ld), g, 2.0f);
        const auto wl = randn(512, g), wr = randn(64, g);
        DevFree F;
        float *dX = F(dev(X)), *dwl = F(dev(wl)), *dwr = F(dev(wr));
        // Latent slice X[:, :512] -> contiguous y; rope slice X[:, 512:] -> y rows 72 apart.
        for (int part = 0; part < 2; ++part) {
            const int64_t n = part == 0 ? 512 : 64, ldy = part == 0 ? 512 : 72, xoff = part == 0 ? 0 : 512;
            Guarded y(rows * ldy);
            ASSERT_EQ(cuda::norm_rope(dX + xoff, ld, y.y(), ldy, int(rows), int(n), true, part == 0 ? dwl : dwr, eps,
                                      nullptr, 0, nullptr, 1, false, nullptr),
                      cudaSuccess);
            int64_t stomped = 0;
            const auto got = y.read(rows, n, ldy, stomped);
            std::vector<float> want(size_t(rows * n));
            ref::rms_norm(X.data() + xoff, (part == 0 ? wl : wr).data(), want.data(), rows, n, eps, ld);
            const double e = max_abs_diff(got, want);
            upd(worst, e);
            EXPECT_EQ(stomped, 0) << "rows " << rows << " part " << part << ": writes outside the output";
            EXPECT_LT(e, 1e-5) << "rows " << rows << " part " << part;
        }
        EXPECT_EQ(host(dX, X.size()), X) << "input modified";
    }
    std::printf(
        "[op rmsnorm strided] X[:, :512] and X[:, 512:] of [rows, 576], rows 1/31/4032/65536, canaries intact: "
        "max |err| %.3g\n",
        worst);
}

TEST(CudaOpsEdge, NormRopeForwardInverseMainAndYarn) {
    SKIP_WITHOUT_GPU();
    const float eps = 1e-6f;
    const int D = 128, R = 64, H = 5;
    const auto main_t = ref::make_rope_table(10000.0, R, false, 1, 1, 1, 1);
    const auto yarn_t = ref::make_rope_table(160000.0, R, true, 16.0, 65536.0, 32.0, 1.0);
    const std::vector<int32_t> pos = {0, 1, 3, 127, 128, 4095, 65535, 65536, 1000003, 7};
    const int T = int(pos.size());
    std::mt19937 g(41);
    double worst_norm_rope = 0, worst_inv = 0, worst_round = 0;
    for (const auto* tab : {&main_t, &yarn_t}) {
        DevFree F;
        float* dfreq = F(dev(tab->inv_freq));
        int32_t* dpos = F(dev(pos));
        // (a) per-head unweighted norm + RoPE in place, rows_per_token = H (the q path).
        const auto q = randn(size_t(T) * H * D, g, 3.0f);
        float* dq = F(dev(q));
        ASSERT_EQ(cuda::norm_rope(dq, D, dq, D, T * H, D, true, nullptr, eps, dfreq, R, dpos, H, false, nullptr),
                  cudaSuccess);
        std::vector<float> want = q;
        ref::rms_norm_unweighted(want.data(), int64_t(T) * H, D, eps);
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < H; ++h) ref::apply_rope(&want[(size_t(t) * H + h) * D], D, *tab, pos[t]);
        const auto got = host(dq, q.size());
        upd(worst_norm_rope, max_abs_diff(got, want));
        EXPECT_LT(max_abs_diff(got, want), 2e-5);
        // (b) weighted norm + RoPE from a strided input (kv path with ldx > D) into a separate buffer.
        const int64_t ldx = D + 24;
        const auto kv = randn(size_t(T) * ldx, g), wn = randn(D, g);
        float *dkv = F(dev(kv)), *dwn = F(dev(wn));
        Guarded y(int64_t(T) * D);
        ASSERT_EQ(cuda::norm_rope(dkv, ldx, y.y(), D, T, D, true, dwn, eps, dfreq, R, dpos, 1, false, nullptr),
                  cudaSuccess);
        int64_t stomped = 0;
        const auto gy = y.read(T, D, D, stomped);
        std::vector<float> wy(size_t(T) * D);
        ref::rms_norm(kv.data(), wn.data(), wy.data(), T, D, eps, ldx);
        for (int t = 0; t < T; ++t) ref::apply_rope(&wy[size_t(t) * D], D, *tab, pos[t]);
        EXPECT_EQ(stomped, 0);
        upd(worst_norm_rope, max_abs_diff(gy, wy));
        EXPECT_LT(max_abs_diff(gy, wy), 2e-5);
        // (c) inverse RoPE only (the attention output path), then the round trip back.
        const auto o = randn(size_t(T) * H * D, g);
        float *dO = F(dev(o)), *dO2 = nullptr;
        ASSERT_EQ(cudaMalloc(&dO2, sizeof(float) * o.size()), cudaSuccess);
        F(dO2);
        ASSERT_EQ(cuda::norm_rope(dO, D, dO2, D, T * H, D, false, nullptr, eps, dfreq, R, dpos, H, true, nullptr),
                  cudaSuccess);
        std::vector<float> wo = o;
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < H; ++h) ref::apply_rope(&wo[(size_t(t) * H + h) * D], D, *tab, pos[t], true);
        const auto go = host(dO2, o.size());
        upd(worst_inv, max_abs_diff(go, wo));
        EXPECT_LT(max_abs_diff(go, wo), 2e-5);
        ASSERT_EQ(cuda::norm_rope(dO2, D, dO2, D, T * H, D, false, nullptr, eps, dfreq, R, dpos, H, false, nullptr),
                  cudaSuccess);
        const auto back = host(dO2, o.size());
        upd(worst_round, max_abs_diff(back, o));
        EXPECT_LT(max_abs_diff(back, o), 2e-5);
    }
    // The YaRN table really differs from the plain one (low frequencies divided by the factor).
    const auto plain_c = ref::make_rope_table(160000.0, R, false, 1, 1, 1, 1);
    EXPECT_NE(plain_c.inv_freq.back(), yarn_t.inv_freq.back());
    EXPECT_EQ(plain_c.inv_freq.front(), yarn_t.inv_freq.front());
    std::printf(
        "[op norm_rope] main + YaRN tables, positions 0..1000003, H=%d: norm+rope max |err| %.3g, inverse rope "
        "%.3g, forward(inverse(x)) - x %.3g\n",
        H, worst_norm_rope, worst_inv, worst_round);
}

// The bf16 route of a batched prefill step (cuda_runner_prefill.cpp): q normed, roped and rounded in
// one kernel, and the attention output's rope dims inverse-rotated in place in bf16, must give the
// bits of the f32 route they replace (norm_rope then round_to_bf16; widen, inverse rope, round).
TEST(CudaOpsEdge, NormRopeBf16FormsEqualTheF32Route) {
    SKIP_WITHOUT_GPU();
    const float eps = 1e-6f;
    const int D = 512, R = 64, H = 3;
    const auto tab = ref::make_rope_table(160000.0, R, true, 16.0, 65536.0, 32.0, 1.0);
    const std::vector<int32_t> pos = {0, 1, 5, 127, 4095, 65535, 1000003};
    const int T = int(pos.size());
    const int64_t n = int64_t(T) * H * D;
    std::mt19937 g(43);
    DevFree F;
    float* dfreq = F(dev(tab.inv_freq));
    int32_t* dpos = F(dev(pos));
    auto bits = [](const void* d, int64_t cnt) {
        std::vector<uint16_t> h(size_t(cnt), 0);
        EXPECT_EQ(cudaMemcpy(h.data(), d, size_t(cnt) * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        return h;
    };
    void *a = nullptr, *b = nullptr;
    ASSERT_EQ(cudaMalloc(&a, size_t(n) * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b, size_t(n) * 2), cudaSuccess);
    F(a);
    F(b);
    // (a) q: norm_rope_to_bf16 vs norm_rope in place then round_to_bf16.
    const auto q = randn(size_t(n), g, 3.0f);
    float* dq = F(dev(q));
    ASSERT_EQ(cuda::norm_rope_to_bf16(dq, D, a, D, T * H, D, true, nullptr, eps, dfreq, R, dpos, H, nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::norm_rope(dq, D, dq, D, T * H, D, true, nullptr, eps, dfreq, R, dpos, H, false, nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::round_to_bf16(dq, n, b, nullptr), cudaSuccess);
    const auto qa = bits(a, n), qb = bits(b, n);
    EXPECT_EQ(qa, qb);
    // (b) output rows: bf16 rows rotated in place vs widened, inverse-roped in f32 and rounded.
    const auto o = randn(size_t(n), g, 2.0f);
    float* dO = F(dev(o));
    ASSERT_EQ(cuda::round_to_bf16(dO, n, a, nullptr), cudaSuccess);  // the attention output, bf16
    const auto o16 = bits(a, n);
    std::vector<float> wide(static_cast<size_t>(n));
    for (size_t i = 0; i < wide.size(); ++i) {
        const uint32_t u = uint32_t(o16[i]) << 16;
        std::memcpy(&wide[i], &u, 4);
    }
    float* dW = F(dev(wide));
    ASSERT_EQ(cuda::rope_rows_bf16(a, int64_t(T) * H, D, dfreq, R, dpos, H, true, nullptr), cudaSuccess);
    ASSERT_EQ(cuda::norm_rope(dW, D, dW, D, T * H, D, false, nullptr, eps, dfreq, R, dpos, H, true, nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::round_to_bf16(dW, n, b, nullptr), cudaSuccess);
    const auto oa = bits(a, n), ob = bits(b, n);
    EXPECT_EQ(oa, ob);
    size_t changed = 0;  // the rope dims did move (not a no-op that matches by accident)
    for (size_t i = 0; i < oa.size(); ++i) changed += oa[i] != o16[i];
    EXPECT_GT(changed, size_t(T - 1) * H * R / 2);
    // Rows that end inside a token's heads: those rows rotate as before, the rest stay as they were.
    ASSERT_EQ(cuda::round_to_bf16(dO, n, a, nullptr), cudaSuccess);
    const int64_t part = int64_t(T) * H - 5;
    ASSERT_EQ(cuda::rope_rows_bf16(a, part, D, dfreq, R, dpos, H, true, nullptr), cudaSuccess);
    const auto op = bits(a, n);
    EXPECT_TRUE(std::equal(op.begin(), op.begin() + part * D, ob.begin()));
    EXPECT_TRUE(std::equal(op.begin() + part * D, op.end(), o16.begin() + part * D));
    EXPECT_EQ(cuda::rope_rows_bf16(a, 1, D, dfreq, 63, dpos, 1, true, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cuda::rope_rows_bf16(a, 1, D, dfreq, R, dpos, 0, true, nullptr), cudaErrorInvalidValue);
    std::printf(
        "[op norm_rope bf16] %d rows of %d: q and inverse-rope bf16 forms bit-equal to the f32 route (%zu "
        "output elements rotated)\n",
        T * H, D, changed);
}

// Rows of 512 (q heads, K=V rows) take norm_rope's warp-per-row form: bit for bit the 128-thread form,
// with and without the norm, the weight, the rope (forward and inverse), in place and strided.
TEST(CudaOpsEdge, NormRopeWarpFormEqualsBlockForm) {
    SKIP_WITHOUT_GPU();
    const int D = 512, R = 64, H = 5;
    const auto tab = ref::make_rope_table(160000.0, R, true, 16.0, 65536.0, 32.0, 1.0);
    const std::vector<int32_t> pos = {0, 1, 3, 127, 4095, 65535, 1000003, 7, 9};
    const int T = int(pos.size()), rows = T * H;
    const int64_t ldx = D + 32;
    std::mt19937 g(47);
    DevFree F;
    float* dfreq = F(dev(tab.inv_freq));
    int32_t* dpos = F(dev(pos));
    const auto x = randn(size_t(rows) * ldx, g, 2.5f), wn = randn(D, g);
    float *dx = F(dev(x)), *dw = F(dev(wn));
    float *a = nullptr, *b = nullptr;
    ASSERT_EQ(cudaMalloc(&a, sizeof(float) * rows * D), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b, sizeof(float) * rows * D), cudaSuccess);
    F(a);
    F(b);
    int cases = 0;
    for (int norm = 0; norm < 2; ++norm)
        for (int weighted = 0; weighted < 2; ++weighted)
            for (int rope = 0; rope < 3; ++rope) {  // none, forward, inverse
                const float* w = weighted ? dw : nullptr;
                const float* f = rope ? dfreq : nullptr;
                ASSERT_EQ(cuda::norm_rope(dx, ldx, a, D, rows, D, norm, w, 1e-6f, f, R, dpos, H, rope == 2, nullptr),
                          cudaSuccess);
                ASSERT_EQ(cuda::norm_rope_block_form(dx, ldx, b, D, rows, D, norm, w, 1e-6f, f, R, dpos, H, rope == 2,
                                                     nullptr),
                          cudaSuccess);
                const auto ga = host(a, size_t(rows) * D), gb = host(b, size_t(rows) * D);
                EXPECT_EQ(std::memcmp(ga.data(), gb.data(), ga.size() * 4), 0)
                    << "norm " << norm << " weight " << weighted << " rope " << rope;
                ++cases;
            }
    // In place (the q path), with the norm and rope, against the block form of the same rows read strided.
    std::vector<float> xc(size_t(rows) * D);
    for (int r = 0; r < rows; ++r)
        for (int i = 0; i < D; ++i) xc[size_t(r) * D + i] = x[size_t(r) * ldx + i];
    float* dq = F(dev(xc));
    ASSERT_EQ(cuda::norm_rope(dq, D, dq, D, rows, D, true, nullptr, 1e-6f, dfreq, R, dpos, H, false, nullptr),
              cudaSuccess);
    ASSERT_EQ(
        cuda::norm_rope_block_form(dx, ldx, b, D, rows, D, true, nullptr, 1e-6f, dfreq, R, dpos, H, false, nullptr),
        cudaSuccess);
    const auto gq = host(dq, xc.size()), gb = host(b, xc.size());
    EXPECT_EQ(std::memcmp(gq.data(), gb.data(), gq.size() * 4), 0);
    std::printf("[op norm_rope 512] warp-per-row form bit-equal to the 128-thread form in %d cases + in place\n",
                cases);
}

// norm_rope_bf16 (the prefill q rows the GEMM wrote as bf16, normed and rotated in place) gives the bits
// of norm_rope_to_bf16 on the same values held as f32; n other than 512 is refused.
TEST(CudaOpsEdge, NormRopeBf16InPlaceEqualsTheF32FormOnBf16Rows) {
    SKIP_WITHOUT_GPU();
    const int D = 512, R = 64, H = 3;
    const auto tab = ref::make_rope_table(10000.0, R, false, 1.0, 1.0, 32.0, 1.0);
    const std::vector<int32_t> pos = {0, 5, 127, 4096, 65535};
    const int rows = int(pos.size()) * H;
    std::mt19937 g(53);
    auto x = randn(size_t(rows) * D, g, 3.0f);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        xb[i] = f32_to_bf16(x[i]);
        x[i] = bf16_to_f32(xb[i]);  // the f32 form sees exactly the bf16 values
    }
    DevFree F;
    float* dfreq = F(dev(tab.inv_freq));
    int32_t* dpos = F(dev(pos));
    float* dx = F(dev(x));
    void *a = nullptr, *b = nullptr;
    ASSERT_EQ(cudaMalloc(&a, 2 * x.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b, 2 * x.size()), cudaSuccess);
    F(a);
    F(b);
    for (int rope = 0; rope < 2; ++rope) {
        const float* f = rope ? dfreq : nullptr;
        ASSERT_EQ(cudaMemcpy(b, xb.data(), 2 * xb.size(), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cuda::norm_rope_to_bf16(dx, D, a, D, rows, D, true, nullptr, 1e-6f, f, R, dpos, H, nullptr),
                  cudaSuccess);
        ASSERT_EQ(cuda::norm_rope_bf16(b, D, rows, D, true, nullptr, 1e-6f, f, R, dpos, H, nullptr), cudaSuccess);
        std::vector<uint16_t> ga(x.size()), gb(x.size());
        ASSERT_EQ(cudaMemcpy(ga.data(), a, 2 * ga.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(gb.data(), b, 2 * gb.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(std::memcmp(ga.data(), gb.data(), 2 * ga.size()), 0) << "rope " << rope;
        EXPECT_NE(std::memcmp(gb.data(), xb.data(), 2 * gb.size()), 0) << "rope " << rope << ": rows unchanged";
    }
    EXPECT_EQ(cuda::norm_rope_bf16(b, 256, rows, 256, true, nullptr, 1e-6f, nullptr, 0, dpos, H, nullptr),
              cudaErrorInvalidValue);
}

TEST(CudaOpsEdge, EmbeddingEveryWeightFormat) {
    SKIP_WITHOUT_GPU();
    const int V = 1000, d = 96, copies = 4;
    std::mt19937 g(51);
    const auto w = randn(size_t(V) * d, g, 0.5f);
    std::vector<int32_t> tokens = {0, V - 1, 5, 5, 123};
    for (int i = 0; i < 32; ++i) tokens.push_back(int32_t(g() % V));
    const int T = int(tokens.size());
    double worst = 0;
    for (cuda::WFmt fmt : {cuda::WFmt::kF32, cuda::WFmt::kBF16, cuda::WFmt::kFp8E8M0, cuda::WFmt::kMxfp4}) {
        const EncodedWeight ew = encode_weight(fmt, w, V, d);
        const std::vector<float>& wd = ew.dequant;
        const std::vector<uint8_t>&data = ew.data, &scale = ew.scale;
        DevFree F;
        cuda::WeightDesc desc;
        desc.fmt = fmt, desc.N = V, desc.K = d;
        desc.data = F(dev(data));
        desc.scale = scale.empty() ? nullptr : F(dev(scale));
        int32_t* dt = F(dev(tokens));
        float* out = nullptr;
        ASSERT_EQ(cudaMalloc(&out, sizeof(float) * T * copies * d), cudaSuccess);
        F(out);
        ASSERT_EQ(cuda::embed(desc, dt, T, copies, out, nullptr), cudaSuccess);
        const auto got = host(out, size_t(T) * copies * d);
        std::vector<float> want;
        for (int t = 0; t < T; ++t)
            for (int c = 0; c < copies; ++c)
                want.insert(want.end(), &wd[size_t(tokens[t]) * d], &wd[size_t(tokens[t]) * d] + d);
        const double e = max_abs_diff(got, want);
        upd(worst, e);
        EXPECT_EQ(e, 0.0) << cuda::wfmt_name(fmt);
    }
    std::printf(
        "[op embedding] f32/bf16/fp8-block/mxfp4, V=%d d=%d (edge blocks), ids 0 and V-1, x%d copies: max |err| %.3g\n",
        V, d, copies, worst);
}

TEST(CudaOpsEdge, SwigluClamp) {
    SKIP_WITHOUT_GPU();
    std::mt19937 g(61);
    const int64_t n = 1000 + 37;  // not a multiple of the block
    std::uniform_real_distribution<float> u(-20.f, 20.f);
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) a[i] = u(g), b[i] = u(g);
    a[0] = 7.0f, b[0] = -7.0f, a[1] = 7.0001f, b[1] = 100.f;  // at and past the limit
    DevFree F;
    float *da = F(dev(a)), *db = F(dev(b)), *dh = nullptr;
    ASSERT_EQ(cudaMalloc(&dh, sizeof(float) * n), cudaSuccess);
    F(dh);
    double worst_rel = 0;
    for (float lim : {7.0f, 0.0f}) {
        ASSERT_EQ(cuda::swiglu(da, db, dh, n, lim, nullptr), cudaSuccess);
        const auto got = host(dh, size_t(n));
        for (int64_t i = 0; i < n; ++i) {
            float ga = a[i], ub = b[i];
            if (lim > 0) ga = std::min(ga, lim), ub = std::clamp(ub, -lim, lim);
            const float want = ref::silu(ga) * ub;
            const double rel = std::fabs(double(got[i]) - want) / std::max(1.0, double(std::fabs(want)));
            upd(worst_rel, rel);
            EXPECT_LT(rel, 1e-6) << "i " << i << " lim " << lim;
        }
    }
    std::printf("[op swiglu clamp] n=%lld, limit 7 and off: max rel err %.3g\n", (long long)n, worst_rel);
}

// =============================================================================================
// Indexer scores + top-k on edge shapes; exact top-k at the B08 sizes.
// =============================================================================================

struct IndexerCase {
    int IH, ID, K;
    std::vector<int> batches;
    std::vector<int64_t> pos_cycle;  // positions of the sequences, cycled
    bool bf16_rows = false;          // index rows stored as bf16 (the CUDA runner's format), else f32
    bool real_values = false;        // random reals instead of small integers (exact in any order)
    int64_t idx_row_off = 100;       // word offset of the rows in a page (odd: bf16 rows read per element)
    // Every row of a sequence its first row with about 3 dims moved by one bf16 step: scores a hair
    // apart, most of them inside the filtered path's error bound (cuda::indexer_topk_filtered).
    bool near_ties = false;
    // Keys and q scaled by 2^-20 .. 2^20 per element and head weights of both signs (cancellation):
    // the approximation's error is largest against the scores there.
    bool wide_range = false;
};

// Rows scored and rows listed for exact scores by the filtered path (check_indexer_case).
struct FilterCount {
    int64_t rows = 0, listed = 0, seqs = 0;
    double worst_err_over_bound = 0;  // max |bf16 approximation - exact score| / bound over the rows
};

// Small heads (the old per-key form's shapes) and the Flash indexer (64 heads x 128, top-512, up
// to 2102 candidates: the FP64 tensor-core scorer, several 64-key tiles, the last one partial).
// Integer data: scores exact, many ties, so the selection must equal the CPU's. Real data: scores
// within one f32 ulp of the CPU's double sum, and the selection exact over the GPU's own scores.
// Where cuda::indexer_filter_applies, the filtered path (bf16 bounds, exact scores of the listed rows)
// runs on the same inputs too: the same selection, the list in row order, and the listed rows'
// scores bitwise the full path's.
void check_indexer_case(BigPool& bp, const IndexerCase& ic, int& seqs, int& ties_total, double& worst_rel,
                        FilterCount* fc = nullptr) {
    const int r = 4, IH = ic.IH, ID = ic.ID, K = ic.K;
    const int64_t idx_row_off = ic.idx_row_off;
    const int64_t row_words = ic.bf16_rows ? ID / 2 : ID;
    const int64_t max_pos = *std::max_element(ic.pos_cycle.begin(), ic.pos_cycle.end());
    for (int B : ic.batches) {
        std::mt19937 g(71 + B + IH);
        std::vector<int64_t> pos(B);
        for (int s = 0; s < B; ++s)
            pos[s] = B == 1 ? ic.pos_cycle[4 % ic.pos_cycle.size()] : ic.pos_cycle[s % ic.pos_cycle.size()];
        const int pt_stride = int(1 + max_pos / BigPool::page_tokens + 1);
        std::vector<int32_t> tables(size_t(B) * pt_stride, 0);
        std::vector<std::vector<float>> rows(B);
        int32_t next = int32_t(BigPool::n_pages - 1);
        for (int s = 0; s < B; ++s) {
            const int64_t n_c = (pos[s] + 1) / r;
            for (int i = 0; i < pt_stride; ++i) tables[size_t(s) * pt_stride + i] = (next -= 3 + int32_t(g() % 50));
            rows[s].resize(size_t(n_c) * ID);
            std::uniform_real_distribution<float> u(-1.0f, 1.0f);
            for (float& v : rows[s]) {
                v = ic.real_values ? u(g) : float(int(g() % 5) - 2);  // integers: many exactly tied scores
                if (ic.wide_range) v = std::ldexp(v, int(g() % 41) - 20);
                if (ic.bf16_rows) v = round_bf16(v);
            }
            for (int64_t w = 1; ic.near_ties && w < n_c; ++w)
                for (int i = 0; i < ID; ++i) {
                    float v = rows[s][size_t(i)];
                    if (v != 0.0f && g() % uint32_t(ID / 3) == 0)
                        v = bf16_to_f32(uint16_t(f32_to_bf16(v) + ((g() & 1) ? 1 : -1)));
                    rows[s][size_t(w) * ID + i] = v;
                }
            for (int64_t w = 0; w < n_c; ++w) {
                const int64_t page = tables[size_t(s) * pt_stride + 1 + (w * r) / BigPool::page_tokens];
                const int64_t slot = ((w * r) % BigPool::page_tokens) / r;
                float* dst = bp.base + page * BigPool::pe + idx_row_off + slot * row_words;
                if (ic.bf16_rows) {
                    std::vector<uint16_t> b(static_cast<size_t>(ID));
                    for (int i = 0; i < ID; ++i) b[size_t(i)] = f32_to_bf16(rows[s][size_t(w) * ID + i]);
                    ASSERT_EQ(cudaMemcpy(dst, b.data(), 2 * size_t(ID), cudaMemcpyHostToDevice), cudaSuccess);
                } else {
                    ASSERT_EQ(cudaMemcpy(dst, &rows[s][size_t(w) * ID], sizeof(float) * ID, cudaMemcpyHostToDevice),
                              cudaSuccess);
                }
            }
        }
        std::vector<float> q(size_t(B) * IH * ID), hw(size_t(B) * IH);
        std::uniform_real_distribution<float> uq(-1.0f, 1.0f), uw(0.05f, 1.0f);
        for (float& v : q) {
            v = ic.real_values ? uq(g) : float(int(g() % 5) - 2);
            if (ic.wide_range) v = std::ldexp(v, int(g() % 41) - 20);
        }
        for (float& v : hw) {
            if (!ic.real_values) {
                v = (g() % 2) ? 0.5f : 1.0f;
                continue;
            }
            v = uw(g);
            if (ic.wide_range && (g() & 1)) v = -v;  // two draws, in this order
        }
        std::vector<int32_t> tb(B), nt(B, 1), toks(B, 0), ps(B);
        for (int s = 0; s < B; ++s) tb[s] = s, ps[s] = int32_t(pos[s]);
        DevFree F;
        cuda::StepPlan plan;
        plan.n_seqs = B;
        plan.tok_begin = F(dev(tb));
        plan.n_tok = F(dev(nt));
        plan.start_pos = F(dev(pos));
        plan.page_table = F(dev(tables));
        plan.pt_stride = pt_stride;
        plan.tokens = F(dev(toks));
        plan.pos = F(dev(ps));
        cuda::PagePool pool{bp.base,
                            BigPool::pe,
                            1,
                            BigPool::page_tokens,
                            cuda::RowFormat{0, ID, 0, ID},
                            cuda::RowFormat{ic.bf16_rows ? 1 : 0, ID, 0, int32_t(row_words)}};
        const int64_t max_rows = (max_pos + 1) / r + 64;
        float* scores = nullptr;
        int32_t *sel = nullptr, *n_sel = nullptr;
        ASSERT_EQ(cudaMalloc(&scores, sizeof(float) * B * max_rows), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&sel, sizeof(int32_t) * B * K), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&n_sel, sizeof(int32_t) * B), cudaSuccess);
        F(scores), F(sel), F(n_sel);
        cuda::IndexerArgs a;
        a.t = 0, a.ratio = r, a.IH = IH, a.ID = ID, a.topk = K, a.idx_row_off = idx_row_off;
        a.q = F(dev(q)), a.w = F(dev(hw)), a.scores = scores, a.max_rows = max_rows, a.sel = sel, a.n_sel = n_sel;
        std::vector<int32_t> first_sel, first_n;
        for (int run = 0; run < 3; ++run) {
            ASSERT_EQ(cudaMemset(sel, 0xff, sizeof(int32_t) * B * K), cudaSuccess);
            ASSERT_EQ(cuda::indexer_topk(plan, pool, a, nullptr), cudaSuccess);
            const auto gs = host(sel, size_t(B) * K);
            const auto gn = host(n_sel, size_t(B));
            if (run > 0) {
                EXPECT_EQ(gs, first_sel) << "run " << run;
                EXPECT_EQ(gn, first_n) << "run " << run;
                continue;
            }
            first_sel = gs, first_n = gn;
            for (int s = 0; s < B; ++s) {
                const int64_t n_c = (pos[s] + 1) / r;
                std::vector<float> sc(static_cast<size_t>(n_c));
                for (int64_t c = 0; c < n_c; ++c) {
                    double acc = 0;
                    for (int h = 0; h < IH; ++h) {
                        double dot = 0;
                        for (int i = 0; i < ID; ++i)
                            dot += double(q[(size_t(s) * IH + h) * ID + i]) * rows[s][size_t(c) * ID + i];
                        acc += double(hw[size_t(s) * IH + h]) * std::max(0.0, dot);
                    }
                    sc[c] = float(acc);
                }
                const auto gsc = host(scores + int64_t(s) * max_rows, size_t(n_c));
                const bool scored = !ref::index_selects_all(n_c, K);  // else no scores are written
                for (int64_t c = 0; scored && c < n_c; ++c) {
                    const double d = std::fabs(double(gsc[size_t(c)]) - sc[size_t(c)]);
                    if (!ic.real_values) {
                        EXPECT_EQ(gsc[size_t(c)], sc[size_t(c)]) << "seq " << s << " row " << c;
                    } else {
                        const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(sc[size_t(c)]), 1e-30f)) - 23);
                        EXPECT_LE(d, ulp)
                            << "seq " << s << " row " << c << ": " << gsc[size_t(c)] << " vs " << sc[size_t(c)];
                    }
                    worst_rel = std::max(worst_rel, d / std::max(1e-30, double(std::fabs(sc[size_t(c)]))));
                }
                for (int64_t i = 1; scored && i < n_c; ++i)
                    ties_total += std::count(sc.begin(), sc.begin() + i, sc[i]) > 0;
                const auto want = ref::index_select(ic.real_values ? gsc : sc, K);
                ASSERT_EQ(gn[s], int32_t(want.size())) << "seq " << s << " n_c " << n_c;
                EXPECT_EQ(std::vector<int32_t>(gs.begin() + s * K, gs.begin() + s * K + gn[s]), want) << "seq " << s;
                for (int i = gn[s]; i < K; ++i)
                    EXPECT_EQ(gs[size_t(s) * K + i], -1) << "seq " << s << " slot " << i << " written";
                ++seqs;
            }
            if (!cuda::indexer_filter_applies(pool, a)) continue;
            float *fsc = nullptr, *lo = nullptr;
            int32_t *fsel = nullptr, *fn = nullptr, *n_cand = nullptr;
            ASSERT_EQ(cudaMalloc(&fsc, sizeof(float) * B * max_rows), cudaSuccess);
            ASSERT_EQ(cudaMalloc(&lo, sizeof(float) * B * max_rows), cudaSuccess);
            ASSERT_EQ(cudaMalloc(&fsel, sizeof(int32_t) * B * K), cudaSuccess);
            ASSERT_EQ(cudaMalloc(&fn, sizeof(int32_t) * B), cudaSuccess);
            ASSERT_EQ(cudaMalloc(&n_cand, sizeof(int32_t) * B), cudaSuccess);
            F(fsc), F(lo), F(fsel), F(fn), F(n_cand);
            ASSERT_EQ(cudaMemset(fsel, 0xff, sizeof(int32_t) * B * K), cudaSuccess);
            cuda::IndexerArgs fa = a;
            fa.scores = fsc, fa.sel = fsel, fa.n_sel = fn;
            // The bounds alone first: lo <= the exact score <= hi on every scored row (what the selection's
            // proof rests on), and how much of the bound the approximation's error takes.
            ASSERT_EQ(cuda::indexer_bounds(plan, pool, fa, cuda::IndexerFilter{lo, n_cand}, nullptr), cudaSuccess);
            for (int s = 0; s < B; ++s) {
                const int64_t n_c = (pos[s] + 1) / r;
                if (ref::index_selects_all(n_c, K)) continue;
                const auto hi_b = host(fsc + int64_t(s) * max_rows, size_t(n_c));
                const auto lo_b = host(lo + int64_t(s) * max_rows, size_t(n_c));
                const auto full = host(scores + int64_t(s) * max_rows, size_t(n_c));
                for (int64_t c = 0; c < n_c; ++c) {
                    const double h = hi_b[size_t(c)], l = lo_b[size_t(c)], x = full[size_t(c)];
                    // hi = NaN (lo = -inf): an overflowing head sum, always listed.
                    ASSERT_TRUE(std::isnan(h) || (l <= x && x <= h))
                        << "seq " << s << " row " << c << ": exact " << x << " outside [" << l << ", " << h << "]";
                    if (fc && h > l && std::isfinite(h - l))
                        fc->worst_err_over_bound =
                            std::max(fc->worst_err_over_bound, std::fabs(x - 0.5 * (h + l)) / (0.5 * (h - l)));
                }
            }
            ASSERT_EQ(cuda::indexer_topk_filtered(plan, pool, fa, cuda::IndexerFilter{lo, n_cand}, nullptr),
                      cudaSuccess);
            EXPECT_EQ(host(fsel, size_t(B) * K), gs) << "filtered selection";
            EXPECT_EQ(host(fn, size_t(B)), gn);
            const auto nc = host(n_cand, size_t(B));
            for (int s = 0; s < B; ++s) {
                const int64_t n_c = (pos[s] + 1) / r;
                if (ref::index_selects_all(n_c, K)) continue;
                // The list: rows in increasing order, each with the full path's score at its position.
                const int64_t listed = nc[size_t(s)];
                ASSERT_GE(listed, K) << "seq " << s;
                ASSERT_LE(listed, n_c) << "seq " << s;
                const auto got = host(fsc + int64_t(s) * max_rows, size_t(listed));
                const auto ids = host(reinterpret_cast<const int32_t*>(lo) + int64_t(s) * max_rows, size_t(listed));
                const auto full = host(scores + int64_t(s) * max_rows, size_t(n_c));
                for (int64_t j = 0; j < listed; ++j) {
                    const int32_t w = ids[size_t(j)];
                    ASSERT_TRUE(w >= 0 && w < n_c && (j == 0 || w > ids[size_t(j - 1)]))
                        << "seq " << s << " entry " << j;
                    EXPECT_EQ(got[size_t(j)], full[size_t(w)]) << "seq " << s << " listed row " << w;
                }
                if (fc) fc->rows += n_c, fc->listed += listed, ++fc->seqs;
            }
        }
    }
}

TEST(CudaOpsEdge, IndexerTopkEdgeShapes) {
    SKIP_WITHOUT_GPU();
    BigPool bp;
    int seqs = 0, ties = 0;
    double worst = 0;
    // n_c = 0 (B03), 1 (first row), 15, 16 (= top-k), 17 and 60 candidates for top-16.
    check_indexer_case(bp, {4, 32, 16, {1, 33}, {2, 3, 59, 63, 67, 240, 0}}, seqs, ties, worst);
    std::printf(
        "[op indexer top-k edge] %d sequences (batch 1 and 33; 0, 1, 15, 16, 17, 60 candidates for top-16), "
        "%d tied scores among the scored: selections identical to the CPU and across 3 runs\n",
        seqs, ties);
    seqs = 0, ties = 0;
    // Flash indexer shape: n_c = 0, 1, 64, 65, 66, 513, 514, 2102 candidates for top-512.
    // Batch 40: the score grid (about 2 waves of CTAs) is shorter than the 33 key tiles of the
    // longest sequence, so CTAs walk several tiles.
    const std::vector<int64_t> flash_pos = {2, 3, 255, 259, 8407, 2051, 2055, 263, 0};
    check_indexer_case(bp, {64, 128, 512, {1, 9, 40}, flash_pos}, seqs, ties, worst);
    // The same with bf16 rows, odd word offset (element loads) and even (8-byte loads).
    check_indexer_case(bp, {64, 128, 512, {9}, flash_pos, true, false, 101}, seqs, ties, worst);
    check_indexer_case(bp, {64, 128, 512, {40}, flash_pos, true, false, 128}, seqs, ties, worst);
    std::printf(
        "[op indexer top-k edge] Flash shape 64 x 128, f32 and bf16 rows: %d sequences (0 .. 2102 candidates "
        "for top-512), %d tied scores: scores and selections identical to the CPU and across 3 runs\n",
        seqs, ties);
    seqs = 0, ties = 0;
    // Random reals (no ties): scores within one f32 ulp of the CPU's double sum; 64, 48 and 16 heads
    // (padded head tiles), bf16 rows with 8-byte loads, ID 64.
    FilterCount fc;
    check_indexer_case(bp, {64, 128, 512, {9, 40}, flash_pos, true, true, 128}, seqs, ties, worst, &fc);
    check_indexer_case(bp, {48, 128, 512, {9}, flash_pos, false, true}, seqs, ties, worst);
    check_indexer_case(bp, {16, 64, 32, {33}, flash_pos, true, true, 64}, seqs, ties, worst, &fc);
    std::printf("[op indexer scores] random reals: %d sequences, worst relative score error %.3g vs the CPU (double)\n",
                seqs, worst);
    std::printf(
        "[op indexer filter] random reals: %lld scored sequences, %lld of %lld rows listed for exact scores, "
        "selections identical to the full path\n",
        (long long)fc.seqs, (long long)fc.listed, (long long)fc.rows);
}

// The filtered indexer top-k (cuda::indexer_topk_filtered) where its bound matters: integer data
// (exact ties at the k-th score, broken by index) and rows a bf16 step apart (most scores inside the
// bound), 64 and 16 heads, up to 2,102 rows for top-512: the selection must be the full path's.
TEST(CudaOpsEdge, IndexerFilterSameSelection) {
    SKIP_WITHOUT_GPU();
    BigPool bp;
    int seqs = 0, ties = 0;
    double worst = 0;
    const std::vector<int64_t> flash_pos = {2, 3, 255, 259, 8407, 2051, 2055, 263, 0};
    FilterCount ties_fc, near_fc;
    check_indexer_case(bp, {64, 128, 512, {40}, flash_pos, true, false, 128}, seqs, ties, worst, &ties_fc);
    check_indexer_case(bp, {64, 128, 512, {9}, flash_pos, true, true, 128, true}, seqs, ties, worst, &near_fc);
    check_indexer_case(bp, {16, 64, 32, {33}, flash_pos, true, true, 64, true}, seqs, ties, worst, &near_fc);
    FilterCount wide_fc;
    check_indexer_case(bp, {64, 128, 512, {9}, flash_pos, true, true, 128, false, true}, seqs, ties, worst, &wide_fc);
    check_indexer_case(bp, {48, 64, 32, {33}, flash_pos, true, true, 64, false, true}, seqs, ties, worst, &wide_fc);
    EXPECT_GT(ties_fc.seqs, 0);
    EXPECT_GT(near_fc.seqs, 0);
    EXPECT_GT(wide_fc.seqs, 0);
    std::printf(
        "[op indexer filter] keys and q over 2^-20 .. 2^20, weights of both signs: %lld sequences, %lld of "
        "%lld rows listed; worst |approximation - exact| / bound %.3g (integer data %.3g, near ties %.3g)\n",
        (long long)wide_fc.seqs, (long long)wide_fc.listed, (long long)wide_fc.rows, wide_fc.worst_err_over_bound,
        ties_fc.worst_err_over_bound, near_fc.worst_err_over_bound);
    std::printf(
        "[op indexer filter] integer data: %lld sequences, %lld of %lld rows listed; rows a bf16 step apart: "
        "%lld sequences, %lld of %lld rows listed; selections identical to the full path\n",
        (long long)ties_fc.seqs, (long long)ties_fc.listed, (long long)ties_fc.rows, (long long)near_fc.seqs,
        (long long)near_fc.listed, (long long)near_fc.rows);
}

TEST(CudaOpsEdge, TopkExactAtB08Sizes) {
    SKIP_WITHOUT_GPU();
    std::mt19937 g(81);
    int configs = 0;
    for (int n : {2047, 2049, 16385}) {
        for (int k : {512, 2048}) {
            if (k > n) continue;
            for (int R : {1, 33}) {
                for (int dist = 0; dist < 3; ++dist) {
                    std::vector<float> s(size_t(R) * n);
                    std::normal_distribution<float> nd;
                    std::uniform_real_distribution<float> ud(1.0f, 1.25f);
                    for (float& v : s) v = dist == 0 ? nd(g) : dist == 1 ? ud(g) : float(int(g() % 8)) * 0.125f;
                    DevFree F;
                    float* ds = F(dev(s));
                    int32_t* di = nullptr;
                    ASSERT_EQ(cudaMalloc(&di, sizeof(int32_t) * R * k), cudaSuccess);
                    F(di);
                    ASSERT_EQ(cuda::topk_rows(ds, R, n, k, di, nullptr), cudaSuccess);
                    const auto got = host(di, size_t(R) * k);
                    ASSERT_EQ(cuda::topk_rows(ds, R, n, k, di, nullptr), cudaSuccess);
                    EXPECT_EQ(host(di, size_t(R) * k), got) << "second run differs";
                    for (int row = 0; row < R; ++row) {
                        const std::span<const float> sr(&s[size_t(row) * n], size_t(n));
                        EXPECT_EQ(
                            std::vector<int32_t>(got.begin() + size_t(row) * k, got.begin() + size_t(row + 1) * k),
                            ref::topk_indices(sr, k))
                            << "n " << n << " k " << k << " R " << R << " dist " << dist << " row " << row;
                    }
                    ++configs;
                }
            }
        }
    }
    std::printf(
        "[op top-k B08] %d configs (n 2047/2049/16385, k 512/2048, rows 1/33, normal / [1,1.25) / 8 tied values): "
        "identical to the CPU, stable across runs\n",
        configs);
}

}  // namespace
}  // namespace dsv4
