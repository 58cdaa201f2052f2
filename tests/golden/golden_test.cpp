// Golden tests: the CPU reference forward against transformers' DeepseekV4ForCausalLM (FP32,
// eager) on tiny random models in the official checkpoint layout (tests/data/golden, made by
// tools/golden/make_golden.py). Covers one-shot logits at every residue around the compression
// boundaries and past 2,000 tokens, per-layer outputs and indexer selections, chunked-prefill and
// prefill-vs-decode invariance (B01, B02, B04), and greedy continuations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "model/checkpoint.h"
#include "model/ref_model.h"
#include "model/ref_speculative.h"
#include "runtime/ref_runner.h"
#include "runtime/runner_factory.h"
#include "sched/engine_core.h"

#ifndef DSV4_GOLDEN_DIR
#error "DSV4_GOLDEN_DIR must point at tests/data/golden"
#endif

namespace dsv4 {
namespace {

constexpr double kLogitTol = 1e-4;  // HF self-consistency is ~4e-6 (README); FP32 engine vs HF

struct Golden {
    std::shared_ptr<const RefModel> model;
    std::unique_ptr<Checkpoint> expected;
    std::vector<int32_t> ids;
    std::vector<int32_t> lengths;
    std::vector<float> logits;                        // [lengths, V]
    std::vector<int32_t> probes;                      // probe positions
    std::vector<float> all_logits;                    // our one-shot forward, [2200, V]
    std::map<std::string, std::vector<float>> dumps;  // our named outputs of the one-shot forward
};

std::map<std::string, Golden>& cache() {
    static std::map<std::string, Golden> c;
    return c;
}

std::vector<float> expected_f32(const Golden& g, const std::string& name) {
    auto v = g.expected->get(name);
    EXPECT_TRUE(v.is_ok()) << v.status().to_string();
    if (!v.is_ok()) return {};
    auto r = load_f32(*g.expected, name, v->shape);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : std::vector<float>{};
}

std::vector<int32_t> expected_i32(const Golden& g, const std::string& name) {
    auto v = g.expected->get(name);
    if (!v.is_ok()) return {};
    auto r = load_i32(*g.expected, name, v->shape);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : std::vector<int32_t>{};
}

// Runs `chunks` (sizes) over ids with a fresh page table; returns the last logits of each chunk.
std::vector<std::vector<float>> run_chunks(RefRunner& runner, const std::vector<int32_t>& ids,
                                           const std::vector<int64_t>& chunks, int64_t seq_id = 1) {
    SimplePagePool pool(runner.n_pages());
    std::vector<int32_t> table;
    int64_t total = 0;
    for (int64_t c : chunks) total += c;
    EXPECT_TRUE(pool.grow(table, runner.kv_layout().pages_for_tokens(total)));
    // Scatter the pages so that page ids are not contiguous (page-layout invariance).
    std::reverse(table.begin() + runner.kv_layout().n_state_pages, table.end());
    std::vector<std::vector<float>> out;
    int64_t pos = 0;
    for (int64_t c : chunks) {
        std::vector<float> logits;
        SeqChunk sc{seq_id, std::span<const int32_t>(ids.data() + pos, size_t(c)), pos, true, table};
        Status s = runner.forward_seq(sc, {}, logits);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        out.push_back(logits);
        pos += c;
    }
    return out;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
        m = std::max(m, double(std::fabs(a[i] - b[i])));
    }
    return m;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
protected:
    Golden& g() {
        Golden& gd = cache()[GetParam()];
        if (gd.model) return gd;
        const std::string dir = std::string(DSV4_GOLDEN_DIR) + "/" + GetParam();
        auto m = load_ref_model(dir, 0);
        EXPECT_TRUE(m.is_ok()) << m.status().to_string();
        if (!m.is_ok()) return gd;
        gd.model = *m;
        auto e = Checkpoint::open(dir + "/expected.safetensors");
        EXPECT_TRUE(e.is_ok()) << e.status().to_string();
        gd.expected = std::make_unique<Checkpoint>(std::move(e).value());
        gd.ids = expected_i32(gd, "input_ids");
        gd.lengths = expected_i32(gd, "logits.lengths");
        gd.logits = expected_f32(gd, "logits");
        gd.probes = expected_i32(gd, "positions");
        // Our one-shot forward over the whole prompt, all positions, with named dumps.
        auto runner = make_runner(16);
        SimplePagePool pool(runner->n_pages());
        std::vector<int32_t> table;
        pool.grow(table, runner->kv_layout().pages_for_tokens(int64_t(gd.ids.size())));
        RefForwardOptions opt;
        opt.all_logits = true;
        opt.dump = [&gd](const std::string& name, std::span<const float> data, std::vector<int64_t>) {
            gd.dumps[name].assign(data.begin(), data.end());
        };
        Status s = runner->forward_seq(SeqChunk{1, gd.ids, 0, true, table}, opt, gd.all_logits);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        return gd;
    }
    std::unique_ptr<RefRunner> make_runner(int64_t page_tokens) {
        Golden& gd = cache()[GetParam()];
        auto layout = KvLayout::make(gd.model->config(), page_tokens, 4);
        EXPECT_TRUE(layout.is_ok()) << layout.status().to_string();
        const int64_t n_pages = layout->pages_for_tokens(2300) + 4;
        auto r = RefRunner::create(gd.model, page_tokens, n_pages);
        EXPECT_TRUE(r.is_ok()) << r.status().to_string();
        return std::move(r).value();
    }
    int64_t V() { return g().model->config().vocab_size; }
    std::span<const float> ours_at(int64_t pos) {
        return std::span<const float>(g().all_logits).subspan(size_t(pos * V()), size_t(V()));
    }
    std::span<const float> golden_for_length(int64_t L) {
        const auto& ls = g().lengths;
        auto it = std::find(ls.begin(), ls.end(), int32_t(L));
        if (it == ls.end()) return {};
        return std::span<const float>(g().logits).subspan(size_t(it - ls.begin()) * V(), size_t(V()));
    }
};

TEST_P(GoldenTest, OneShotLogitsMatchTransformers) {
    Golden& gd = g();
    ASSERT_TRUE(gd.model);
    double worst = 0;
    int64_t worst_len = 0;
    for (size_t j = 0; j < gd.lengths.size(); ++j) {
        const int64_t L = gd.lengths[j];
        const double e = max_abs_diff(ours_at(L - 1), golden_for_length(L));
        if (e > worst) worst = e, worst_len = L;
        EXPECT_LT(e, kLogitTol) << "prefix length " << L;
    }
    std::printf("[golden %s] one-shot: %zu prefix lengths, max |logit error| %.3g (at length %lld)\n",
                GetParam().c_str(), gd.lengths.size(), worst, (long long)worst_len);
}

TEST_P(GoldenTest, PerLayerOutputsMatchTransformers) {
    Golden& gd = g();
    ASSERT_TRUE(gd.model);
    const ModelConfig& cfg = gd.model->config();
    const int64_t d = cfg.hidden_size, n = cfg.hc_mult;
    // Compare the first op that diverges, in forward order.
    for (int l = 0; l < cfg.n_layers; ++l) {
        for (const char* op : {"attn_out", "ffn_out", "out"}) {
            const std::string name = "L" + std::to_string(l) + "." + op;
            const std::vector<float> want = expected_f32(gd, name);
            const std::vector<float>& have = gd.dumps[name];
            const int64_t width = std::string(op) == "out" ? n * d : d;
            ASSERT_EQ(want.size(), gd.probes.size() * size_t(width)) << name;
            double worst = 0, scale = 0;
            for (size_t k = 0; k < gd.probes.size(); ++k)
                for (int64_t i = 0; i < width; ++i) {
                    const float a = have[size_t(gd.probes[k] * width + i)], b = want[k * width + i];
                    worst = std::max(worst, double(std::fabs(a - b)));
                    scale = std::max(scale, double(std::fabs(b)));
                }
            EXPECT_LT(worst, 1e-4 * std::max(1.0, scale)) << name << " first diverges (max error " << worst << ")";
            if (worst >= 1e-4 * std::max(1.0, scale)) return;
        }
        // Indexer selections as sets (CSA layers).
        if (cfg.layer_types[l] != AttnType::kCSA) continue;
        const std::string name = "L" + std::to_string(l) + ".topk";
        const std::vector<int32_t> want = expected_i32(gd, "L" + std::to_string(l) + ".indexer.topk");
        const std::vector<float>& have = gd.dumps[name];
        const size_t k_hf = want.size() / gd.probes.size();
        for (size_t k = 0; k < gd.probes.size(); ++k) {
            const int64_t p = gd.probes[k];
            std::set<int32_t> ws, hs;
            for (size_t i = 0; i < k_hf; ++i)
                if (want[k * k_hf + i] >= 0) ws.insert(want[k * k_hf + i]);
            for (int i = 0; i < cfg.index_topk; ++i) {
                const float v = have[size_t(p * cfg.index_topk + i)];
                if (v >= 0) hs.insert(int32_t(v));
            }
            EXPECT_EQ(ws, hs) << name << " at position " << p;
        }
    }
}

TEST_P(GoldenTest, ChunkedPrefillEqualsOneShot) {
    Golden& gd = g();
    ASSERT_TRUE(gd.model);
    // Chunk schedules crossing window, ratio-4, ratio-16/128 and top-k boundaries (B04).
    const std::vector<std::vector<int64_t>> schedules = {
        {10, 17, 1, 1, 1, 1},  {7, 16, 37, 4},   {100, 29, 1, 1, 127, 3}, {1000, 1000, 45, 1, 1, 1, 1, 1, 1, 1, 1},
        {127, 1, 128, 3, 257}, {5, 4, 3, 1, 500}};
    for (int64_t page_tokens : {16, 128}) {
        auto runner = make_runner(page_tokens);
        double worst = 0;
        for (const auto& sched : schedules) {
            const auto outs = run_chunks(*runner, gd.ids, sched);
            int64_t pos = 0;
            for (size_t i = 0; i < sched.size(); ++i) {
                pos += sched[i];
                const double e = max_abs_diff(outs[i], ours_at(pos - 1));
                worst = std::max(worst, e);
                EXPECT_LT(e, 2e-5) << "chunk ending at " << pos << " (page_tokens " << page_tokens << ")";
                const auto gold = golden_for_length(pos);
                if (!gold.empty()) {
                    EXPECT_LT(max_abs_diff(outs[i], gold), kLogitTol) << "length " << pos;
                }
            }
        }
        std::printf("[golden %s] chunked vs one-shot (page_tokens %lld): max |diff| %.3g\n", GetParam().c_str(),
                    (long long)page_tokens, worst);
    }
}

TEST_P(GoldenTest, PrefillThenDecodeAtEveryResidue) {
    // B01: prefill L-1 then decode 1, and prefill L-3 then decode 3, for L around the ratio-4,
    // ratio-16/128 and top-k boundaries; every residue must match transformers.
    Golden& gd = g();
    ASSERT_TRUE(gd.model);
    auto runner = make_runner(16);
    std::map<int, double> worst_by_residue;
    for (int64_t L = 120; L <= 140; ++L) {
        const auto a = run_chunks(*runner, gd.ids, {L - 1, 1});
        const auto b = run_chunks(*runner, gd.ids, {L - 3, 1, 1, 1});
        const auto gold = golden_for_length(L);
        ASSERT_FALSE(gold.empty());
        const double e = std::max(max_abs_diff(a.back(), gold), max_abs_diff(b.back(), gold));
        EXPECT_LT(e, kLogitTol) << "length " << L;
        worst_by_residue[int(L % 4)] = std::max(worst_by_residue[int(L % 4)], e);
    }
    // Decode step by step through the other boundary ranges after one prefill.
    for (auto [lo, hi] : {std::pair<int64_t, int64_t>{250, 262}, {508, 520}, {2040, 2060}}) {
        std::vector<int64_t> sched{lo - 1};
        for (int64_t L = lo; L <= hi; ++L) sched.push_back(1);
        const auto outs = run_chunks(*runner, gd.ids, sched);
        for (int64_t L = lo; L <= hi; ++L) {
            const double e = max_abs_diff(outs[size_t(L - lo + 1)], golden_for_length(L));
            EXPECT_LT(e, kLogitTol) << "decode to length " << L;
            worst_by_residue[int(L % 4)] = std::max(worst_by_residue[int(L % 4)], e);
        }
    }
    for (auto [res, e] : worst_by_residue)
        std::printf("[golden %s] prefill+decode residue %d mod 4: max |logit error| %.3g\n", GetParam().c_str(), res,
                    e);
}

TEST_P(GoldenTest, GreedyContinuationsMatch) {
    Golden& gd = g();
    ASSERT_TRUE(gd.model);
    auto runner = make_runner(16);
    for (int P : {37, 300, 2040}) {
        const std::string pfx = "greedy.P" + std::to_string(P);
        const std::vector<int32_t> prompt = expected_i32(gd, pfx + ".prompt");
        const std::vector<int32_t> want = expected_i32(gd, pfx + ".tokens");
        ASSERT_EQ(int(prompt.size()), P);
        SimplePagePool pool(runner->n_pages());
        std::vector<int32_t> table;
        ASSERT_TRUE(pool.grow(table, runner->kv_layout().pages_for_tokens(P + int64_t(want.size()))));
        std::vector<int32_t> got;
        std::vector<int32_t> chunk = prompt;
        int64_t pos = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            std::vector<float> logits;
            ASSERT_TRUE(runner->forward_seq(SeqChunk{1, chunk, pos, true, table}, {}, logits).is_ok());
            pos += int64_t(chunk.size());
            const int32_t tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            got.push_back(tok);
            chunk = {tok};
        }
        EXPECT_EQ(got, want) << pfx;
    }
}

// The MTP block (spec §2.11: mtp.0, the next token's embedding and the main model's final streams
// through one sliding-window block, its own hc_head and norm, the shared head) against the block that
// tools/golden/make_golden.py assembles from transformers' own modules (DeepseekV4DecoderLayer built
// as one more layer, DeepseekV4HyperHead, RMSNorms, linears). transformers does not instantiate mtp.*,
// so that golden is a second implementation of the spec, not an independent oracle.
TEST_P(GoldenTest, MtpLogitsMatchSpecBlockOnTransformersModules) {
    Golden& gd = g();
    ASSERT_TRUE(gd.model);
    ASSERT_EQ(gd.model->mtp_blocks(), 1) << "the golden checkpoint holds mtp.0";
    const ModelConfig& cfg = gd.model->config();
    const int64_t S = int64_t(gd.ids.size()), T = S - 1, n = cfg.hc_mult, d = cfg.hidden_size;
    auto layout = KvLayout::make(cfg, 16, 4, KvRowFormat::kF32, 1);
    ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
    const int64_t pages = (S + 15) / 16;
    std::vector<float> state(size_t(layout->state_elems)), pool(size_t(pages * layout->page_elems));
    std::vector<int32_t> token_pages;
    for (int64_t i = pages - 1; i >= 0; --i) token_pages.push_back(int32_t(i));
    const SeqStateView view{&*layout, state.data(), pool.data(), token_pages};
    std::vector<float> streams, logits;
    RefForwardOptions main_opt;
    main_opt.want_logits = false;
    main_opt.streams_out = &streams;
    ASSERT_TRUE(gd.model->forward(view, gd.ids, 0, main_opt, logits).is_ok());
    std::vector<float> hidden;
    RefForwardOptions opt;
    opt.all_logits = true;
    opt.dump = [&hidden](const std::string& name, std::span<const float> v, std::vector<int64_t>) {
        if (name == "mtp0.final_hidden") hidden.assign(v.begin(), v.end());
    };
    Status s = gd.model->mtp_forward(0, view, std::span<const float>(streams).first(size_t(T * n * d)),
                                     std::span<const int32_t>(gd.ids).subspan(1), 0, opt, logits);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    const int64_t V = cfg.vocab_size;
    ASSERT_EQ(int64_t(logits.size()), T * V);
    const auto rows = expected_i32(gd, "mtp.logits.positions");
    const auto want = expected_f32(gd, "mtp.logits");
    ASSERT_FALSE(rows.empty());
    ASSERT_EQ(want.size(), rows.size() * size_t(V));
    double worst = 0;
    for (size_t j = 0; j < rows.size(); ++j) {
        const double e = max_abs_diff(std::span<const float>(logits).subspan(size_t(rows[j]) * V, size_t(V)),
                                      std::span<const float>(want).subspan(j * V, size_t(V)));
        worst = std::max(worst, e);
        EXPECT_LT(e, kLogitTol) << "MTP logits at position " << rows[j];
    }
    const auto probes = expected_i32(gd, "mtp.positions");
    const auto want_h = expected_f32(gd, "mtp.final_hidden");
    ASSERT_EQ(want_h.size(), probes.size() * size_t(d));
    ASSERT_EQ(int64_t(hidden.size()), T * d);
    double worst_h = 0;
    for (size_t j = 0; j < probes.size(); ++j)
        worst_h =
            std::max(worst_h, max_abs_diff(std::span<const float>(hidden).subspan(size_t(probes[j]) * d, size_t(d)),
                                           std::span<const float>(want_h).subspan(j * d, size_t(d))));
    EXPECT_LT(worst_h, kLogitTol);
    std::printf("[golden %s] MTP: %zu positions, max |logit error| %.3g, max |hidden error| %.3g\n", GetParam().c_str(),
                rows.size(), worst, worst_h);
}

// Greedy speculative decoding on the reference (model/ref_speculative.h) gives transformers' greedy
// tokens: MTP drafts (k = 1..3, nearly all rejected on random weights: the rollback path) and self drafts
// (all accepted), on the stored greedy prompts of 37 and 300 tokens.
TEST_P(GoldenTest, SpeculativeGreedyMatchesTransformers) {
    Golden& gd = g();
    ASSERT_TRUE(gd.model);
    for (int P : {37, 300}) {
        const std::string pfx = "greedy.P" + std::to_string(P) + ".";
        const auto prompt = expected_i32(gd, pfx + "prompt");
        const auto want = expected_i32(gd, pfx + "tokens");
        ASSERT_FALSE(want.empty()) << pfx;
        for (DraftSource src : {DraftSource::kMtp, DraftSource::kSelf})
            for (int k = 1; k <= 3; ++k) {
                if (src == DraftSource::kSelf && k != 2) continue;
                RefSpecStats st;
                auto got = ref_speculative_greedy(*gd.model, prompt, int(want.size()), {k, src, {}}, &st);
                ASSERT_TRUE(got.is_ok()) << got.status().to_string();
                EXPECT_EQ(*got, want) << pfx << " k = " << k << (src == DraftSource::kMtp ? " mtp" : " self");
                if (src == DraftSource::kSelf) {
                    EXPECT_EQ(st.accepted, st.drafted) << pfx;
                }
            }
    }
}

// The engine's speculative decoding (EngineCore verify chunks on the reference runner, the
// rollback and MTP state in pages) gives transformers' greedy tokens too: both prompts at once,
// prefilled in 64-token chunks beside the other's verify chunks, for every k.
TEST_P(GoldenTest, EngineSpeculativeGreedyMatchesTransformers) {
    Golden& gd = g();
    ASSERT_TRUE(gd.model);
    class Sink : public RequestSink {
    public:
        void on_event(SeqEvent&& ev) override { tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end()); }
        std::vector<int32_t> tokens;
    };
    std::vector<std::vector<int32_t>> prompts, want;
    for (int P : {37, 300}) {
        const std::string pfx = "greedy.P" + std::to_string(P) + ".";
        prompts.push_back(expected_i32(gd, pfx + "prompt"));
        want.push_back(expected_i32(gd, pfx + "tokens"));
        ASSERT_FALSE(want.back().empty()) << pfx;
    }
    for (int k = 1; k <= 3; ++k) {
        auto runner = RefRunner::create(gd.model, 16, 600, {k, DraftSource::kMtp});
        ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
        EngineConfig cfg;
        cfg.sched = {.max_running = 4, .max_tokens_per_step = 96, .max_prefill_chunk = 64};
        cfg.sched.speculative_tokens = k;
        EngineStats stats;
        EngineCore core(**runner, cfg, stats);
        std::vector<std::shared_ptr<Sink>> sinks;
        for (size_t i = 0; i < prompts.size(); ++i) {
            SamplingParams p;
            p.temperature = 0;
            p.ignore_eos = true;
            p.max_tokens = int(want[i].size());
            sinks.push_back(std::make_shared<Sink>());
            ASSERT_TRUE(core.add({.id = i + 1, .prompt = prompts[i], .params = p, .sink = sinks.back()}).is_ok());
        }
        for (int guard = 0; core.has_work() && guard < 5000; ++guard) core.step();
        for (size_t i = 0; i < prompts.size(); ++i)
            EXPECT_EQ(sinks[i]->tokens, want[i]) << "prompt " << i << " k " << k;
        EXPECT_GT(stats.spec_verify_chunks_total, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Configs, GoldenTest, ::testing::Values("tiny_f32", "tiny_quant", "tiny_real_window"));

}  // namespace
}  // namespace dsv4
