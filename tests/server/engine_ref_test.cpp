// Engine invariance on the real CPU reference model (the built-in tiny DeepSeek-V4: sliding
// window 128, ratio-4 and ratio-128 compressors, indexer): the same greedy and seeded requests
// give identical tokens alone, in mixed batches, with different prefill chunk sizes (B04),
// page sizes and physical page layouts (B01/B02/B15 at the engine level). Prompt lengths
// straddle the ratio-4 blocks and the 128-token window. Preemption-and-resume is covered on
// the FakeRunner (engine_test.cpp): the tiny model's 21 state pages per sequence make a pool
// tight enough to preempt slow to run here.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "core/philox.h"
#include "runtime/runner_factory.h"
#include "sched/engine_core.h"
#include "tests/server/choice_sink.h"

namespace dsv4 {
namespace {

using Sink = ChoiceSink;

struct Job {
    std::vector<int32_t> prompt;
    SamplingParams params;
};

struct EngineSetup {
    int64_t page_tokens = 64;
    int64_t budget = 512;
    int64_t chunk = 512;
    uint64_t shuffle = 0;
};

std::vector<std::vector<int32_t>> run(const std::vector<Job>& jobs, const EngineSetup& s, int64_t* preempted) {
    auto runner = make_model_runner({.model = "tiny", .page_tokens = s.page_tokens, .n_pages = 1024});
    EXPECT_TRUE(runner.is_ok());
    EngineConfig cfg;
    cfg.sched = {.max_running = 16, .max_tokens_per_step = s.budget, .max_prefill_chunk = s.chunk};
    cfg.page_shuffle_seed = s.shuffle;
    EngineStats stats;
    EngineCore core(**runner, cfg, stats);
    std::vector<std::shared_ptr<Sink>> sinks;
    uint64_t id = 1;
    for (const auto& j : jobs) {
        sinks.push_back(std::make_shared<Sink>());
        EXPECT_TRUE(core.add({.id = id++, .prompt = j.prompt, .params = j.params, .sink = sinks.back()}).is_ok());
    }
    for (int guard = 0; core.has_work() && guard < 20000; ++guard) core.step();
    EXPECT_EQ(core.pages().n_used(), 0);
    if (preempted) *preempted = stats.preemptions_total;
    std::vector<std::vector<int32_t>> out;
    for (auto& sk : sinks) {
        EXPECT_EQ(sk->finish[0], FinishReason::kLength);
        out.push_back(sk->tokens[0]);
    }
    return out;
}

TEST(EngineRefInvariance, TinyModelGreedyAndSeeded) {
    std::vector<Job> jobs;
    const int lens[] = {3, 131, 10};
    for (int i = 0; i < 3; ++i) {
        Job j;
        for (int k = 0; k < lens[i]; ++k)
            j.prompt.push_back(int32_t(2 + philox_uniform(uint64_t(40 + i), 1, uint64_t(k)) * 120000));
        j.params.temperature = 0;
        j.params.max_tokens = 6;
        j.params.ignore_eos = true;
        if (i == 2) {
            j.params.temperature = 1.0f;
            j.params.seed = 1234;
        }
        jobs.push_back(j);
    }
    std::vector<std::vector<int32_t>> ref;
    for (const auto& j : jobs) ref.push_back(run({j}, {}, nullptr)[0]);
    for (const auto& r : ref) ASSERT_EQ(r.size(), 6u);

    const EngineSetup setups[] = {
        {.budget = 512, .chunk = 512},                                 // mixed batch, whole prompts
        {.budget = 24, .chunk = 5},                                    // chunked prefill, 5-token chunks
        {.page_tokens = 16, .budget = 64, .chunk = 64, .shuffle = 9},  // other page size/layout
    };
    for (const auto& s : setups) {
        int64_t preempted = 0;
        auto got = run(jobs, s, &preempted);
        ASSERT_EQ(got.size(), jobs.size());
        for (size_t i = 0; i < jobs.size(); ++i)
            EXPECT_EQ(got[i], ref[i]) << "job " << i << " chunk " << s.chunk << " page_tokens " << s.page_tokens;
    }
}

}  // namespace
}  // namespace dsv4
