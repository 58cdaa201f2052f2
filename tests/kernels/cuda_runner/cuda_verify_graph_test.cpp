// Verify-shaped steps replayed as CUDA graphs (RuntimeOptions::verify_graphs): steps in which every
// sequence runs the same 2-4 tokens (speculative decoding's last token and its drafts) against the
// same steps launched eagerly (verify_graphs off). The script prefills three or two sequences, then
// mixes verify-shaped steps of n = 2, 3, 4 tokens with one-token decode steps across the window (32)
// and compression (4, 16) boundaries, on the batched prefill path (head_dim 512, fp8 and bf16 rows)
// and on the token-loop path (the tiny model, f32 rows). Two sequences fill their graph bucket: the
// graph runs the eager step's launches, so the logits must be bit-identical. Three sequences run in
// the bucket-4 graph with a padded sequence of dummy tokens: other token counts can pick other
// kernel splits, so they are compared within tolerance and by greedy token, and the padded sequence
// must not disturb the real ones' state (the later steps would drift).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "runtime/cuda_bench_runner.h"
#include "runtime/cuda_runner.h"
#include "runtime/ref_runner.h"
#include "runtime/runner_factory.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"
#include "tests/kernels/cuda_runner/small512_config.h"

namespace dsv4 {
namespace {

// Tokens per sequence of the steps after the prompts: verify-shaped (2-4) and one-token steps.
constexpr int kPerStep[] = {2, 3, 4, 1, 4, 4, 3, 2, 1, 2, 4, 3, 3, 4, 2, 2, 1, 4, 4, 4};

// Every sequence's tokens per step: prompts of different lengths, then verify-shaped and decode steps.
std::vector<std::vector<std::vector<int32_t>>> make_script(int B, int64_t V) {
    const int prompt[3] = {37, 50, 21};

    std::vector<std::vector<std::vector<int32_t>>> script;
    uint32_t seed = 7;
    std::vector<std::vector<int32_t>> first;
    for (int s = 0; s < B; ++s) first.push_back(test_token_ids(prompt[s], V, seed++));
    script.push_back(first);
    for (int n : kPerStep) {
        std::vector<std::vector<int32_t>> st;
        for (int s = 0; s < B; ++s) st.push_back(test_token_ids(n, V, seed++));
        script.push_back(st);
    }
    return script;
}

struct Run {
    std::vector<std::vector<float>> logits;  // every step's rows, batch order
    CudaBenchRunner::GraphReplays replays;
};

Run run(const std::shared_ptr<const RefModel>& model, const std::string& rows, bool verify_graphs, int B) {
    CudaRunnerOptions o;
    o.rt.kv_rows = rows;
    o.rt.verify_graphs = verify_graphs;
    o.rt.split_kv_target_ctas = 1;  // one split whatever the batch (not what this test is about)
    o.max_seqs = 4;
    o.max_step_tokens = 256;
    o.max_context = 512;
    o.n_pages = 3000;
    o.verbose = false;
    Run out;
    auto gpu = make_cuda_runner(model, "", o);
    EXPECT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    if (!gpu.is_ok()) return out;
    ModelRunner& r = **gpu;
    const auto script = make_script(B, model->config().vocab_size);
    SimplePagePool pool(r.n_pages());
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(B));
    std::vector<int64_t> pos(static_cast<size_t>(B), 0);
    for (auto& t : tables) EXPECT_TRUE(pool.grow(t, r.kv_layout().pages_for_tokens(200)));
    for (const auto& st : script) {
        ForwardBatch b;
        for (int s = 0; s < B; ++s)
            b.seqs.push_back(SeqChunk{s + 1, st[size_t(s)], pos[size_t(s)], true, tables[size_t(s)]});
        std::vector<std::vector<float>> lg;
        const Status s = r.forward(b, lg);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        if (!s.is_ok()) return out;
        for (int i = 0; i < B; ++i) pos[size_t(i)] += int64_t(st[size_t(i)].size());
        out.logits.insert(out.logits.end(), lg.begin(), lg.end());
    }
    const auto* bench = dynamic_cast<const CudaBenchRunner*>(&r);
    EXPECT_NE(bench, nullptr);
    if (bench) out.replays = bench->graph_replays();
    return out;
}

void expect_graph_equals_eager(const std::shared_ptr<const RefModel>& model, const std::string& rows, int B) {
    const Run eager = run(model, rows, false, B), graph = run(model, rows, true, B);
    ASSERT_EQ(eager.logits.size(), graph.logits.size());
    ASSERT_FALSE(eager.logits.empty());
    // After the prompts (eager: their lengths differ), every verify-shaped step replays a verify graph
    // and every one-token step the decode graph; with verify_graphs off only the latter.
    int64_t verify_steps = 0, decode_steps = 0;
    for (int n : kPerStep) (n == 1 ? decode_steps : verify_steps) += 1;
    EXPECT_EQ(eager.replays.verify, 0);
    EXPECT_EQ(graph.replays.verify, verify_steps);
    EXPECT_EQ(graph.replays.decode, decode_steps);
    EXPECT_EQ(eager.replays.decode, decode_steps);
    double worst = 0, scale = 0;
    size_t differing = 0, greedy_diff = 0;
    for (size_t i = 0; i < eager.logits.size(); ++i) {
        const auto &a = eager.logits[i], &b = graph.logits[i];
        ASSERT_EQ(a.size(), b.size());
        bool same = true;
        size_t ia = 0, ib = 0;
        for (size_t j = 0; j < a.size(); ++j) {
            worst = std::max(worst, std::fabs(double(a[j]) - b[j]));
            scale = std::max(scale, double(std::fabs(a[j])));
            same = same && a[j] == b[j];
            if (a[j] > a[ia]) ia = j;
            if (b[j] > b[ib]) ib = j;
        }
        differing += !same;
        greedy_diff += ia != ib;
    }
    std::printf(
        "[verify graphs] %s rows, batch %d: %zu logit rows, %zu differ from eager (max |diff| %.3g, scale %.3g), "
        "greedy differs in %zu\n",
        rows.c_str(), B, eager.logits.size(), differing, worst, scale, greedy_diff);
    EXPECT_GT(scale, 0.0);
    if (B == 2) {
        EXPECT_EQ(differing, 0u);
    } else {
        EXPECT_LT(worst, 1e-2 * scale);
        EXPECT_LE(greedy_diff * 20, eager.logits.size());
    }
}

TEST(CudaVerifyGraphs, EqualEagerOnTheBatchedPrefillPath) {
    SKIP_WITHOUT_GPU();
    const ModelConfig cfg = small512_config();
    ASSERT_TRUE(cfg.validate().is_ok());
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights::random(cfg, 23), RefNumerics{});
    for (const char* rows : {"fp8", "bf16"})
        for (int B : {2, 3}) expect_graph_equals_eager(model, rows, B);
}

TEST(CudaVerifyGraphs, EqualEagerOnTheTokenLoopPath) {
    SKIP_WITHOUT_GPU();
    const ModelConfig cfg = tiny_model_config();
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights::random(cfg, 29), RefNumerics{});
    for (int B : {2, 3}) expect_graph_equals_eager(model, "f32", B);
}

}  // namespace
}  // namespace dsv4
