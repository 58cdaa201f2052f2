// Overlapped scheduling (EngineConfig::overlap): step N+1 is planned and launched before step N
// is collected, its decode tokens passed as kPendingToken for the runner to fill in. The outputs
// must not change: every case runs with overlap forced on (kAlways, over a synchronous runner so
// the bookkeeping is exercised without a GPU) and off, and compares tokens, finish reasons,
// completion counts and logprobs. The runners read each sequence's history back from its pages
// (FakeRunner) or run the real tiny model, so a pending token filled in wrongly, a page freed
// under a step in flight or a finished sequence decoded once more changes the output.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "core/philox.h"
#include "runtime/runner_factory.h"
#include "sched/engine_core.h"
#include "sched/fake_runner.h"
#include "tests/server/host_sampling_runner.h"

namespace dsv4 {
namespace {

using Overlap = EngineConfig::Overlap;

class Sink : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        auto& c = choices[ev.choice];
        c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
        for (const auto& r : ev.logprobs) c.logprobs.push_back(r.logprob);
        if (ev.finish != FinishReason::kNone) {
            c.finish = ev.finish;
            c.completion = ev.completion_tokens;
            c.error = ev.error;
            ++c.n_finish;
        }
    }
    struct Choice {
        std::vector<int32_t> tokens;
        std::vector<float> logprobs;
        FinishReason finish = FinishReason::kNone;
        int64_t completion = -1;
        int n_finish = 0;
        std::string error;
        bool operator==(const Choice&) const = default;
    };
    std::map<int, Choice> choices;
};

struct Job {
    std::vector<int32_t> prompt;
    SamplingParams params;
    int n = 1;
};

struct Outcome {
    std::vector<std::map<int, Sink::Choice>> results;
    int64_t pending_seen = 0, preemptions = 0, steps = 0, pages_used = -1;
};

Outcome drive(ModelRunner& inner, const std::vector<Job>& jobs, Overlap overlap, SchedulerConfig sched,
              uint64_t abort_id = 0, int abort_after_steps = -1, float echo_bonus = 0.0f) {
    test::HostSamplingRunner runner(inner);
    runner.echo_bonus = echo_bonus;
    EngineConfig cfg;
    cfg.sched = sched;
    cfg.page_shuffle_seed = 7;
    cfg.default_seed = 99;
    cfg.overlap = overlap;
    EngineStats stats;
    EngineCore core(runner, cfg, stats);
    EXPECT_EQ(core.overlapping(), overlap == Overlap::kAlways);
    std::vector<std::shared_ptr<Sink>> sinks;
    uint64_t id = 1;
    for (const auto& j : jobs) {
        sinks.push_back(std::make_shared<Sink>());
        EXPECT_TRUE(
            core.add({.id = id++, .prompt = j.prompt, .params = j.params, .n = j.n, .sink = sinks.back()}).is_ok());
    }
    Outcome o;
    for (int guard = 0; core.has_work() && guard < 20000; ++guard) {
        if (o.steps == abort_after_steps) core.abort(abort_id);
        core.step();
        ++o.steps;
    }
    for (auto& s : sinks) {
        for (const auto& [c, ch] : s->choices) {
            EXPECT_EQ(ch.n_finish, 1) << "choice " << c;
            EXPECT_TRUE(ch.error.empty()) << ch.error;
        }
        o.results.push_back(s->choices);
    }
    o.pending_seen = runner.pending_seen;
    o.preemptions = stats.preemptions_total;
    o.pages_used = core.pages().n_used();
    return o;
}

std::vector<int32_t> prompt_ids(uint64_t seed, int n, int32_t lo, int32_t hi) {
    std::vector<int32_t> p;
    for (int k = 0; k < n; ++k) p.push_back(lo + int32_t(philox_uniform(seed, 0, uint64_t(k)) * float(hi - lo)));
    return p;
}

SamplingParams greedy(int max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    return p;
}

// Every kind of row: device greedy, device full (seeded, penalties that need the pending token's
// count, logprobs), host-sampled (more than 20 top logprobs), min_tokens masks, stop ids, n = 2,
// and scripted EOS finishes in the middle of a step in flight.
std::vector<Job> mixed_jobs() {
    std::vector<Job> jobs;
    jobs.push_back({prompt_ids(1, 9, 2, 1900), greedy(30)});
    jobs.push_back({{5, 6, 7, 70, 71}, greedy(40)});  // scripted: ends with EOS after 4 tokens
    SamplingParams p = greedy(25);
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.4f;
    jobs.push_back({prompt_ids(2, 30, 2, 1900), p});
    p = SamplingParams{};
    p.temperature = 0.9f;
    p.top_p = 0.9f;
    p.seed = 17;
    p.max_tokens = 33;
    jobs.push_back({prompt_ids(3, 14, 2, 1900), p, 2});
    p = greedy(20);
    p.logprobs = 3;
    p.min_tokens = 5;
    p.stop_token_ids = {11};
    jobs.push_back({prompt_ids(4, 50, 2, 1900), p});
    p = greedy(18);
    p.logprobs = 25;  // beyond the device sampler's 20: host rows
    jobs.push_back({prompt_ids(5, 21, 2, 1900), p});
    p = SamplingParams{};
    p.temperature = 1.0f;
    p.presence_penalty = 0.5f;
    p.seed = 3;
    p.max_tokens = 27;
    jobs.push_back({prompt_ids(6, 64, 2, 1900), p});
    jobs.push_back({{5, 6, 7, 70, 71, 9, 9}, greedy(12)});  // scripted again, another length
    return jobs;
}

FakeRunnerOptions fake_options(int64_t n_pages) {
    FakeRunnerOptions fo;
    fo.vocab_size = 2000;
    fo.page_tokens = 16;
    fo.n_pages = n_pages;
    fo.rules.push_back({.trigger = {70, 71}, .output = {300, 301, 302}});
    return fo;
}

TEST(EngineOverlap, SameOutputsAsWithoutOverlapOnEveryRowKind) {
    const SchedulerConfig sched{.max_running = 6, .max_tokens_per_step = 48, .max_prefill_chunk = 20};
    FakeRunner a(fake_options(4096)), b(fake_options(4096));
    const Outcome off = drive(a, mixed_jobs(), Overlap::kOff, sched);
    const Outcome on = drive(b, mixed_jobs(), Overlap::kAlways, sched);
    EXPECT_EQ(on.results, off.results);
    EXPECT_EQ(off.pending_seen, 0);
    // Every device-sampled decode goes through a pending token, penalised rows too (the runner
    // counts the pending token in their penalties); at most one step per choice is planned past its end.
    int64_t decodes = 0, choices = 0;
    const std::vector<Job> jobs = mixed_jobs();
    for (size_t i = 0; i < jobs.size(); ++i)
        for (const auto& [c, ch] : on.results[i])
            if (jobs[i].params.logprobs <= kMaxDeviceTopLogprobs) decodes += ch.completion - 1, ++choices;
    EXPECT_GT(on.pending_seen, decodes * 3 / 4) << "of " << decodes;
    EXPECT_LE(on.pending_seen, decodes + choices);
    EXPECT_EQ(on.pages_used, 0);
    EXPECT_EQ(off.pages_used, 0);
    // The scripted requests stop on EOS with the step after it already launched.
    EXPECT_EQ(on.results[1].at(0).finish, FinishReason::kStop);
    EXPECT_EQ(on.results[1].at(0).tokens, (std::vector<int32_t>{300, 301, 302}));
    EXPECT_EQ(on.results[1].at(0).completion, 4);
    EXPECT_EQ(on.results[0].at(0).completion, 30);
}

TEST(EngineOverlap, PendingTokensCountInThePenalties) {
    // Only penalised rows, over a model that favours repeating its input token (the pending one):
    // without the pending token's count in the penalties, the repeat wins and the outputs differ.
    std::vector<Job> jobs;
    for (int i = 0; i < 4; ++i) {
        SamplingParams p = greedy(24);
        if (i % 2)
            p.repetition_penalty = 1.8f;
        else
            p.frequency_penalty = 1.5f, p.presence_penalty = 0.5f;
        if (i == 3) p.temperature = 0.8f, p.seed = 9;
        jobs.push_back({prompt_ids(20 + uint64_t(i), 6 + 5 * i, 2, 60), p});
    }
    const SchedulerConfig sched{.max_running = 4, .max_tokens_per_step = 64, .max_prefill_chunk = 32};
    FakeRunner a(fake_options(4096)), b(fake_options(4096));
    const Outcome off = drive(a, jobs, Overlap::kOff, sched, 0, -1, 11.0f);
    const Outcome on = drive(b, jobs, Overlap::kAlways, sched, 0, -1, 11.0f);
    EXPECT_EQ(on.results, off.results);
    EXPECT_GT(on.pending_seen, 60);
    // The penalties did decide: without them the model repeats itself.
    std::vector<Job> plain = jobs;
    for (auto& j : plain)
        j.params.repetition_penalty = 1.0f, j.params.frequency_penalty = j.params.presence_penalty = 0;
    FakeRunner c(fake_options(4096));
    EXPECT_NE(drive(c, plain, Overlap::kOff, sched, 0, -1, 11.0f).results, off.results);
}

TEST(EngineOverlap, PreemptionUnderOverlapCollectsFirstAndKeepsOutputs) {
    // 16 pages of 16 tokens: the jobs cannot all hold their pages, so sequences are preempted
    // and recomputed; with a step in flight the engine collects it before preempting.
    const SchedulerConfig sched{.max_running = 8, .max_tokens_per_step = 64, .max_prefill_chunk = 32};
    FakeRunner a(fake_options(16)), b(fake_options(16));
    const Outcome off = drive(a, mixed_jobs(), Overlap::kOff, sched);
    const Outcome on = drive(b, mixed_jobs(), Overlap::kAlways, sched);
    EXPECT_GT(off.preemptions, 0);
    EXPECT_GT(on.preemptions, 0);
    EXPECT_GT(on.pending_seen, 0);
    // Preemption points may differ (the overlapped plan runs one step ahead), outputs may not.
    EXPECT_EQ(on.results, off.results);
    EXPECT_EQ(on.pages_used, 0);
}

TEST(EngineOverlap, AbortWithAStepInFlight) {
    const SchedulerConfig sched{.max_running = 6, .max_tokens_per_step = 48, .max_prefill_chunk = 20};
    std::vector<Job> jobs = mixed_jobs();
    for (int after : {1, 2, 5}) {
        FakeRunner a(fake_options(4096)), b(fake_options(4096));
        const Outcome base = drive(a, jobs, Overlap::kOff, sched);
        const Outcome on = drive(b, jobs, Overlap::kAlways, sched, /*abort_id=*/1, after);
        EXPECT_EQ(on.results[0].at(0).finish, FinishReason::kAbort) << after;
        for (size_t i = 1; i < jobs.size(); ++i)
            EXPECT_EQ(on.results[i], base.results[i]) << "job " << i << " after " << after;
        EXPECT_EQ(on.pages_used, 0);
    }
}

TEST(EngineOverlap, TinyModelGreedyAndSeededIdentical) {
    // The real CPU reference (window, compressors, indexer state in pages): prompts across the
    // ratio-4 blocks and the 128-token window, chunked prefill beside decodes.
    std::vector<Job> jobs;
    jobs.push_back({prompt_ids(11, 130, 3, 120000), greedy(10)});
    jobs.push_back({prompt_ids(12, 7, 3, 120000), greedy(14)});
    SamplingParams p;
    p.temperature = 0.8f;
    p.seed = 4;
    p.max_tokens = 9;
    p.repetition_penalty = 1.2f;
    jobs.push_back({prompt_ids(13, 41, 3, 120000), p, 2});
    const SchedulerConfig sched{.max_running = 8, .max_tokens_per_step = 96, .max_prefill_chunk = 64};
    auto ra = make_model_runner({.model = "tiny", .page_tokens = 64, .n_pages = 1024});
    auto rb = make_model_runner({.model = "tiny", .page_tokens = 64, .n_pages = 1024});
    ASSERT_TRUE(ra.is_ok() && rb.is_ok());
    const Outcome off = drive(**ra, jobs, Overlap::kOff, sched);
    const Outcome on = drive(**rb, jobs, Overlap::kAlways, sched);
    EXPECT_EQ(on.results, off.results);
    EXPECT_GT(on.pending_seen, 5);
    EXPECT_EQ(on.pages_used, 0);
}

TEST(EngineOverlap, AutoFollowsTheRunner) {
    FakeRunner r(fake_options(64));
    EngineStats stats;
    EngineConfig cfg;
    EngineCore auto_core(r, cfg, stats);
    EXPECT_FALSE(auto_core.overlapping());  // FakeRunner's launch() runs the step: nothing to overlap
    cfg.overlap = Overlap::kAlways;
    EngineCore forced(r, cfg, stats);
    EXPECT_TRUE(forced.overlapping());
}

TEST(ModelRunnerLaunch, PendingTokenNeedsADeviceRowOfThePreviousStep) {
    FakeRunner inner(fake_options(64));
    test::HostSamplingRunner r(inner);
    std::vector<int32_t> pages;
    for (int64_t i = 0; i < inner.kv_layout().pages_for_tokens(8); ++i) pages.push_back(int32_t(i));
    const std::vector<int32_t> prompt = {5, 6, 7}, pending = {kPendingToken};
    ForwardBatch b;
    b.seqs.push_back(SeqChunk{.seq_id = 4,
                              .tokens = pending,
                              .start_pos = 3,
                              .want_logits = true,
                              .page_table = pages,
                              .sample = DeviceSample::kGreedy});
    Status s = r.launch(b);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
    // After a step that sampled seq 4 on the "device", its pending token resolves to that token.
    b.seqs[0].tokens = prompt;
    b.seqs[0].start_pos = 0;
    ASSERT_TRUE(r.launch(b).is_ok());
    b.seqs[0].tokens = pending;
    b.seqs[0].start_pos = 3;
    ASSERT_TRUE(r.launch(b).is_ok());
    EXPECT_EQ(r.launch(b).code(), StatusCode::kFailedPrecondition);  // a third step in flight
    StepOutput o1, o2, o3;
    ASSERT_TRUE(r.collect(o1).is_ok());
    ASSERT_TRUE(r.collect(o2).is_ok());
    EXPECT_EQ(r.collect(o3).code(), StatusCode::kFailedPrecondition);
    ASSERT_EQ(o1.tokens.size(), 1u);
    ASSERT_EQ(o2.tokens.size(), 1u);
    // The same two steps with the token spelled out give the same second token.
    FakeRunner inner2(fake_options(64));
    test::HostSamplingRunner r2(inner2);
    b.seqs[0].tokens = prompt;
    b.seqs[0].start_pos = 0;
    ASSERT_TRUE(r2.launch(b).is_ok());
    const std::vector<int32_t> known = {o1.tokens[0]};
    b.seqs[0].tokens = known;
    b.seqs[0].start_pos = 3;
    ASSERT_TRUE(r2.launch(b).is_ok());
    StepOutput p1, p2;
    ASSERT_TRUE(r2.collect(p1).is_ok() && r2.collect(p2).is_ok());
    EXPECT_EQ(p2.tokens, o2.tokens);
}

}  // namespace
}  // namespace dsv4
