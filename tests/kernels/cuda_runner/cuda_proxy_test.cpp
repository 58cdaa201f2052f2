// The Flash proxy path of the CUDA runner at reduced shapes: synthetic weights generated on the GPU
// (byte tally == the bytes model), a synthetic context fill, graph replay == eager execution for
// one decode step, finite and non-degenerate logits, and the bench timing hook. Plus the synthetic
// generators' value ranges (valid codes, never NaN). Label `cuda`; skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <functional>
#include <cstring>
#include <set>

#include "kernels/cuda/synth/synth.h"
#include "model/flash_proxy.h"
#include "model/kv_layout.h"
#include "model/kv_rows.h"
#include "runtime/cuda_bench_runner.h"
#include "runtime/synthetic_context.h"

namespace dsv4 {
namespace {

// Flash proxy layer kinds at small shapes (the benchmark uses flash_proxy_config unchanged).
ModelConfig reduced_proxy() {
    FlashProxySpec sp{3, {AttnType::kSliding, AttnType::kCSA, AttnType::kHCA}, 1};
    ModelConfig c = *flash_proxy_config(sp);
    c.vocab_size = 1000;
    c.hidden_size = 256;
    c.n_heads = 8;
    c.head_dim = 128;
    c.q_lora_rank = 128;
    c.o_lora_rank = 64;
    c.o_groups = 2;
    c.index_n_heads = 4;
    c.index_head_dim = 64;
    c.index_topk = 16;
    c.n_routed_experts = 16;
    c.n_experts_per_tok = 2;
    c.moe_intermediate_size = 128;
    EXPECT_TRUE(c.validate().is_ok());
    return c;
}

struct Proxy {
    std::unique_ptr<CudaBenchRunner> runner;
    ProxyWeightBytes bytes;
};

// pdl, pdl_max_batch: RuntimeOptions::graph_pdl and graph_pdl_max_batch.
Proxy make_proxy(const ModelConfig& cfg, bool graphs, const std::string& rows, bool pdl = false,
                 int pdl_max_batch = 0) {
    CudaRunnerOptions o;
    o.n_pages = 1024;
    o.max_seqs = 8;
    o.max_step_tokens = 64;
    o.max_context = 4096;
    o.rt.cuda_graphs = graphs;
    o.rt.graph_pdl = pdl;  // on by default (batch-1 graphs): the plain runner turns it off
    o.rt.graph_pdl_max_batch = pdl_max_batch;
    o.rt.kv_rows = rows;
    o.verbose = false;
    SyntheticWeightsOptions w;
    w.seed = 11;
    Proxy p;
    auto r = make_cuda_runner_synthetic(cfg, w, o, &p.bytes);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    if (r.is_ok()) p.runner = std::move(*r);
    return p;
}

// One decode step of B sequences at position L after a synthetic fill; logits [B][V].
std::vector<std::vector<float>> step(CudaBenchRunner& r, const ModelConfig& cfg, int B, int64_t L) {
    EXPECT_TRUE(fill_synthetic_context(r.pool_info(), r.kv_layout(), cfg, B, L, 5).is_ok());
    std::vector<std::vector<int32_t>> tables, toks;
    for (int s = 0; s < B; ++s) {
        tables.push_back(synthetic_page_table(r.kv_layout(), s, L));
        toks.push_back({int32_t((97 * s + 13) % cfg.vocab_size)});
    }
    ForwardBatch b;
    for (int s = 0; s < B; ++s) b.seqs.push_back(SeqChunk{s, toks[size_t(s)], L, true, tables[size_t(s)]});
    std::vector<std::vector<float>> logits;
    const Status st = r.forward(b, logits);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return logits;
}

TEST(CudaProxy, GraphReplayEqualsEagerWithFiniteLogits) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    const ModelConfig cfg = reduced_proxy();
    for (const std::string rows : {"f32", "bf16"}) {
        Proxy g = make_proxy(cfg, true, rows), e = make_proxy(cfg, false, rows);
        ASSERT_TRUE(g.runner && e.runner);
        const ProxyWeightBytes want = proxy_weight_bytes(cfg);
        EXPECT_EQ(g.bytes.streamed, want.streamed);
        EXPECT_EQ(g.bytes.experts, want.experts);
        EXPECT_EQ(g.bytes.embed, want.embed);
        EXPECT_EQ(g.bytes.tables, want.tables);
        EXPECT_EQ(g.bytes.streamed_params, want.streamed_params);
        // B = 3 runs in the bucket-4 graph (one padded sequence); context 1000: 250 CSA rows
        // (> top-k 16), 7 HCA rows, a full window ring.
        const int B = 3;
        const int64_t L = 1000;
        const auto lg = step(*g.runner, cfg, B, L);
        const auto le = step(*e.runner, cfg, B, L);
        ASSERT_EQ(lg.size(), size_t(B));
        ASSERT_EQ(le.size(), size_t(B));
        double worst = 0, sum = 0, sum2 = 0;
        int64_t n = 0, nonfinite = 0;
        for (int s = 0; s < B; ++s) {
            ASSERT_EQ(lg[s].size(), size_t(cfg.vocab_size));
            for (size_t i = 0; i < lg[s].size(); ++i) {
                nonfinite += !std::isfinite(lg[s][i]);
                worst = std::max(worst, double(std::fabs(lg[s][i] - le[s][i])));
                sum += lg[s][i];
                sum2 += double(lg[s][i]) * lg[s][i];
                ++n;
            }
        }
        const double sd = std::sqrt(std::max(0.0, sum2 / n - (sum / n) * (sum / n)));
        std::printf("[proxy %s] graph vs eager max |diff| %.3g, logit sd %.3g\n", rows.c_str(), worst, sd);
        EXPECT_EQ(nonfinite, 0);
        EXPECT_GT(sd, 1e-3);  // not degenerate
        EXPECT_LE(worst, 1e-4 * std::max(1.0, sd));
        // Different sequences (different tokens and context values) give different logits.
        EXPECT_NE(lg[0], lg[1]);

        ForwardBatch b;
        std::vector<std::vector<int32_t>> tables, toks;
        for (int s = 0; s < B; ++s) {
            tables.push_back(synthetic_page_table(g.runner->kv_layout(), s, L));
            toks.push_back({int32_t(s)});
        }
        for (int s = 0; s < B; ++s) b.seqs.push_back(SeqChunk{s, toks[size_t(s)], L, true, tables[size_t(s)]});
        auto t = g.runner->time_decode_graph(b, 1, 5);
        ASSERT_TRUE(t.is_ok()) << t.status().message();
        EXPECT_EQ(t->bucket, 4);
        ASSERT_EQ(t->step_us.size(), 5u);
        ASSERT_EQ(t->head_us.size(), 5u);
        for (double v : t->step_us) EXPECT_GT(v, 0.0);
        for (double v : t->head_us) EXPECT_GT(v, 0.0);
    }
}

// Runs `reps` steps of B sequences at L on `r` and counts the logit rows that differ in any bit from
// `want` (the plain graph's rows of the same step).
int rows_differing(CudaBenchRunner& r, const ModelConfig& cfg, int B, int64_t L, int reps,
                   const std::vector<std::vector<float>>& want) {
    int differ = 0;
    for (int rep = 0; rep < reps; ++rep) {
        const auto got = step(r, cfg, B, L);
        EXPECT_EQ(got.size(), size_t(B));
        for (size_t s = 0; s < got.size() && s < want.size(); ++s)
            differ += std::memcmp(got[s].data(), want[s].data(), want[s].size() * sizeof(float)) != 0;
    }
    return differ;
}

// graph_pdl: the same kernels in the same order, started early and waiting on the GPU, so the logits
// must be the same bits as the plain graph's. Repeated replays give a missing wait (a kernel touching
// memory before griddepcontrol.wait) chances to show up as a difference.
TEST(CudaProxy, ProgrammaticGraphEdgesGiveTheSameLogits) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    const ModelConfig cfg = reduced_proxy();
    for (const std::string rows : {"f32", "bf16"}) {  // fp8 rows need head_dim 512: the Flash-shape test below
        Proxy plain = make_proxy(cfg, true, rows), pdl = make_proxy(cfg, true, rows, true);
        ASSERT_TRUE(plain.runner && pdl.runner);
        for (const int B : {1, 3, 8}) {
            const int64_t L = 1000 + 37 * B;
            const auto want = step(*plain.runner, cfg, B, L);
            ASSERT_EQ(want.size(), size_t(B));
            EXPECT_EQ(rows_differing(*pdl.runner, cfg, B, L, 8, want), 0) << rows << " B=" << B;
        }
        const auto r = pdl.runner->graph_replays();
        std::printf("[proxy %s] graph_pdl: %lld programmatic edges in %lld decode replays\n", rows.c_str(),
                    static_cast<long long>(r.pdl_edges), static_cast<long long>(r.decode));
        EXPECT_GT(r.pdl_edges, 0);      // the option took effect
        EXPECT_EQ(r.pdl_fallbacks, 0);  // and the driver took the programmatic edges
        EXPECT_EQ(plain.runner->graph_replays().pdl_edges, 0);
        EXPECT_GE(r.decode, 24);  // every step above replayed a graph
    }
    // graph_pdl_max_batch: only the graphs of buckets up to it get programmatic edges (all four buckets
    // 1, 2, 4, 8 are captured at start-up; the limit 2 leaves 4 and 8 with ordinary edges).
    int64_t edges[2] = {0, 0};
    for (int v = 0; v < 2; ++v) {
        const Proxy p = make_proxy(cfg, true, "bf16", true, v == 0 ? 0 : 2);
        ASSERT_TRUE(p.runner);
        edges[v] = p.runner->graph_replays().pdl_edges;
    }
    std::printf("[proxy] programmatic edges at start-up: %lld every bucket, %lld buckets 1-2\n",
                static_cast<long long>(edges[0]), static_cast<long long>(edges[1]));
    EXPECT_GT(edges[1], 0);
    EXPECT_LT(edges[1], edges[0]);
}

// Flash's matrix shapes at 3 layers (sliding, CSA, HCA) and a 4,096-entry vocabulary, where decode
// steps take the fast kernels.
ModelConfig flash_shapes() {
    FlashProxySpec sp{3, {AttnType::kSliding, AttnType::kCSA, AttnType::kHCA}, 1};
    ModelConfig cfg = *flash_proxy_config(sp);
    cfg.vocab_size = 4096;
    EXPECT_TRUE(cfg.validate().is_ok());
    return cfg;
}

// A synthetic-weight runner of cfg with room for max_b sequences at position L (FP8 rows), its
// run-time options set by `rt`; null (and a test failure) when it cannot be built.
std::unique_ptr<CudaBenchRunner> flash_runner(const ModelConfig& cfg, int max_b, int64_t L, uint32_t seed,
                                              const std::function<void(RuntimeOptions&)>& rt) {
    auto layout = KvLayout::make(cfg, 64, 4, KvRowFormat::kFp8);
    EXPECT_TRUE(layout.is_ok()) << layout.status().message();
    if (!layout.is_ok()) return nullptr;
    CudaRunnerOptions o;
    o.n_pages = max_b * layout->pages_for_tokens(L + 1);
    o.max_seqs = max_b;
    o.max_step_tokens = max_b;
    o.max_context = 1024;
    rt(o.rt);
    o.verbose = false;
    SyntheticWeightsOptions w;
    w.seed = seed;
    auto r = make_cuda_runner_synthetic(cfg, w, o);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? std::move(*r) : nullptr;
}

// The same at Flash's matrix shapes, where decode steps take the fast kernels: the GEMV and
// K-chunked GEMM rows, sparse_decode, and from 256 sequences the decode GEMMs and the persistent
// grouped expert GEMM.
TEST(CudaProxy, ProgrammaticGraphEdgesGiveTheSameLogitsAtFlashShapes) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    const ModelConfig cfg = flash_shapes();
    const int64_t L = 300;
    const int max_b = 256;
    std::unique_ptr<CudaBenchRunner> runners[2];
    for (int v = 0; v < 2; ++v) {
        runners[v] = flash_runner(cfg, max_b, L, 5, [&](RuntimeOptions& rt) {
            rt.graph_pdl = v == 1;
            rt.graph_pdl_max_batch = 0;
        });
        ASSERT_TRUE(runners[v]);
    }
    for (const int B : {1, 8, 64, 256}) {
        const auto want = step(*runners[0], cfg, B, L);
        ASSERT_EQ(want.size(), size_t(B));
        EXPECT_EQ(rows_differing(*runners[1], cfg, B, L, 4, want), 0) << "B=" << B;
    }
    std::printf("[flash shapes] graph_pdl: %lld programmatic edges\n",
                static_cast<long long>(runners[1]->graph_replays().pdl_edges));
    EXPECT_GT(runners[1]->graph_replays().pdl_edges, 0);
}

// decode_q_bf16: decode steps write sparse_decode's bf16 q rows from q's norm and RoPE directly
// (norm_rope_to_bf16) instead of f32 q then q_rows_bf16; the same roundings, so the same logits bit
// for bit, in graphs (B = 3 runs in the bucket-4 graph: a padded sequence) and eagerly.
TEST(CudaProxy, DecodeQBf16GivesTheSameLogitsAtFlashShapes) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    const ModelConfig cfg = flash_shapes();
    const int64_t L = 300;
    const int max_b = 8;
    for (const bool graphs : {true, false}) {
        std::unique_ptr<CudaBenchRunner> runners[2];
        for (int v = 0; v < 2; ++v) {
            runners[v] = flash_runner(cfg, max_b, L, 7, [&](RuntimeOptions& rt) {
                rt.cuda_graphs = graphs;
                rt.decode_q_bf16 = v == 1;
            });
            ASSERT_TRUE(runners[v]);
        }
        for (const int B : {1, 3, 8}) {
            const auto want = step(*runners[0], cfg, B, L);
            ASSERT_EQ(want.size(), size_t(B));
            EXPECT_EQ(rows_differing(*runners[1], cfg, B, L, 2, want), 0) << "B=" << B << " graphs " << graphs;
        }
        EXPECT_EQ(runners[0]->decode_q_bf16_layers(), 0);
        EXPECT_GT(runners[1]->decode_q_bf16_layers(), 0) << "the direct bf16 q path never ran";
    }
}

TEST(CudaProxy, FillErrorsWhenThePoolIsTooSmall) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    const ModelConfig cfg = reduced_proxy();
    Proxy p = make_proxy(cfg, true, "f32");
    ASSERT_TRUE(p.runner);
    const Status s = fill_synthetic_context(p.runner->pool_info(), p.runner->kv_layout(), cfg, 8, 100000, 1);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

template <class T>
std::vector<T> download(const void* d, size_t n) {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
}
float bf16_f32(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Batched prefill on the shapes that take the fast prefill kernels (FP8 dense weights with K % 512
// == 0, q 512 per head, MXFP4 experts with d and I multiples of 512), against the token loop:
// 0 the token loop (batched_prefill off), 1 the defaults (cuBLASLt projections, bf16 x and q,
// the wgmma prefill attention and grouped expert GEMM), 2 the defaults without prefill_q_bf16,
// 3 the defaults with the balanced expert rows forced. Two chunks (300 then 200 tokens: one step
// from position 0, one with 300 tokens of context). Within 3% of the logit scale of the token loop
// (bf16 roundings the token loop does not make); runner 1 and 2 must differ in bits (the bf16 q
// path ran). (Runner 3 may equal runner 1 bit for bit: a tile's width does not change the order in
// which an output's products are summed.)
TEST(CudaProxy, FastPrefillPathsMatchTheTokenLoop) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    FlashProxySpec sp{3, {AttnType::kSliding, AttnType::kCSA, AttnType::kHCA}, 1};
    ModelConfig cfg = *flash_proxy_config(sp);
    cfg.vocab_size = 1000;
    cfg.hidden_size = 1024;
    cfg.n_heads = 16;
    cfg.q_lora_rank = 512;
    cfg.o_groups = 2;
    cfg.o_lora_rank = 512;
    cfg.n_routed_experts = 32;
    cfg.moe_intermediate_size = 512;
    ASSERT_TRUE(cfg.validate().is_ok());
    const int n1 = 300, n2 = 200;
    std::vector<int32_t> prompt(n1 + n2);
    for (int i = 0; i < n1 + n2; ++i) prompt[size_t(i)] = int32_t((37 * i + 11) % cfg.vocab_size);
    std::vector<std::vector<float>> out[4];
    for (int v = 0; v < 4; ++v) {
        CudaRunnerOptions o;
        o.n_pages = 512;
        o.max_seqs = 4;
        o.max_step_tokens = 512;
        o.max_context = 1024;
        o.rt.batched_prefill = v != 0;
        o.rt.prefill_q_bf16 = v != 2;
        if (v == 3) o.rt.moe_gemm_variant = "moe_wgmma_pk_t128_s6_ws_bal";
        o.verbose = false;
        SyntheticWeightsOptions w;
        w.seed = 5;
        auto r = make_cuda_runner_synthetic(cfg, w, o);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        const std::vector<int32_t> table = synthetic_page_table((*r)->kv_layout(), 0, n1 + n2);
        for (int c = 0; c < 2; ++c) {
            ForwardBatch b;
            const int64_t start = c == 0 ? 0 : n1;
            b.seqs.push_back(SeqChunk{0, std::span<const int32_t>(prompt).subspan(size_t(start), c == 0 ? n1 : n2),
                                      start, true, table});
            std::vector<std::vector<float>> logits;
            const Status st = (*r)->forward(b, logits);
            ASSERT_TRUE(st.is_ok()) << st.message();
            ASSERT_EQ(logits.size(), 1u);
            out[v].push_back(logits[0]);
        }
    }
    double scale = 0;
    for (const auto& row : out[0])
        for (float x : row) scale = std::max(scale, double(std::fabs(x)));
    ASSERT_GT(scale, 0.0);
    for (int v = 1; v < 4; ++v)
        for (int c = 0; c < 2; ++c) {
            ASSERT_EQ(out[v][size_t(c)].size(), out[0][size_t(c)].size());
            double worst = 0;
            int64_t nonfinite = 0;
            for (size_t i = 0; i < out[0][size_t(c)].size(); ++i) {
                nonfinite += !std::isfinite(out[v][size_t(c)][i]);
                worst = std::max(worst, double(std::fabs(out[v][size_t(c)][i] - out[0][size_t(c)][i])));
            }
            std::printf(
                "[proxy prefill] runner %d chunk %d: max |diff| to the token loop %.3g (%.3g of the logit scale "
                "%.3g)\n",
                v, c, worst, worst / scale, scale);
            EXPECT_EQ(nonfinite, 0);
            EXPECT_LT(worst, 0.03 * scale) << "runner " << v << " chunk " << c;
        }
    EXPECT_NE(out[1], out[2]) << "prefill_q_bf16 changed nothing: the bf16 q path did not run";
}

TEST(CudaProxy, SyntheticGeneratorsGiveValidCodes) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    namespace sy = cuda::synth;
    const int64_t n = 1 << 16;
    void* buf = nullptr;
    ASSERT_EQ(cudaMalloc(&buf, 8 * n), cudaSuccess);
    // e4m3: never NaN (0x7f / 0xff), exponent field 5..8, both signs.
    ASSERT_EQ(sy::fill_e4m3(buf, n, 3, nullptr), cudaSuccess);
    auto e = download<uint8_t>(buf, n);
    int neg = 0;
    for (uint8_t b : e) {
        ASSERT_NE(b & 0x7f, 0x7f);
        const int ex = (b >> 3) & 15;
        ASSERT_GE(ex, 5);
        ASSERT_LE(ex, 8);
        neg += b >> 7;
    }
    EXPECT_GT(neg, n / 3);
    EXPECT_LT(neg, 2 * n / 3);
    // UE8M0 within the asked range; same seed, same bytes.
    ASSERT_EQ(sy::fill_ue8m0(buf, n, 4, 119, 120, nullptr), cudaSuccess);
    auto s1 = download<uint8_t>(buf, n);
    for (uint8_t b : s1) ASSERT_TRUE(b == 119 || b == 120);
    ASSERT_EQ(sy::fill_ue8m0(buf, n, 4, 119, 120, nullptr), cudaSuccess);
    EXPECT_EQ(download<uint8_t>(buf, n), s1);
    // MXFP4 bytes use all 16 codes.
    ASSERT_EQ(sy::fill_mxfp4(buf, n, 5, nullptr), cudaSuccess);
    std::set<int> codes;
    for (uint8_t b : download<uint8_t>(buf, n)) codes.insert(b & 15), codes.insert(b >> 4);
    EXPECT_EQ(codes.size(), 16u);
    // bf16 uniform in [-amp, amp), non-zero in the bulk.
    ASSERT_EQ(sy::fill_bf16(buf, n, 6, 0.5f, nullptr), cudaSuccess);
    int zeros = 0;
    for (uint16_t b : download<uint16_t>(buf, n)) {
        const float v = bf16_f32(b);
        ASSERT_TRUE(std::isfinite(v));
        ASSERT_LE(std::fabs(v), 0.5f);
        zeros += v == 0.0f;
    }
    EXPECT_LT(zeros, 16);
    // tid2eid: k distinct experts per row, within the hot set.
    ASSERT_EQ(sy::fill_tid2eid(static_cast<int32_t*>(buf), 1000, 6, 32, 7, nullptr), cudaSuccess);
    auto t = download<int32_t>(buf, 6000);
    std::set<int> used;
    for (int v = 0; v < 1000; ++v) {
        std::set<int> row(t.begin() + 6 * v, t.begin() + 6 * v + 6);
        ASSERT_EQ(row.size(), 6u);
        for (int x : row) ASSERT_TRUE(x >= 0 && x < 32);
        used.insert(row.begin(), row.end());
    }
    EXPECT_EQ(used.size(), 32u);
    // FP8 584-byte rows: valid e4m3 codes, finite bf16 RoPE dims, scales 124..128, zero pad.
    ASSERT_EQ(cudaMemset(buf, 0xff, 8 * n), cudaSuccess);
    int32_t* ids = nullptr;
    sy::KvFillRegion* reg = nullptr;
    ASSERT_EQ(cudaMalloc(&ids, 2 * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&reg, sizeof(sy::KvFillRegion)), cudaSuccess);
    const int32_t hid[2] = {0, 2};
    const sy::KvFillRegion r{64, 584, 20, 512, sy::KvFillKind::kFp8Row584};
    ASSERT_EQ(cudaMemcpy(ids, hid, sizeof(hid), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(reg, &r, sizeof(r), cudaMemcpyHostToDevice), cudaSuccess);
    const int64_t page_bytes = 64 + 20 * 584 + 8;
    ASSERT_EQ(sy::fill_kv_pages(buf, page_bytes, ids, 2, reg, 1, 9, nullptr), cudaSuccess);
    auto pg = download<uint8_t>(buf, size_t(3 * page_bytes));
    for (int p : {0, 2}) {
        const uint8_t* page = pg.data() + p * page_bytes;
        EXPECT_EQ(page[0], 0xff);  // outside the region: untouched
        for (int row = 0; row < 20; ++row) {
            const uint8_t* q = page + 64 + row * 584;
            for (int i = 0; i < 448; ++i) ASSERT_NE(q[i] & 0x7f, 0x7f);
            for (int i = 0; i < 64; ++i) {
                uint16_t b;
                std::memcpy(&b, q + 448 + 2 * i, 2);
                ASSERT_TRUE(std::isfinite(bf16_f32(b)));
            }
            for (int i = 0; i < 7; ++i) ASSERT_TRUE(q[576 + i] >= 124 && q[576 + i] <= 128);
            ASSERT_EQ(q[583], 0);
        }
    }
    EXPECT_EQ(pg[size_t(page_bytes) + 100], 0xff);  // page 1 not in the list
    cudaFree(ids);
    cudaFree(reg);
    cudaFree(buf);
}

}  // namespace
}  // namespace dsv4
