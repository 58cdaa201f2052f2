// The CUDA runner end to end: against RefRunner (CPU reference) on the built-in tiny model and
// on the golden checkpoints (in their checkpoint formats: BF16, FP8 + MXFP4), against the
// transformers goldens; batches with padding, one-token prompts (zero compressed rows), scattered
// and large page ids (B09); every attention variant; graph replay == eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention/attn_variants.h"
#include "model/checkpoint.h"
#include "runtime/cuda_runner.h"
#include "runtime/ref_runner.h"
#include "runtime/runner_factory.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"

namespace dsv4 {
namespace {

std::shared_ptr<const RefModel> tiny_model() {
    static auto m = load_ref_model("tiny", 7);
    EXPECT_TRUE(m.is_ok());
    return *m;
}

struct Compare {
    double worst = 0;
    int greedy_mismatch = 0;
    void add(const std::vector<float>& gpu, const std::vector<float>& cpu) {
        worst = std::max(worst, max_abs_diff(gpu, cpu));
        greedy_mismatch += argmax_i32(gpu) != argmax_i32(cpu);
    }
};

// Prefill `prompt` in `chunks`, then `n_decode` greedy steps, on CPU and GPU side by side.
Compare run_pair(ModelRunner& gpu, RefRunner& cpu, const std::vector<int32_t>& prompt, const std::vector<int>& chunks,
                 int n_decode, int64_t gpu_first_page, int64_t gpu_stride) {
    Compare c;
    const int64_t total = int64_t(prompt.size()) + n_decode;
    RunnerSeq g{1, page_table_for(gpu, total, gpu_first_page, gpu_stride)}, h{1, {}};
    SimplePagePool pool(cpu.n_pages());
    EXPECT_TRUE(pool.grow(h.table, cpu.kv_layout().pages_for_tokens(total)));
    size_t off = 0;
    std::vector<float> lg, lc;
    for (int n : chunks) {
        std::vector<int32_t> ch(prompt.begin() + off, prompt.begin() + off + n);
        off += n;
        lg = run_seqs(gpu, {&g}, {ch})[0];
        lc = run_seqs(cpu, {&h}, {ch})[0];
        c.add(lg, lc);
    }
    for (int i = 0; i < n_decode; ++i) {
        const int32_t tc = argmax_i32(lc);
        lg = run_seqs(gpu, {&g}, {{tc}})[0];
        lc = run_seqs(cpu, {&h}, {{tc}})[0];
        c.add(lg, lc);
    }
    return c;
}

std::vector<int32_t> random_ids(int n, int64_t vocab, uint32_t seed) {
    std::mt19937 g(seed);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = int32_t(g() % uint32_t(vocab));
    return v;
}

TEST(CudaRunner, TinyModelMatchesCpuReference) {
    SKIP_WITHOUT_GPU();
    auto model = tiny_model();
    CudaRunnerOptions o;
    o.rt.kv_rows = "f32";  // exact rows: the comparisons below are at f32 precision
    o.n_pages = 4000;
    auto gpu = make_cuda_runner(model, "", o);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    auto cpu = RefRunner::create(model, 64, 2000);
    ASSERT_TRUE(cpu.is_ok());
    const auto prompt = random_ids(300, model->config().vocab_size, 11);
    // chunks end before/at/after the window (128), the first HCA row (127) and the sparse CSA switch.
    const Compare c = run_pair(**gpu, **cpu, prompt, {1, 66, 60, 1, 100, 72}, 24, 3999, 7);
    std::printf("[runner tiny] max |logit diff| vs CPU %.3g, greedy mismatches %d\n", c.worst, c.greedy_mismatch);
    EXPECT_LT(c.worst, 2e-3);
    EXPECT_EQ(c.greedy_mismatch, 0);
}

TEST(CudaRunner, EveryAttentionVariantMatchesCpu) {
    SKIP_WITHOUT_GPU();
    auto model = tiny_model();
    auto cpu = RefRunner::create(model, 64, 2000);
    ASSERT_TRUE(cpu.is_ok());
    const auto prompt = random_ids(140, model->config().vocab_size, 12);
    for (const auto& v : cuda::attn_variants()) {
        CudaRunnerOptions o;
        o.rt.kv_rows = "f32";  // exact rows: the comparisons below are at f32 precision
        o.n_pages = 2000;
        o.rt.attn_variant = v.name;
        o.verbose = false;
        auto gpu = make_cuda_runner(model, "", o);
        ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
        const Compare c = run_pair(**gpu, **cpu, prompt, {140}, 6, 1999, 3);
        std::printf("[runner variant %s] max |logit diff| %.3g, greedy mismatches %d\n", v.name, c.worst,
                    c.greedy_mismatch);
        EXPECT_LT(c.worst, 2e-3) << v.name;
        EXPECT_EQ(c.greedy_mismatch, 0) << v.name;
    }
}

// Batches: 3 sequences (not a power of two: graph padding), one of them a one-token prompt
// (zero compressed rows), prefill together, then decode together; large page ids (> 2^31 bytes
// and elements into the pool) for the GPU.
TEST(CudaRunner, BatchedPaddedLargePageIds) {
    SKIP_WITHOUT_GPU();
    auto model = tiny_model();
    const ModelConfig& cfg = model->config();
    CudaRunnerOptions o;
    o.rt.kv_rows = "f32";  // exact rows: the comparisons below are at f32 precision
    o.n_pages = 700000;
    o.verbose = false;
    auto gpu = make_cuda_runner(model, "", o);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    const KvLayout& L = (*gpu)->kv_layout();
    std::printf("[runner batch] page %lld B: top page offset %.3g elements\n", (long long)L.page_bytes,
                double(o.n_pages - 1) * double(L.page_elems));
    auto cpu = RefRunner::create(model, 64, 4000);
    ASSERT_TRUE(cpu.is_ok());
    const std::vector<int> plen = {1, 5, 131};
    const int n_dec = 9;
    std::vector<RunnerSeq> g(3), h(3);
    SimplePagePool pool((*cpu)->n_pages());
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 3; ++i) {
        prompts.push_back(random_ids(plen[i], cfg.vocab_size, 20 + i));
        g[i].id = h[i].id = i + 1;
        g[i].table = page_table_for(**gpu, plen[i] + n_dec, o.n_pages - 1 - i, 3);
        ASSERT_TRUE(pool.grow(h[i].table, (*cpu)->kv_layout().pages_for_tokens(plen[i] + n_dec)));
    }
    Compare c;
    auto lg = run_seqs(**gpu, {&g[0], &g[1], &g[2]}, prompts);
    auto lc = run_seqs(**cpu, {&h[0], &h[1], &h[2]}, prompts);
    for (int i = 0; i < 3; ++i) c.add(lg[i], lc[i]);
    for (int s = 0; s < n_dec; ++s) {
        std::vector<std::vector<int32_t>> next;
        for (int i = 0; i < 3; ++i) next.push_back({argmax_i32(lc[i])});
        lg = run_seqs(**gpu, {&g[0], &g[1], &g[2]}, next);
        lc = run_seqs(**cpu, {&h[0], &h[1], &h[2]}, next);
        for (int i = 0; i < 3; ++i) c.add(lg[i], lc[i]);
    }
    std::printf("[runner batch] max |logit diff| %.3g, greedy mismatches %d\n", c.worst, c.greedy_mismatch);
    EXPECT_LT(c.worst, 2e-3);
    EXPECT_EQ(c.greedy_mismatch, 0);
}

TEST(CudaRunner, GraphReplayEqualsEager) {
    SKIP_WITHOUT_GPU();
    auto model = tiny_model();
    // Runs: eager, graphs, graphs with the attention projections serialised on one stream (no
    // side-stream fork/join): all three must agree bit for bit.
    std::vector<std::vector<float>> out[3];
    for (int graphs = 0; graphs < 3; ++graphs) {
        CudaRunnerOptions o;
        o.rt.kv_rows = "f32";  // exact rows: the comparisons below are at f32 precision
        o.n_pages = 3000;
        o.rt.cuda_graphs = graphs >= 1;
        o.rt.side_streams = graphs != 2;
        o.verbose = false;
        auto gpu = make_cuda_runner(model, "", o);
        ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
        std::vector<RunnerSeq> s(2);
        s[0].table = page_table_for(**gpu, 200, 100, 1);
        s[1].table = page_table_for(**gpu, 200, 2999, 5);
        s[1].id = 2;
        const auto p0 = random_ids(70, model->config().vocab_size, 31),
                   p1 = random_ids(9, model->config().vocab_size, 32);
        auto l = run_seqs(**gpu, {&s[0], &s[1]}, {p0, p1});
        for (int i = 0; i < 40; ++i) {
            l = run_seqs(**gpu, {&s[0], &s[1]}, {{argmax_i32(l[0])}, {argmax_i32(l[1])}});
            out[graphs].insert(out[graphs].end(), l.begin(), l.end());
        }
    }
    ASSERT_EQ(out[0].size(), out[1].size());
    ASSERT_EQ(out[0].size(), out[2].size());
    double worst = 0, worst_serial = 0;
    for (size_t i = 0; i < out[0].size(); ++i) worst = std::max(worst, max_abs_diff(out[0][i], out[1][i]));
    for (size_t i = 0; i < out[0].size(); ++i)
        worst_serial = std::max(worst_serial, max_abs_diff(out[1][i], out[2][i]));
    std::printf("[runner graph] graph vs eager max |diff| %.3g, side streams vs one stream %.3g, over %zu rows\n",
                worst, worst_serial, out[0].size());
    EXPECT_EQ(worst, 0.0);
    EXPECT_EQ(worst_serial, 0.0);
}

// The BF16 compressed-row switch: rows rounded to bf16, everything else f32; close to the CPU
// reference (which keeps f32 rows) within bf16 rounding.
TEST(CudaRunner, Bf16CompressedRowsCloseToCpu) {
    SKIP_WITHOUT_GPU();
    auto model = tiny_model();
    CudaRunnerOptions o;
    o.n_pages = 2000;
    o.rt.kv_rows = "bf16";
    o.verbose = false;
    auto gpu = make_cuda_runner(model, "", o);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    auto cpu = RefRunner::create(model, 64, 2000);
    ASSERT_TRUE(cpu.is_ok());
    const auto prompt = random_ids(260, model->config().vocab_size, 13);
    const Compare c = run_pair(**gpu, **cpu, prompt, {200, 60}, 12, 1999, 2);
    std::printf("[runner bf16 rows] max |logit diff| vs CPU (f32 rows) %.3g, greedy mismatches %d\n", c.worst,
                c.greedy_mismatch);
    EXPECT_LT(c.worst, 0.25);
    EXPECT_GT(c.worst, 0.0);  // the switch really changes the stored rows
}

// make_model_runner(backend "cuda"): the path `dsv4 generate/serve --backend cuda` take.
TEST(CudaRunner, FactoryBackendCudaMatchesCpuBackend) {
    SKIP_WITHOUT_GPU();
    const char* env = std::getenv("DSV4_GOLDEN_DIR");
    RunnerOptions ro;
    ro.model = std::string(env && *env ? env : DSV4_GOLDEN_DIR) + "/tiny_quant";
    ro.n_pages = 600;
    ro.backend = "cuda";
    ro.rt.kv_rows = "f32";  // exact rows, compared with the cpu backend at 1e-4
    auto gpu = make_model_runner(ro);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    ro.backend = "cpu";
    auto cpu = make_model_runner(ro);
    ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
    RunnerSeq g{1, page_table_for(**gpu, 64, 599, 1)}, h{1, page_table_for(**cpu, 64, 599, 1)};
    const auto prompt = random_ids(40, (*gpu)->config().vocab_size, 14);
    auto lg = run_seqs(**gpu, {&g}, {prompt});
    auto lc = run_seqs(**cpu, {&h}, {prompt});
    Compare c;
    c.add(lg[0], lc[0]);
    for (int i = 0; i < 16; ++i) {
        const int32_t t = argmax_i32(lc[0]);
        lg = run_seqs(**gpu, {&g}, {{t}});
        lc = run_seqs(**cpu, {&h}, {{t}});
        c.add(lg[0], lc[0]);
    }
    std::printf(
        "[runner factory cuda] tiny_quant via make_model_runner: max |logit diff| vs cpu backend %.3g, greedy "
        "mismatches %d\n",
        c.worst, c.greedy_mismatch);
    EXPECT_LT(c.worst, 1e-4);
    EXPECT_EQ(c.greedy_mismatch, 0);
}

// Decode-step latency of the built-in tiny model (informational, for docs/perf/ledger.md): wall time
// of forward() per step, plan upload and the logits copy to the host included.
TEST(CudaRunnerPerf, TinyDecodeStepLatency) {
    SKIP_WITHOUT_GPU();
    auto model = tiny_model();
    for (int graphs = 0; graphs < 2; ++graphs) {
        CudaRunnerOptions o;
        o.rt.kv_rows = "f32";  // exact rows: the comparisons below are at f32 precision
        o.n_pages = 2000;
        o.rt.cuda_graphs = graphs == 1;
        o.verbose = false;
        auto gpu = make_cuda_runner(model, "", o);
        ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
        int64_t next_page = 1999;
        for (int B : {1, 8, 32}) {
            std::vector<RunnerSeq> s(B);
            std::vector<RunnerSeq*> ptrs;
            std::vector<std::vector<int32_t>> prompts;
            for (int i = 0; i < B; ++i) {
                s[i].id = i + 1;
                s[i].table = page_table_for(**gpu, 64 + 70, next_page, 1);
                next_page -= int64_t(s[i].table.size());
                ptrs.push_back(&s[i]);
                prompts.push_back(random_ids(64, model->config().vocab_size, 100 + i));
            }
            auto l = run_seqs(**gpu, ptrs, prompts);
            auto next = [&] {
                std::vector<std::vector<int32_t>> n;
                for (const auto& row : l) n.push_back({argmax_i32(row)});
                return n;
            };
            for (int i = 0; i < 5; ++i) l = run_seqs(**gpu, ptrs, next());
            const int steps = 50;
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < steps; ++i) l = run_seqs(**gpu, ptrs, next());
            const double ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
            std::printf("[perf tiny decode] graphs %s batch %2d: %.3f ms/step, %.0f tok/s\n", graphs ? "on " : "off", B,
                        ms, B * 1000.0 / ms);
            next_page = next_page < 800 ? 1999 : next_page;
        }
    }
}

// Golden checkpoints in their own formats, against transformers and the greedy goldens.
class CudaGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGolden, LogitsAndGreedyMatchTransformers) {
    SKIP_WITHOUT_GPU();
    const char* env = std::getenv("DSV4_GOLDEN_DIR");  // the GPU machine runs binaries built elsewhere
    const std::string dir = std::string(env && *env ? env : DSV4_GOLDEN_DIR) + "/" + GetParam();
    auto model = load_ref_model(dir, 0);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    auto expected = Checkpoint::open(dir + "/expected.safetensors");
    ASSERT_TRUE(expected.is_ok());
    auto get_i32 = [&](const std::string& name) {
        auto v = expected->get(name);
        EXPECT_TRUE(v.is_ok()) << name;
        return *load_i32(*expected, name, v->shape);
    };
    const auto ids = get_i32("input_ids");
    const auto lengths = get_i32("logits.lengths");
    auto lv = expected->get("logits");
    ASSERT_TRUE(lv.is_ok());
    const auto logits = *load_f32(*expected, "logits", lv->shape);
    const int64_t V = (*model)->config().vocab_size;
    CudaRunnerOptions o;
    o.rt.kv_rows = "f32";  // exact rows: the comparisons below are at f32 precision
    o.n_pages = 4000;
    o.verbose = GetParam() == "tiny_quant";
    auto gpu = make_cuda_runner(*model, dir, o);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    // Chunked prefill ending exactly at every golden prefix length.
    std::vector<int32_t> ls(lengths.begin(), lengths.end());
    std::vector<size_t> order(ls.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ls[a] < ls[b]; });
    RunnerSeq s{1, page_table_for(**gpu, int64_t(ids.size()), 3999, 1)};
    double worst = 0;
    int64_t worst_len = 0;
    for (size_t j : order) {
        const int64_t L = ls[j];
        if (L <= s.pos) continue;
        std::vector<int32_t> ch(ids.begin() + s.pos, ids.begin() + L);
        const auto out = run_seqs(**gpu, {&s}, {ch})[0];
        std::vector<float> want(logits.begin() + j * V, logits.begin() + (j + 1) * V);
        const double e = max_abs_diff(out, want);
        if (e > worst) worst = e, worst_len = L;
    }
    std::printf("[golden-gpu %s] %zu prefix lengths, max |logit error| vs transformers %.3g (at %lld)\n",
                GetParam().c_str(), ls.size(), worst, (long long)worst_len);
    EXPECT_LT(worst, 1e-3);
    for (int P : {37, 300, 2040}) {
        const std::string pfx = "greedy.P" + std::to_string(P);
        const auto prompt = get_i32(pfx + ".prompt");
        const auto want = get_i32(pfx + ".tokens");
        RunnerSeq q{2, page_table_for(**gpu, P + int64_t(want.size()), 3000 - 0, 1)};
        std::vector<int32_t> got, chunk = prompt;
        for (size_t i = 0; i < want.size(); ++i) {
            const auto out = run_seqs(**gpu, {&q}, {chunk})[0];
            got.push_back(argmax_i32(out));
            chunk = {got.back()};
        }
        EXPECT_EQ(got, want) << pfx;
        std::printf("[golden-gpu %s] %s: %zu greedy tokens, %s\n", GetParam().c_str(), pfx.c_str(), got.size(),
                    got == want ? "identical" : "DIFFERENT");
    }
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaGolden, ::testing::Values("tiny_f32", "tiny_quant", "tiny_real_window"));

// The runner streamed from the checkpoint (make_cuda_runner(cfg, dir): load plan + pinned staging
// ring, no RefModel) against the runner uploaded from the RefModel's checkpoint: same device
// bytes, so prefill logits and greedy continuations are bitwise identical.
class CudaStreamedLoad : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaStreamedLoad, LogitsBitwiseEqualToRefModelUpload) {
    SKIP_WITHOUT_GPU();
    const char* env = std::getenv("DSV4_GOLDEN_DIR");
    const std::string dir = std::string(env && *env ? env : DSV4_GOLDEN_DIR) + "/" + GetParam();
    auto model = load_ref_model(dir, 0);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    CudaRunnerOptions o;
    o.n_pages = 2000;
    o.verbose = GetParam() == "tiny_quant";
    auto old_r = make_cuda_runner(*model, dir, o);
    ASSERT_TRUE(old_r.is_ok()) << old_r.status().to_string();
    auto cfg = load_model_config(dir);
    ASSERT_TRUE(cfg.is_ok());
    auto new_r = make_cuda_runner(*cfg, dir, o);
    ASSERT_TRUE(new_r.is_ok()) << new_r.status().to_string();
    EXPECT_EQ((*new_r)->config().n_layers, (*model)->config().n_layers);
    const int64_t V = (*model)->config().vocab_size;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back(int32_t((i * 7919 + 13) % V));
    RunnerSeq a{1, page_table_for(**old_r, 340, 1999, 1)}, b{1, page_table_for(**new_r, 340, 1999, 1)};
    auto la = run_seqs(**old_r, {&a}, {prompt})[0];
    auto lb = run_seqs(**new_r, {&b}, {prompt})[0];
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << "prefill logits differ";
    int same = 0;
    for (int t = 0; t < 32; ++t) {
        const int32_t ta = argmax_i32(la), tb = argmax_i32(lb);
        la = run_seqs(**old_r, {&a}, {{ta}})[0];
        lb = run_seqs(**new_r, {&b}, {{tb}})[0];
        same += std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0;
    }
    EXPECT_EQ(same, 32) << "decode logits differ";
    std::printf("[streamed-load %s] prefill 300 + 32 decode steps: %d/32 decode steps bitwise equal\n",
                GetParam().c_str(), same);
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaStreamedLoad, ::testing::Values("tiny_f32", "tiny_quant", "tiny_real_window"));

}  // namespace
}  // namespace dsv4
