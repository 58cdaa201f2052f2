// Batched prefill (RuntimeOptions::batched_prefill, src/kernels/cuda/ops/prefill_state.cu) against
// the token-at-a-time path it replaces, on the fast attention path (head_dim 512, fp8 and bf16
// rows): the same script of steps on three runners (token loop; batched in blocks of 7 query
// tokens; batched in blocks of 256) must give bit-identical logits in every step, including the
// decode steps after the prefill, which read the ring, the compressor state rows and the compressed
// rows the batched path left. The script mixes what a serving step holds: a prefill chunk beside
// decoding sequences, chunks that start and end mid-window (ratio 4, 16 and 128 boundaries and the
// sliding window), a chunk longer than the window, and one-token chunks. split_kv_target_ctas is 1
// so that sparse_decode uses one split whatever the batch (split-KV rounding depends on the
// number of splits, which depends on the batch; that is not what this test is about). A fourth runner
// takes the wgmma prefill attention (sparse_prefill), which sums in another order: compared within
// tolerance and by greedy token; a fifth adds prefill_q_bf16 (q written as bf16 by the GEMM, normed in
// place), compared the same way, and must change the bits where the q projection runs as a GEMM.
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
#include "runtime/runner_factory.h"
#include "runtime/ref_runner.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"
#include "tests/kernels/cuda_runner/small512_config.h"

namespace dsv4 {
namespace {

// One step: per sequence, the tokens it runs (empty: not in the step).
using Step = std::vector<std::vector<int32_t>>;

// The script's logits rows, step by step, in batch order.
std::vector<std::vector<float>> run_script(ModelRunner& r, const std::vector<Step>& script, int64_t max_len) {
    const size_t B = script[0].size();
    SimplePagePool pool(r.n_pages());
    std::vector<std::vector<int32_t>> tables(B);
    std::vector<int64_t> pos(B, 0);
    for (auto& t : tables) EXPECT_TRUE(pool.grow(t, r.kv_layout().pages_for_tokens(max_len)));
    std::vector<std::vector<float>> all;
    for (const Step& st : script) {
        ForwardBatch b;
        for (size_t s = 0; s < B; ++s)
            if (!st[s].empty()) b.seqs.push_back(SeqChunk{int64_t(s) + 1, st[s], pos[s], true, tables[s]});
        std::vector<std::vector<float>> out;
        const Status s = r.forward(b, out);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        if (!s.is_ok()) return all;
        for (size_t i = 0; i < B; ++i) pos[i] += int64_t(st[i].size());
        all.insert(all.end(), out.begin(), out.end());
    }
    return all;
}

// Three sequences: chunk sizes chosen so that chunks start and end off every window boundary.
std::vector<Step> script_for(int64_t V, const std::vector<std::vector<int>>& chunks, int n_decode) {
    std::vector<Step> script;
    const size_t B = chunks.size();
    size_t n_steps = 0;
    for (const auto& c : chunks) n_steps = std::max(n_steps, c.size());
    uint32_t seed = 100;
    for (size_t k = 0; k < n_steps; ++k) {
        Step st(B);
        for (size_t s = 0; s < B; ++s)
            if (k < chunks[s].size() && chunks[s][k] > 0) st[s] = test_token_ids(chunks[s][k], V, seed++);
        script.push_back(st);
    }
    for (int k = 0; k < n_decode; ++k) {
        Step st(B);
        for (size_t s = 0; s < B; ++s) st[s] = test_token_ids(1, V, seed++);
        script.push_back(st);
    }
    return script;
}

// How far `got` is from `loop` (the token loop's logits): the largest |difference|, the rows whose
// greedy token differs, and the rows not bitwise equal to `same_as`.
struct Deviation {
    double worst = 0;
    size_t argmax_diff = 0, differing = 0;
};
Deviation deviation(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& loop,
                    const std::vector<std::vector<float>>& same_as) {
    Deviation d;
    for (size_t i = 0; i < loop.size(); ++i) {
        EXPECT_EQ(got[i].size(), loop[i].size());
        size_t a0 = 0, a1 = 0;
        bool same = true;
        for (size_t j = 0; j < loop[i].size() && j < got[i].size(); ++j) {
            d.worst = std::max(d.worst, std::fabs(double(got[i][j]) - loop[i][j]));
            same = same && got[i][j] == same_as[i][j];
            if (loop[i][j] > loop[i][a0]) a0 = j;
            if (got[i][j] > got[i][a1]) a1 = j;
        }
        d.differing += !same;
        d.argmax_diff += a0 != a1;
    }
    return d;
}

void expect_batched_equals_loop(const ModelConfig& cfg, const char* rows, const std::vector<Step>& script,
                                int64_t max_len, int max_tokens, bool q_gemm_steps = false) {
    ASSERT_TRUE(cfg.validate().is_ok());
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights::random(cfg, 17), RefNumerics{});
    std::vector<std::vector<float>> out[6];
    // 0: token loop; 3 on the wgmma prefill attention; 4 also with prefill_q_bf16; 5: runner 3 with the
    // filtered indexer scores on every CSA step (cuda::indexer_topk_filtered: the same selection).
    const int blocks[6] = {0, 7, 256, 256, 256, 256};
    for (int v = 0; v < 6; ++v) {
        CudaRunnerOptions o;
        o.rt.kv_rows = rows;
        o.rt.batched_prefill = blocks[v] > 0;
        o.rt.prefill_query_block = blocks[v] > 0 ? blocks[v] : 256;
        o.rt.prefill_attn_wgmma = v >= 3;
        o.rt.prefill_q_bf16 = v == 4;
        o.rt.indexer_filter_min_rows = v == 5 ? 1 : 0;
        o.rt.split_kv_target_ctas = 1;
        o.max_seqs = 4;
        o.max_step_tokens = max_tokens;
        o.max_context = int(max_len);
        o.n_pages = 4000;
        o.verbose = false;
        auto gpu = make_cuda_runner(model, "", o);
        ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
        out[v] = run_script(**gpu, script, max_len);
        // Runner 5 must have taken the filtered indexer (a CSA step past top-k rows), the others never.
        const auto* br = dynamic_cast<const CudaBenchRunner*>(gpu->get());
        ASSERT_NE(br, nullptr);
        if (v == 5)
            EXPECT_GT(br->indexer_filter_blocks(), 0) << "the filtered indexer never ran";
        else
            EXPECT_EQ(br->indexer_filter_blocks(), 0);
    }
    ASSERT_EQ(out[1].size(), out[0].size());
    ASSERT_EQ(out[2].size(), out[0].size());
    size_t differing[3] = {0, 0, 0};
    double worst = 0, scale = 0;
    for (size_t i = 0; i < out[0].size(); ++i)
        for (int v = 1; v < 3; ++v) {
            ASSERT_EQ(out[v][i].size(), out[0][i].size());
            bool same = true;
            for (size_t j = 0; j < out[0][i].size(); ++j) {
                const double d = std::fabs(double(out[v][i][j]) - out[0][i][j]);
                worst = std::max(worst, d);
                scale = std::max(scale, double(std::fabs(out[0][i][j])));
                same = same && out[v][i][j] == out[0][i][j];
            }
            differing[v] += !same;
        }
    std::printf(
        "[batched prefill] %s rows, %d heads, window %d: %zu logit rows; rows differing from the token loop: "
        "block 7 %zu, block 256 %zu (max |diff| %.3g, logit scale %.3g)\n",
        rows, cfg.n_heads, cfg.sliding_window, out[0].size(), differing[1], differing[2], worst, scale);
    EXPECT_EQ(differing[1], 0u);
    EXPECT_EQ(differing[2], 0u);
    EXPECT_GT(scale, 0.0);
    // sparse_prefill (FP8 rows) sums in another order: same logits within bf16 noise, same greedy
    // token in (nearly) every row. With bf16 rows it is declined, so the bits must match.
    ASSERT_EQ(out[3].size(), out[0].size());
    for (size_t i = 0; i < out[0].size(); ++i) ASSERT_EQ(out[3][i].size(), out[0][i].size());
    const Deviation d3 = deviation(out[3], out[0], out[0]);
    std::printf(
        "[batched prefill] %s rows, wgmma prefill attention: %zu rows differ from the token loop, max |diff| %.3g "
        "(%.3g of the logit scale), greedy token differs in %zu rows\n",
        rows, d3.differing, d3.worst, d3.worst / scale, d3.argmax_diff);
    if (std::string(rows) == "fp8") {
        EXPECT_LT(d3.worst, 0.03 * scale);
        EXPECT_LE(d3.argmax_diff * 20, out[0].size());
    } else {
        EXPECT_EQ(d3.differing, 0u);
    }
    // prefill_q_bf16 on top of runner 3: the same bounds against the token loop; it changes runner 3's
    // bits only where a step's q projection runs as the cuBLAS GEMM on the bf16 route.
    ASSERT_EQ(out[4].size(), out[0].size());
    const Deviation d4 = deviation(out[4], out[0], out[3]);
    std::printf(
        "[batched prefill] %s rows, + prefill_q_bf16: %zu rows differ from runner 3, max |diff| to the token "
        "loop %.3g (%.3g of the logit scale), greedy token differs in %zu rows\n",
        rows, d4.differing, d4.worst, d4.worst / scale, d4.argmax_diff);
    if (std::string(rows) == "fp8") {
        EXPECT_LT(d4.worst, 0.03 * scale);
        EXPECT_LE(d4.argmax_diff * 20, out[0].size());
    }
    if (q_gemm_steps)
        EXPECT_GT(d4.differing, 0u) << "prefill_q_bf16 changed nothing: the bf16 q path did not run";
    else
        EXPECT_EQ(d4.differing, 0u) << "prefill_q_bf16 changed steps whose q projection is no GEMM";
    ASSERT_EQ(out[5].size(), out[3].size());
    size_t filtered_differing = 0;
    for (size_t i = 0; i < out[3].size(); ++i) filtered_differing += out[5][i] != out[3][i];
    std::printf("[batched prefill] %s rows, filtered indexer scores: %zu rows differ from runner 3\n", rows,
                filtered_differing);
    EXPECT_EQ(filtered_differing, 0u);
}

TEST(CudaBatchedPrefill, BitIdenticalToTheTokenLoopSmall) {
    SKIP_WITHOUT_GPU();
    const ModelConfig cfg = small512_config();
    // seq 0: 1, 45, 3, 70 tokens (crosses the 32-row window twice, HCA r16 at odd offsets);
    // seq 1: decodes beside seq 0's chunks after a 17-token start; seq 2 joins late with 38 + 1.
    const auto script = script_for(cfg.vocab_size, {{1, 45, 3, 70, 0}, {17, 1, 1, 1, 1}, {0, 0, 38, 1, 33}}, 10);
    for (const char* rows : {"fp8", "bf16"}) expect_batched_equals_loop(cfg, rows, script, 512, 256);
}

TEST(CudaBatchedPrefill, BitIdenticalToTheTokenLoopFlashGeometry) {
    SKIP_WITHOUT_GPU();
    const ModelConfig cfg = flash_geometry_config();
    // The runner is built from the CPU reference model, whose dense weights it uploads as f32: no
    // projection takes the prefill GEMM, so prefill_q_bf16 must change nothing here (the bf16 q path
    // is checked on FP8 weights by CudaProxy.FastPrefillPathsMatchTheTokenLoop).
    // seq 0 reaches 2,400 positions (600 compressed CSA rows: the top-512 selects; 18 HCA rows) in
    // chunks of 1, 700, 1,699; seq 1 decodes beside it; seq 2 runs 130 + 129 (past the window).
    const auto script = script_for(cfg.vocab_size, {{1, 700, 1699, 0}, {5, 1, 1, 1}, {0, 130, 129, 1}}, 6);
    expect_batched_equals_loop(cfg, "fp8", script, 2560, 2048);
}

}  // namespace
}  // namespace dsv4
