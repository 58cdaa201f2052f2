// The MTP block on the GPU (CudaRunner::mtp_block, spec §2.11; issue 24 item 3) against the CPU
// reference (RefModel::mtp_forward): two sequences in one step, chunks of 1 to 127 tokens across the
// block's 128-token window, each chunk's MTP pass reading the main model's final streams of the same
// step and the known next tokens. Both the main and the MTP logits of each chunk's last token are
// compared (f32 rows: the GPU sums in other orders, the bounds are those of the runner's other tests).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <algorithm>
#include <cstdlib>
#include <tuple>

#include "model/checkpoint.h"
#include "model/kv_layout.h"
#include "model/weights.h"
#include "model/ref_model.h"
#include "runtime/cuda_bench_runner.h"
#include "runtime/cuda_runner.h"
#include "runtime/runner_factory.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"
#include "tests/kernels/cuda_runner/small512_config.h"

namespace dsv4 {
namespace {

// One sequence's CPU state (f32 rows, the MTP block's ring included).
struct CpuSeq {
    KvLayout layout;
    std::vector<float> state, pool;
    std::vector<int32_t> pages;
    CpuSeq(const ModelConfig& cfg, int64_t max_tokens) {
        layout = *KvLayout::make(cfg, 16, 4, KvRowFormat::kF32, 1);
        const int64_t n = (max_tokens + 15) / 16;
        state.assign(size_t(layout.state_elems), 0.0f);
        pool.assign(size_t(n * layout.page_elems), 0.0f);
        for (int64_t i = n - 1; i >= 0; --i) pages.push_back(int32_t(i));
    }
    SeqStateView view() { return SeqStateView{&layout, state.data(), pool.data(), pages}; }
};

TEST(CudaMtp, MatchesCpuReferenceAcrossChunksAndTheWindow) {
    SKIP_WITHOUT_GPU();
    auto loaded = load_ref_model("tiny", 7);
    ASSERT_TRUE(loaded.is_ok());
    std::shared_ptr<const RefModel> model = *loaded;
    const ModelConfig& cfg = model->config();
    ASSERT_EQ(model->mtp_blocks(), 1);
    CudaRunnerOptions o;
    o.rt.kv_rows = "f32";
    o.n_pages = 2000;
    o.mtp_blocks = 1;
    o.verbose = false;
    auto made = make_cuda_runner(model, "", o);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    auto* gpu = dynamic_cast<CudaBenchRunner*>(made->get());
    ASSERT_NE(gpu, nullptr);
    const int n = cfg.hc_mult, d = cfg.hidden_size;
    // Two sequences: chunk lengths per step (positions cross the 128-token window twice).
    const std::vector<std::vector<int>> chunks = {{1, 60, 127, 2, 100}, {33, 1, 90, 4, 70}};
    const int S = 2;
    std::vector<std::vector<int32_t>> prompt(S), table(S);
    std::vector<CpuSeq> cpu;
    for (int s = 0; s < S; ++s) {
        int total = 0;
        for (int c : chunks[size_t(s)]) total += c;
        prompt[size_t(s)] = test_token_ids(total + 1, cfg.vocab_size, 40 + uint32_t(s));
        for (int64_t i = 0; i < (*made)->kv_layout().pages_for_tokens(total + 1); ++i)
            table[size_t(s)].push_back(int32_t(1999 - 7 * i - 900 * s));
        cpu.emplace_back(cfg, total + 1);
    }
    std::vector<int64_t> pos(S, 0);
    double worst_main = 0, worst_mtp = 0, scale = 0;
    int greedy_main = 0, greedy_mtp = 0, rows = 0;
    for (size_t k = 0; k < chunks[0].size(); ++k) {
        ForwardBatch b;
        std::vector<int32_t> next;
        for (int s = 0; s < S; ++s) {
            const int c = chunks[size_t(s)][k];
            const std::span<const int32_t> toks(prompt[size_t(s)].data() + pos[size_t(s)], size_t(c));
            b.seqs.push_back(SeqChunk{s + 1, toks, pos[size_t(s)], true, table[size_t(s)]});
            next.insert(next.end(), toks.begin() + 1, toks.end());
            next.push_back(prompt[size_t(s)][size_t(pos[size_t(s)] + c)]);
        }
        std::vector<std::vector<float>> lg, mg;
        const Status st = gpu->forward_with_mtp(b, next, lg, mg);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        ASSERT_EQ(lg.size(), size_t(S));
        ASSERT_EQ(mg.size(), size_t(S));
        for (int s = 0; s < S; ++s) {
            const int c = chunks[size_t(s)][k];
            const std::span<const int32_t> toks(prompt[size_t(s)].data() + pos[size_t(s)], size_t(c));
            std::vector<float> streams, logits, mtp;
            RefForwardOptions fo;
            fo.streams_out = &streams;
            ASSERT_TRUE(model->forward(cpu[size_t(s)].view(), toks, pos[size_t(s)], fo, logits).is_ok());
            ASSERT_EQ(streams.size(), size_t(c) * n * d);
            const std::span<const int32_t> nx(prompt[size_t(s)].data() + pos[size_t(s)] + 1, size_t(c));
            ASSERT_TRUE(model->mtp_forward(0, cpu[size_t(s)].view(), streams, nx, pos[size_t(s)], {}, mtp).is_ok());
            worst_main = std::max(worst_main, max_abs_diff(lg[size_t(s)], logits));
            worst_mtp = std::max(worst_mtp, max_abs_diff(mg[size_t(s)], mtp));
            for (float v : mtp) scale = std::max(scale, double(std::fabs(v)));
            greedy_main += argmax_index(lg[size_t(s)]) != argmax_index(logits);
            greedy_mtp += argmax_index(mg[size_t(s)]) != argmax_index(mtp);
            ++rows;
            pos[size_t(s)] += c;
        }
    }
    std::printf(
        "[cuda mtp] %d rows: main max |diff| %.3g, MTP max |diff| %.3g (MTP logit scale %.3g), greedy "
        "mismatches main %d, MTP %d\n",
        rows, worst_main, worst_mtp, scale, greedy_main, greedy_mtp);
    EXPECT_GT(scale, 0.0);
    EXPECT_LT(worst_main, 2e-3);
    EXPECT_LT(worst_mtp, 2e-3);
    EXPECT_EQ(greedy_main, 0);
    EXPECT_EQ(greedy_mtp, 0);
}

// The MTP block on the fast attention path (head_dim 512, bf16 rows): chunks of several tokens take the
// batched prefill path (attention_batched for block n_layers), which must give the token loop's bits
// (split_kv_target_ctas 1, sparse_decode for both; as CudaBatchedPrefill asserts for the decoder), and
// both stay within bf16-row tolerance of the CPU reference (f32 rows).
TEST(CudaMtp, BatchedPrefillPathEqualsTheTokenLoop) {
    SKIP_WITHOUT_GPU();
    ModelConfig cfg = small512_config();
    cfg.num_nextn_predict_layers = 1;
    ASSERT_TRUE(cfg.validate().is_ok());
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights::random(cfg, 31), RefNumerics{});
    ASSERT_EQ(model->mtp_blocks(), 1);
    const std::vector<int> chunks = {40, 1, 7, 33, 2, 50};  // crosses the 32-token window
    int total = 0;
    for (int c : chunks) total += c;
    const auto prompt = test_token_ids(total + 1, cfg.vocab_size, 77);
    std::vector<std::vector<float>> main_rows[2], mtp_rows[2];
    for (int batched = 0; batched < 2; ++batched) {
        CudaRunnerOptions o;
        o.rt.kv_rows = "bf16";
        o.rt.batched_prefill = batched == 1;
        o.rt.prefill_attn_wgmma = false;
        o.rt.split_kv_target_ctas = 1;
        o.max_seqs = 4;
        o.max_step_tokens = 256;
        o.max_context = 512;
        o.n_pages = 600;
        o.mtp_blocks = 1;
        o.verbose = false;
        auto made = make_cuda_runner(model, "", o);
        ASSERT_TRUE(made.is_ok()) << made.status().to_string();
        auto* gpu = dynamic_cast<CudaBenchRunner*>(made->get());
        ASSERT_NE(gpu, nullptr);
        std::vector<int32_t> table;
        for (int64_t i = 0; i < (*made)->kv_layout().pages_for_tokens(total + 1); ++i)
            table.push_back(int32_t(599 - 2 * i));
        int64_t pos = 0;
        for (int c : chunks) {
            ForwardBatch b;
            const std::span<const int32_t> toks(prompt.data() + pos, size_t(c));
            b.seqs.push_back(SeqChunk{1, toks, pos, true, table});
            std::vector<std::vector<float>> lg, mg;
            const Status st =
                gpu->forward_with_mtp(b, std::span<const int32_t>(prompt.data() + pos + 1, size_t(c)), lg, mg);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            main_rows[batched].push_back(lg.at(0));
            mtp_rows[batched].push_back(mg.at(0));
            pos += c;
        }
    }
    CpuSeq cpu(cfg, total + 1);
    double worst = 0, scale = 0;
    int greedy = 0;
    int64_t pos = 0;
    for (size_t k = 0; k < chunks.size(); ++k) {
        EXPECT_EQ(main_rows[0][k], main_rows[1][k]) << "main logits, chunk " << k;
        EXPECT_EQ(mtp_rows[0][k], mtp_rows[1][k]) << "MTP logits, chunk " << k;
        const std::span<const int32_t> toks(prompt.data() + pos, size_t(chunks[k]));
        std::vector<float> streams, logits, mtp;
        RefForwardOptions fo;
        fo.streams_out = &streams;
        ASSERT_TRUE(model->forward(cpu.view(), toks, pos, fo, logits).is_ok());
        ASSERT_TRUE(model
                        ->mtp_forward(0, cpu.view(), streams,
                                      std::span<const int32_t>(prompt.data() + pos + 1, toks.size()), pos, {}, mtp)
                        .is_ok());
        worst = std::max(worst, max_abs_diff(mtp_rows[1][k], mtp));
        for (float v : mtp) scale = std::max(scale, double(std::fabs(v)));
        greedy += argmax_index(mtp_rows[1][k]) != argmax_index(mtp);
        pos += chunks[k];
    }
    std::printf(
        "[cuda mtp] bf16 rows, batched = token loop; MTP vs CPU (f32 rows) max |diff| %.3g (scale %.3g), greedy "
        "mismatches %d of %zu\n",
        worst, scale, greedy, chunks.size());
    EXPECT_GT(scale, 0.0);
    EXPECT_LT(worst, 0.05 * scale);
    EXPECT_LE(greedy, 1);
}

// The golden checkpoints' MTP logits (tools/golden/make_golden.py: the block assembled from transformers'
// modules, a second implementation of the spec) through the GPU block, in the checkpoints' own formats,
// two ways: uploaded from the RefModel's checkpoint and streamed by the checkpoint loader (load plan with
// the MTP block). Same device bytes, so the two must agree bit for bit; chunks end at each golden
// position, whose MTP row is the chunk's last.
class CudaMtpGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaMtpGolden, LogitsMatchTheGoldenBothLoadPaths) {
    SKIP_WITHOUT_GPU();
    const char* env = std::getenv("DSV4_GOLDEN_DIR");  // the GPU machine runs binaries built elsewhere
    const std::string dir = std::string(env && *env ? env : DSV4_GOLDEN_DIR) + "/" + GetParam();
    auto model = load_ref_model(dir, 0);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    const ModelConfig& cfg = (*model)->config();
    auto expected = Checkpoint::open(dir + "/expected.safetensors");
    ASSERT_TRUE(expected.is_ok());
    auto get_i32 = [&](const std::string& name) {
        auto v = expected->get(name);
        EXPECT_TRUE(v.is_ok()) << name;
        return *load_i32(*expected, name, v->shape);
    };
    const auto ids = get_i32("input_ids");
    auto rows = get_i32("mtp.logits.positions");
    auto wv = expected->get("mtp.logits");
    ASSERT_TRUE(wv.is_ok());
    const auto want = *load_f32(*expected, "mtp.logits", wv->shape);
    const int64_t V = cfg.vocab_size;
    ASSERT_EQ(want.size(), rows.size() * size_t(V));
    CudaRunnerOptions o;
    o.rt.kv_rows = "f32";
    o.n_pages = 2000;
    o.mtp_blocks = 1;
    o.verbose = false;
    auto uploaded = make_cuda_runner(*model, dir, o);
    ASSERT_TRUE(uploaded.is_ok()) << uploaded.status().to_string();
    auto streamed = make_cuda_runner(cfg, dir, o);
    ASSERT_TRUE(streamed.is_ok()) << streamed.status().to_string();
    std::vector<size_t> order(rows.size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = j;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rows[a] < rows[b]; });
    std::vector<int32_t> table;
    for (int64_t i = 0; i < (*uploaded)->kv_layout().pages_for_tokens(int64_t(ids.size())); ++i)
        table.push_back(int32_t(1999 - 3 * i));
    double worst = 0;
    int64_t pos = 0, differing = 0, checked = 0;
    for (size_t j : order) {
        const int64_t end = int64_t(rows[j]) + 1;  // the chunk ends at the golden position
        if (end <= pos) continue;
        ASSERT_LT(end, int64_t(ids.size()));
        const std::span<const int32_t> toks(ids.data() + pos, size_t(end - pos));
        const std::span<const int32_t> next(ids.data() + pos + 1, size_t(end - pos));
        ForwardBatch b;
        b.seqs.push_back(SeqChunk{1, toks, pos, true, table});
        std::vector<std::vector<float>> lu, mu, ls, ms;
        for (auto [r, lg, mg] : {std::tuple{uploaded->get(), &lu, &mu}, std::tuple{streamed->get(), &ls, &ms}}) {
            auto* bench = dynamic_cast<CudaBenchRunner*>(r);
            ASSERT_NE(bench, nullptr);
            const Status st = bench->forward_with_mtp(b, next, *lg, *mg);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
        }
        ASSERT_EQ(mu.size(), 1u);
        differing += (mu[0] != ms[0]) + (lu[0] != ls[0]);
        const std::vector<float> w(want.begin() + int64_t(j) * V, want.begin() + int64_t(j + 1) * V);
        worst = std::max(worst, max_abs_diff(mu[0], w));
        ++checked;
        pos = end;
    }
    std::printf(
        "[golden-gpu mtp %s] %lld positions: max |MTP logit error| vs the golden %.3g; uploaded vs streamed "
        "rows differing %lld\n",
        GetParam().c_str(), (long long)checked, worst, (long long)differing);
    EXPECT_GT(checked, 0);
    EXPECT_LT(worst, 1e-3);
    EXPECT_EQ(differing, 0);
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaMtpGolden, ::testing::Values("tiny_f32", "tiny_quant", "tiny_real_window"));

TEST(CudaMtp, RefusesWithoutTheBlock) {
    SKIP_WITHOUT_GPU();
    auto loaded = load_ref_model("tiny", 7);
    ASSERT_TRUE(loaded.is_ok());
    CudaRunnerOptions o;
    o.rt.kv_rows = "f32";
    o.n_pages = 200;
    o.verbose = false;
    auto made = make_cuda_runner(*loaded, "", o);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    auto* gpu = dynamic_cast<CudaBenchRunner*>(made->get());
    ASSERT_NE(gpu, nullptr);
    const std::vector<int32_t> toks = {1, 2, 3}, next = {2, 3, 4};
    std::vector<int32_t> table;
    for (int64_t i = 0; i < (*made)->kv_layout().pages_for_tokens(4); ++i) table.push_back(int32_t(i));
    ForwardBatch b;
    b.seqs.push_back(SeqChunk{1, toks, 0, true, table});
    std::vector<std::vector<float>> lg, mg;
    const Status st = gpu->forward_with_mtp(b, next, lg, mg);
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
    // More MTP blocks than the config has: refused at creation.
    o.mtp_blocks = 2;
    EXPECT_FALSE(make_cuda_runner(*loaded, "", o).is_ok());
}

}  // namespace
}  // namespace dsv4
