// The serving engine (EngineCore: scheduler, chunked prefill, page allocator with shuffled page
// ids, sampler) driving the CUDA runner: greedy outputs identical to the same engine on the CPU
// runner. Mixed prefill + decode steps run eagerly, pure decode steps as CUDA graphs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>

#include "runtime/cuda_runner.h"
#include "runtime/runner_factory.h"
#include "sched/engine_core.h"
#include "tests/kernels/cuda_runner/small512_config.h"
#include "tests/server/recording_runner.h"

namespace dsv4 {
namespace {

class Collect : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
        if (ev.finish == FinishReason::kError) error = ev.error;
    }
    std::vector<int32_t> tokens;
    std::string error;
};

// Runner options of a golden model (tests/data/golden/<name>) on the CUDA backend.
RunnerOptions golden_cuda(const char* name, int64_t n_pages, int64_t page_tokens) {
    const char* env = std::getenv("DSV4_GOLDEN_DIR");
    RunnerOptions ro;
    ro.model = std::string(env && *env ? env : DSV4_GOLDEN_DIR) + "/" + name;
    ro.n_pages = n_pages;
    ro.page_tokens = page_tokens;
    ro.backend = "cuda";
    return ro;
}

std::vector<std::vector<int32_t>> serve(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts) {
    EngineConfig cfg;
    cfg.sched.max_running = 8;
    cfg.sched.max_tokens_per_step = 48;
    cfg.sched.max_prefill_chunk = 32;
    cfg.page_shuffle_seed = 77;
    EngineStats stats;
    EngineCore core(runner, cfg, stats);
    std::vector<std::shared_ptr<Collect>> sinks;
    uint64_t id = 1;
    for (const auto& p : prompts) {
        auto s = std::make_shared<Collect>();
        sinks.push_back(s);
        GenRequest r;
        r.id = id++;
        r.prompt = p;
        r.params.temperature = 0;
        r.params.max_tokens = 12;
        r.params.ignore_eos = true;
        r.sink = s;
        const Status st = core.add(std::move(r));
        EXPECT_TRUE(st.is_ok()) << st.to_string();
    }
    for (int guard = 0; core.has_work() && guard < 10000; ++guard) core.step();
    std::vector<std::vector<int32_t>> out;
    for (auto& s : sinks) {
        EXPECT_TRUE(s->error.empty()) << s->error;
        out.push_back(s->tokens);
    }
    return out;
}

TEST(CudaEngine, GreedyOutputsMatchCpuEngine) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    RunnerOptions ro = golden_cuda("tiny_quant", 800, 16);
    ro.rt.kv_rows = "f32";  // exact rows: greedy outputs identical to the cpu engine
    auto gpu = make_model_runner(ro);
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    ro.backend = "cpu";
    auto cpu = make_model_runner(ro);
    ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
    std::mt19937 g(3);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {1, 5, 37, 90, 3, 64}) {
        std::vector<int32_t> p(static_cast<size_t>(len));
        for (auto& t : p) t = int32_t(2 + g() % 500);
        prompts.push_back(p);
    }
    const auto a = serve(**gpu, prompts);
    const auto b = serve(**cpu, prompts);
    int same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    std::printf(
        "[engine cuda] %zu requests through EngineCore (chunked prefill, shuffled pages): %d/%zu greedy outputs "
        "identical to the CPU engine\n",
        a.size(), same, a.size());
    EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

struct Choice {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    FinishReason finish = FinishReason::kNone;
    bool operator==(const Choice&) const = default;
};
class Record : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
        for (const auto& r : ev.logprobs) c.logprobs.push_back(r.logprob);
        if (ev.finish != FinishReason::kNone) c.finish = ev.finish;
        if (ev.finish == FinishReason::kError) error = ev.error;
    }
    Choice c;
    std::string error;
};

// The overlapped engine (the next step launched before the previous is collected; pending decode
// tokens filled in on the GPU from the sampled ids) against the same runner stepped in turn, on
// every row kind: greedy (device argmax), seeded temperature, penalties (collect-first), logprobs,
// more than 20 top logprobs (host rows), min_tokens masks, EOS not ignored.
TEST(CudaEngine, OverlappedStepsGiveTheSameOutputs) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    RunnerOptions ro = golden_cuda("tiny_quant", 800, 16);
    std::vector<SamplingParams> ps(7);
    for (auto& p : ps) p.max_tokens = 14;
    ps[0].temperature = 0;
    ps[1].temperature = 0.9f, ps[1].seed = 5;
    ps[2].temperature = 0, ps[2].repetition_penalty = 1.3f, ps[2].presence_penalty = 0.2f;
    ps[3].temperature = 0.7f, ps[3].seed = 8, ps[3].logprobs = 3;
    ps[4].temperature = 0, ps[4].logprobs = 25;
    ps[5].temperature = 0, ps[5].min_tokens = 6;
    ps[6].temperature = 1.0f, ps[6].seed = 2, ps[6].top_k = 40, ps[6].frequency_penalty = 0.3f;
    auto run = [&](EngineConfig::Overlap ov, int64_t* overlapped) {
        auto gpu = make_model_runner(ro);
        EXPECT_TRUE(gpu.is_ok()) << gpu.status().to_string();
        EngineConfig cfg;
        cfg.sched = {.max_running = 8, .max_tokens_per_step = 48, .max_prefill_chunk = 32};
        cfg.page_shuffle_seed = 5;
        cfg.overlap = ov;
        EngineStats stats;
        EngineCore core(**gpu, cfg, stats);
        EXPECT_EQ(core.overlapping(), ov != EngineConfig::Overlap::kOff);
        std::vector<std::shared_ptr<Record>> sinks;
        std::mt19937 g(11);
        for (size_t i = 0; i < ps.size(); ++i) {
            std::vector<int32_t> prompt(5 + 13 * i);
            for (auto& t : prompt) t = int32_t(2 + g() % 500);
            sinks.push_back(std::make_shared<Record>());
            EXPECT_TRUE(core.add({.id = i + 1, .prompt = prompt, .params = ps[i], .sink = sinks.back()}).is_ok());
        }
        for (int guard = 0; core.has_work() && guard < 10000; ++guard) core.step();
        EXPECT_EQ(core.pages().n_used(), 0);
        *overlapped = stats.overlapped_steps_total;
        std::vector<Choice> out;
        for (auto& s : sinks) {
            EXPECT_TRUE(s->error.empty()) << s->error;
            out.push_back(s->c);
        }
        return out;
    };
    int64_t n_on = 0, n_off = 0;
    const auto on = run(EngineConfig::Overlap::kAuto, &n_on);
    const auto off = run(EngineConfig::Overlap::kOff, &n_off);
    EXPECT_EQ(on, off);
    EXPECT_EQ(n_off, 0);
    EXPECT_GT(n_on, 10) << "the CUDA runner's steps never overlapped";
    std::printf(
        "[engine cuda] overlapped scheduling: %lld steps launched while one ran; %zu outputs identical "
        "with overlap on and off\n",
        (long long)n_on, on.size());
}

// The page pool sized from the GPU's memory: what is left of the fraction after the weights and
// workspaces, capped at max_seqs sequences of max_context; a fraction too small is an error that says so.
TEST(CudaRunnerPool, SizedFromMemory) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    RunnerOptions ro = golden_cuda("tiny_quant", 0, 16);
    ro.max_seqs = 16;
    ro.max_context = 2048;
    ro.gpu_memory_utilization = 0.9;
    auto r = make_model_runner(ro);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const KvLayout& L = (*r)->kv_layout();
    // The tiny model's pages are small: the cap (16 sequences of 2048 positions) binds.
    EXPECT_EQ((*r)->n_pages(), 16 * L.pages_for_tokens(2048));
    r->reset();
    size_t free_b = 0, total_b = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    ro.gpu_memory_utilization = double(total_b - free_b) / double(total_b) + 0.001;  // nothing left for pages
    auto bad = make_model_runner(ro);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kResourceExhausted) << bad.status().to_string();
    EXPECT_NE(bad.status().message().find("gpu_memory_utilization"), std::string::npos) << bad.status().to_string();
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// Prefix caching on the CUDA runner (page copies on the device, shared token pages, overlapped
// steps): greedy outputs identical with and without the cache on the golden model with Flash's
// window 128 / HCA 128 settings, for prefixes cut around the 4- and 128-token boundaries, one
// request after another (each finds the earlier ones cached) and all at once; no page leaked.
TEST(CudaEngine, PrefixCacheGreedyIdentical) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    RunnerOptions ro = golden_cuda("tiny_real_window", 1200, 64);
    std::mt19937 g(17);
    std::vector<int32_t> base(420);
    for (auto& t : base) t = int32_t(2 + g() % 500);
    std::vector<std::vector<int32_t>> prompts = {base};
    for (int cut : {127, 128, 129, 131, 255, 256, 257, 300, 385, 420}) {
        std::vector<int32_t> p(base.begin(), base.begin() + cut);
        for (int k = 0; k < 1 + cut % 5; ++k) p.push_back(int32_t(2 + g() % 500));
        prompts.push_back(p);
    }
    auto run = [&](bool cache, bool serial, int64_t* hits) {
        auto gpu = make_model_runner(ro);
        EXPECT_TRUE(gpu.is_ok()) << gpu.status().to_string();
        EngineConfig cfg;
        cfg.sched = {.max_running = 8, .max_tokens_per_step = 160, .max_prefill_chunk = 160};
        cfg.sched.prefix_cache = cache;
        cfg.sched.align_prefill_chunks = true;
        cfg.page_shuffle_seed = 9;
        EngineStats stats;
        EngineCore core(**gpu, cfg, stats);
        std::vector<std::shared_ptr<Record>> sinks;
        for (size_t i = 0; i < prompts.size(); ++i) {
            SamplingParams p;
            p.temperature = 0;
            p.max_tokens = 10;
            p.ignore_eos = true;
            sinks.push_back(std::make_shared<Record>());
            EXPECT_TRUE(core.add({.id = i + 1, .prompt = prompts[i], .params = p, .sink = sinks.back()}).is_ok());
            if (serial)
                for (int guard = 0; core.has_work() && guard < 10000; ++guard) core.step();
        }
        for (int guard = 0; core.has_work() && guard < 10000; ++guard) core.step();
        EXPECT_EQ(core.pages().n_used(), stats.prefix_cache_pages.load());
        core.flush_prefix_cache();
        EXPECT_EQ(core.pages().n_used(), 0);
        *hits = stats.prefix_cache_hit_tokens_total;
        std::vector<Choice> out;
        for (auto& s : sinks) {
            EXPECT_TRUE(s->error.empty()) << s->error;
            out.push_back(s->c);
        }
        return out;
    };
    int64_t h_off = 0, h_on = 0, h_on2 = 0;
    const auto off = run(false, true, &h_off);
    const auto on = run(true, true, &h_on);
    const auto on2 = run(true, false, &h_on2);
    EXPECT_EQ(on, off);
    EXPECT_EQ(on2, off);
    EXPECT_EQ(h_off, 0);
    EXPECT_GT(h_on, 128 * 8);
    std::printf(
        "[engine cuda] prefix cache: %zu requests greedy identical with and without it; %lld prompt tokens "
        "resumed (one at a time), %lld (all at once)\n",
        prompts.size(), (long long)h_on, (long long)h_on2);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// Prefix caching on the fast attention path (head_dim 512, 64 heads, window 128, CSA r4 with a
// top-512 indexer, HCA r128, fp8 K=V rows: sparse_decode and the batched prefill): every logits
// row of every request within the bf16 tolerance with and without the cache (rows need not be
// bitwise equal: the batch a row is computed in differs, and tensor-core tiles may round with it),
// greedy tokens the same, all requests at once.
TEST(CudaEngine, PrefixCacheFastAttentionLogitsClose) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    const ModelConfig c = flash_geometry_config();
    ASSERT_TRUE(c.validate().is_ok());
    auto model = std::make_shared<const RefModel>(c, ModelWeights::random(c, 23), RefNumerics{});
    std::mt19937 g(29);
    std::vector<int32_t> base(700);
    for (auto& t : base) t = int32_t(g() % uint32_t(c.vocab_size));
    std::vector<std::vector<int32_t>> prompts = {std::vector<int32_t>(base.begin(), base.begin() + 600)};
    for (int cut : {128, 129, 255, 256, 257, 400, 520, 640, 700}) {
        std::vector<int32_t> p(base.begin(), base.begin() + cut);
        for (int k = 0; k < 2 + cut % 3; ++k) p.push_back(int32_t(g() % uint32_t(c.vocab_size)));
        prompts.push_back(p);
    }
    std::map<int64_t, std::vector<std::vector<float>>> rows[2];
    std::vector<std::vector<int32_t>> toks[2];
    int64_t hits = 0;
    for (int cache = 0; cache < 2; ++cache) {
        CudaRunnerOptions o;
        o.rt.kv_rows = "fp8";
        o.max_seqs = 8;
        o.max_step_tokens = 512;
        o.max_context = 1024;
        o.n_pages = 3000;
        o.verbose = false;
        auto gpu = make_cuda_runner(model, "", o);
        ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
        test::RecordingRunner rec(**gpu);
        EngineConfig cfg;
        cfg.sched = {.max_running = 8, .max_tokens_per_step = 512, .max_prefill_chunk = 256};
        cfg.sched.prefix_cache = cache == 1;
        cfg.sched.align_prefill_chunks = true;
        cfg.device_sampling = false;  // every row to the host, where it is recorded
        EngineStats stats;
        EngineCore core(rec, cfg, stats);
        std::vector<std::shared_ptr<Collect>> sinks;
        // The first request alone (it caches the shared prefix), then the others at once.
        for (size_t i = 0; i < prompts.size(); ++i) {
            SamplingParams p;
            p.temperature = 0;
            p.max_tokens = 6;
            p.ignore_eos = true;
            sinks.push_back(std::make_shared<Collect>());
            EXPECT_TRUE(core.add({.id = i + 1, .prompt = prompts[i], .params = p, .sink = sinks.back()}).is_ok());
            if (i == 0)
                for (int guard = 0; core.has_work() && guard < 10000; ++guard) core.step();
        }
        for (int guard = 0; core.has_work() && guard < 10000; ++guard) core.step();
        rows[cache] = rec.rows;
        for (auto& s : sinks) toks[cache].push_back(s->tokens);
        if (cache) hits = stats.prefix_cache_hit_tokens_total;
        core.flush_prefix_cache();
        EXPECT_EQ(core.pages().n_used(), 0);
    }
    EXPECT_GT(hits, 128 * 6);
    EXPECT_EQ(toks[1], toks[0]);
    ASSERT_EQ(rows[1].size(), rows[0].size());
    double worst = 0, scale = 0;
    size_t n = 0, bitwise = 0;
    for (const auto& [seq, r0] : rows[0]) {
        const auto& r1 = rows[1].at(seq);
        ASSERT_EQ(r1.size(), r0.size());
        for (size_t i = 0; i < r0.size(); ++i) {
            double w = 0;
            for (size_t j = 0; j < r0[i].size(); ++j) {
                w = std::max(w, std::fabs(double(r1[i][j]) - r0[i][j]));
                scale = std::max(scale, double(std::fabs(r0[i][j])));
            }
            worst = std::max(worst, w);
            bitwise += w == 0;
            ++n;
        }
    }
    std::printf(
        "[engine cuda] prefix cache, fast attention: %zu logits rows, %zu bitwise equal, max |diff| %.3g "
        "(logit scale %.3g); %lld prompt tokens resumed\n",
        n, bitwise, worst, scale, (long long)hits);
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(worst, 8e-3 * scale);  // bf16: 8 bits of mantissa
}

}  // namespace
}  // namespace dsv4
