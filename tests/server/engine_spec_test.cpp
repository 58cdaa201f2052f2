// Speculative decoding in the engine (issue 24) on the CPU reference runner with the built-in tiny
// model and its MTP block: greedy output is identical with speculation on and off for k = 1..3,
// across the ratio-4 windows and the 128-token sliding window, with chunked prefill, n = 2,
// preemption and the prefix cache; self drafts (the target's own tokens) are all accepted; seeded
// sampled requests give the tokens of speculation off; logprobs requests and steps above the batch
// limit do not speculate; /metrics' counters add up. The tiny model's MTP block has random weights, so most MTP
// drafts are rejected: every verify chunk exercises the rollback of the rejected positions.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>

#include "core/philox.h"
#include "model/ref_speculative.h"
#include "runtime/ref_runner.h"
#include "runtime/runner_factory.h"
#include "sched/engine_core.h"
#include "tests/server/engine_spec_harness.h"

namespace dsv4 {
namespace {

using spec_test::greedy;
using spec_test::Job;
using spec_test::Outcome;
using spec_test::prompt;
using spec_test::run;
using spec_test::Sink;
using spec_test::SpecSetup;
using spec_test::tiny;

// Prompts across the ratio-4 windows and the 128-token window; one request with two choices.
std::vector<Job> greedy_jobs(int max_tokens) {
    return {{prompt(1, 3), greedy(max_tokens)},
            {prompt(2, 126), greedy(max_tokens)},
            {prompt(3, 41), greedy(max_tokens), 2}};
}

TEST(EngineSpeculative, GreedyIdenticalWithMtpDraftsForEveryK) {
    const std::vector<Job> jobs = greedy_jobs(14);
    const Outcome base = run(jobs, {});
    EXPECT_EQ(base.verify, 0);
    for (int k = 1; k <= 3; ++k) {
        for (const SpecSetup s : {SpecSetup{.k = k}, SpecSetup{.k = k, .budget = 24, .chunk = 5}}) {
            const Outcome on = run(jobs, s);
            EXPECT_EQ(on.tokens, base.tokens) << "k " << k << " chunk " << s.chunk;
            EXPECT_GT(on.verify, 0);
            EXPECT_LE(on.drafted, int64_t(k) * on.verify);
            EXPECT_LE(on.accepted, on.drafted);
            // Every verify chunk emits its accepted drafts plus one token of its own.
            EXPECT_LE(on.verify + on.accepted, on.generated);
        }
    }
}

// Greedy verify chunks' rows picked by the runner (the CUDA runner's device argmax) instead of judged
// on the host: the same tokens and acceptances, with chunked prefill and a step in flight.
TEST(EngineSpeculative, GreedyVerifyRowsPickedByTheRunner) {
    const std::vector<Job> jobs = greedy_jobs(14);
    const Outcome base = run(jobs, {});
    for (int k = 1; k <= 3; ++k)
        for (const DraftSource d : {DraftSource::kMtp, DraftSource::kSelf})  // self: every draft accepted
            for (const SpecSetup s : {SpecSetup{.k = k, .draft = d, .device_picks = true},
                                      SpecSetup{.k = k, .draft = d, .budget = 24, .chunk = 5, .device_picks = true},
                                      SpecSetup{.k = k, .draft = d, .overlap = true, .device_picks = true}}) {
                const Outcome host =
                    run(jobs, {.k = k, .draft = d, .budget = s.budget, .chunk = s.chunk, .overlap = s.overlap});
                const Outcome picked = run(jobs, s);
                EXPECT_EQ(picked.tokens, base.tokens) << "k " << k << " self " << (d == DraftSource::kSelf) << " chunk "
                                                      << s.chunk << " overlap " << s.overlap;
                EXPECT_EQ(picked.verify, host.verify);
                EXPECT_EQ(picked.accepted, host.accepted);
                if (d == DraftSource::kSelf) {
                    EXPECT_EQ(picked.accepted, picked.drafted);
                }
                // At least one draft per verify chunk (fewer than k near max_tokens).
                EXPECT_GE(picked.verify_rows_picked, 2 * picked.verify);
            }
}

// Regression case B15 (greedy output that depends on concurrency, reported with speculative
// decoding on): one prompt alone and as six concurrent copies beside unrelated traffic, k = 2.
TEST(EngineSpeculative, GreedyDoesNotDependOnConcurrency) {
    const Job echo{prompt(15, 23), greedy(10)};
    const Outcome alone = run({echo}, {.k = 2});
    std::vector<Job> crowd(6, echo);
    crowd.push_back({prompt(16, 70), greedy(7)});
    SamplingParams hot;
    hot.temperature = 1.0f;
    hot.max_tokens = 9;
    hot.ignore_eos = true;
    crowd.push_back({prompt(17, 12), hot, 2});
    const Outcome together = run(crowd, {.k = 2, .budget = 40, .chunk = 16});
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(together.tokens[i], alone.tokens[0]) << "copy " << i;
}

TEST(EngineSpeculative, SelfDraftsAreAllAcceptedAndCutTheSteps) {
    const std::vector<Job> jobs = greedy_jobs(13);
    const Outcome base = run(jobs, {});
    const Outcome on = run(jobs, {.k = 3, .draft = DraftSource::kSelf});
    EXPECT_EQ(on.tokens, base.tokens);
    EXPECT_GT(on.verify, 0);
    EXPECT_EQ(on.accepted, on.drafted);  // the drafts are the target's own greedy tokens
    // 12 tokens after the first of each of 4 sequences, 4 per verify chunk of k = 3: 3 chunks each.
    EXPECT_EQ(on.verify, 4 * 3);
}

TEST(EngineSpeculative, GreedyIdenticalUnderPreemption) {
    // Three 60-token prompts, room for two of them plus one page: crossing position 64 needs a page
    // that only a preemption frees.
    const std::vector<Job> jobs = {
        {prompt(11, 60), greedy(12)}, {prompt(12, 60), greedy(12)}, {prompt(13, 60), greedy(12)}};
    const Outcome base = run(jobs, {.tight_pool = 61});
    EXPECT_GT(base.preempted, 0);
    // With overlap a sequence can be preempted while its verify chunk is in flight; self drafts are
    // all accepted, so that chunk's collection has drafts to account for.
    for (const DraftSource draft : {DraftSource::kMtp, DraftSource::kSelf})
        for (const bool overlap : {false, true}) {
            const Outcome on = run(jobs, {.k = 2, .draft = draft, .tight_pool = 61, .overlap = overlap});
            EXPECT_GT(on.preempted, 0) << overlap;
            EXPECT_EQ(on.tokens, base.tokens) << overlap;
            EXPECT_GT(on.verify, 0) << overlap;
        }
}

// A prompt prefilled in chunks needs pages that only a preemption frees, while the speculating
// sequences' verify chunks are in flight (overlap): a victim's in-flight drafts must not count.
TEST(EngineSpeculative, PreemptedWithAVerifyChunkInFlight) {
    // (This mix preempts the first sequence twice with its verify chunk in flight, found by trying.)
    const std::vector<Job> jobs = {{prompt(21, 60), greedy(14)}, {prompt(23, 200), greedy(6)}};
    const SpecSetup s{.budget = 48, .chunk = 32, .tight_pool = 61};
    const Outcome base = run(jobs, s);
    for (const DraftSource draft : {DraftSource::kSelf, DraftSource::kMtp}) {
        SpecSetup on_setup = s;
        on_setup.k = 2;
        on_setup.draft = draft;
        on_setup.overlap = true;
        const Outcome on = run(jobs, on_setup);
        EXPECT_GT(on.preempted, 0);
        EXPECT_EQ(on.tokens, base.tokens);
    }
}

// A stop id met among accepted drafts ends the output there, as without speculation.
TEST(EngineSpeculative, StopInsideAcceptedDrafts) {
    const Job probe{prompt(18, 9), greedy(12)};
    const std::vector<int32_t> free_run = run({probe}, {}).tokens[0].at(0);
    ASSERT_EQ(free_run.size(), 12u);
    for (const int at : {2, 3, 6}) {  // the first stop falls on a draft of the first or second verify chunk
        Job j = probe;
        j.params.stop_token_ids = {free_run[size_t(at)]};
        const Outcome base = run({j}, {}, FinishReason::kStop),
                      on = run({j}, {.k = 3, .draft = DraftSource::kSelf}, FinishReason::kStop);
        EXPECT_EQ(on.tokens, base.tokens) << at;
        EXPECT_LE(on.tokens[0].at(0).size(), size_t(at));
    }
}

// The prefix cache holds snapshots a speculating sequence took at a block boundary while a verify
// chunk's rejected drafts were still in its state: a later request resuming there must see them
// undone, whether it speculates or not (logprobs: it does not). Block = 128 tokens on the tiny model.
TEST(EngineSpeculative, PrefixCacheSnapshotsTakenDuringVerifyResumeCleanly) {
    const std::vector<int32_t> p = prompt(19, 140);
    // First, A alone with speculation: its decode passes 384, where its last snapshot is taken, and
    // rejected drafts beyond the snapshot's position are in the state copied.
    auto runner = RefRunner::create(tiny(), 64, 1024, {2, DraftSource::kMtp});
    ASSERT_TRUE(runner.is_ok());
    EngineConfig cfg;
    cfg.sched.prefix_cache = true;
    cfg.sched.speculative_tokens = 2;
    EngineStats stats;
    EngineCore core(**runner, cfg, stats);
    auto a = std::make_shared<Sink>();
    ASSERT_TRUE(core.add({.id = 1, .prompt = p, .params = greedy(260), .sink = a}).is_ok());
    while (core.has_work()) core.step();
    ASSERT_EQ(a->tokens[0].size(), 260u);
    // Then B and C continue A's text from 385 tokens on (the cached 384 and one more, whose query
    // reads the window rows a rejected draft overwrote): B with logprobs (no speculation), C
    // speculating.
    std::vector<int32_t> cont = p;
    cont.insert(cont.end(), a->tokens[0].begin(), a->tokens[0].begin() + 245);
    SamplingParams with_logprobs = greedy(8);
    with_logprobs.logprobs = 1;
    const int64_t hits_before = stats.prefix_cache_hit_tokens_total;
    auto b = std::make_shared<Sink>(), c = std::make_shared<Sink>();
    ASSERT_TRUE(core.add({.id = 2, .prompt = cont, .params = with_logprobs, .sink = b}).is_ok());
    while (core.has_work()) core.step();
    const int64_t hits_b = stats.prefix_cache_hit_tokens_total - hits_before;
    ASSERT_TRUE(core.add({.id = 3, .prompt = cont, .params = greedy(8), .sink = c}).is_ok());
    while (core.has_work()) core.step();
    const int64_t hits_c = stats.prefix_cache_hit_tokens_total - hits_before - hits_b;
    EXPECT_EQ(hits_b, 384);
    EXPECT_EQ(hits_c, 384);
    // The same requests computed from scratch, without speculation or cache; B's logprobs too (a
    // few stale window rows move them by far more than the chunking does, without changing tokens).
    auto plain = RefRunner::create(tiny(), 64, 1024);
    ASSERT_TRUE(plain.is_ok());
    EngineStats fresh_stats;
    EngineCore fresh(**plain, EngineConfig{}, fresh_stats);
    auto fb = std::make_shared<Sink>(), fc = std::make_shared<Sink>();
    ASSERT_TRUE(fresh.add({.id = 2, .prompt = cont, .params = with_logprobs, .sink = fb}).is_ok());
    ASSERT_TRUE(fresh.add({.id = 3, .prompt = cont, .params = greedy(8), .sink = fc}).is_ok());
    while (fresh.has_work()) fresh.step();
    EXPECT_EQ(b->tokens[0], fb->tokens[0]);
    EXPECT_EQ(c->tokens[0], fc->tokens[0]);
    ASSERT_EQ(b->logprobs[0].size(), fb->logprobs[0].size());
    double worst = 0;
    for (size_t i = 0; i < fb->logprobs[0].size(); ++i)
        worst = std::max(worst, double(std::fabs(b->logprobs[0][i] - fb->logprobs[0][i])));
    EXPECT_LT(worst, 1e-4) << "B's logprobs against the fresh run's";
    // A's own tokens from position 385 on are what B and C continue.
    EXPECT_EQ(std::vector<int32_t>(a->tokens[0].begin() + 245, a->tokens[0].begin() + 253), b->tokens[0]);
}

// Seeded sampled requests (penalties and top-p too) give the tokens of speculation off: the draft at
// a position is kept iff it is the token sample_token draws there.
TEST(EngineSpeculative, SeededSampledRequestsAsWithSpeculationOff) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_p = 0.95f;
    p.repetition_penalty = 1.1f;
    p.seed = 77;
    p.max_tokens = 12;
    p.ignore_eos = true;
    const std::vector<Job> jobs = {{prompt(4, 20), p, 2}, {prompt(5, 9), p}};
    const Outcome a = run(jobs, {.k = 2});
    EXPECT_GT(a.verify, 0);
    EXPECT_EQ(a.tokens, run(jobs, {}).tokens);
    EXPECT_EQ(run(jobs, {.k = 3, .draft = DraftSource::kSelf}).tokens, a.tokens);
    for (const auto& choices : a.tokens)
        for (const auto& [c, t] : choices) {
            EXPECT_EQ(t.size(), 12u);
            for (int32_t x : t) EXPECT_TRUE(x >= 0 && x < tiny()->config().vocab_size);
        }
}

TEST(EngineSpeculative, LogprobsRequestsAndLargeBatchesDecodeOneTokenAtATime) {
    SamplingParams lp = greedy(10);
    lp.logprobs = 2;
    const std::vector<Job> one = {{prompt(6, 30), lp}};
    const Outcome off = run(one, {}), on = run(one, {.k = 2});
    EXPECT_EQ(on.verify, 0);
    EXPECT_EQ(on.tokens, off.tokens);
    // Three sequences against a limit of one: speculation only once two have finished.
    std::vector<Job> three = {{prompt(7, 5), greedy(4)}, {prompt(8, 6), greedy(5)}, {prompt(9, 7), greedy(16)}};
    const Outcome base = run(three, {}), limited = run(three, {.k = 2, .max_batch = 1});
    EXPECT_EQ(limited.tokens, base.tokens);
    EXPECT_GT(limited.verify, 0);
    // At most the third sequence's tokens after the others ended: 16 less its prefill token and the
    // 4 it decoded beside the second sequence.
    EXPECT_LE(limited.verify + limited.accepted, 16 - 5);
}

// The runner's verify protocol (rollback, the MTP block's pending inputs, recursive drafts) against
// the reference algorithm (model/ref_speculative.h), which keeps none of that in pages: the same
// drafts, cycle by cycle, and the same tokens.
TEST(EngineSpeculative, RunnerDraftsAreTheReferenceAlgorithms) {
    const std::vector<int32_t> p = prompt(14, 37);
    const int n_new = 20;
    for (int k = 1; k <= 3; ++k) {
        std::vector<std::vector<int32_t>> want_drafts;
        RefSpecOptions o;
        o.k = k;
        o.edit_drafts = [&](std::vector<int32_t>& d) { want_drafts.push_back(d); };
        auto want = ref_speculative_greedy(*tiny(), p, n_new, o);
        ASSERT_TRUE(want.is_ok()) << want.status().message();

        auto runner = RefRunner::create(tiny(), 16, 256, {k, DraftSource::kMtp});
        ASSERT_TRUE(runner.is_ok());
        const KvLayout& L = (*runner)->kv_layout();
        std::vector<int32_t> pages;
        for (int i = 0; i < L.pages_for_tokens(int64_t(p.size()) + n_new + k + 1); ++i) pages.push_back(i);
        const int64_t V = tiny()->config().vocab_size;
        auto argmax = [&](const std::vector<float>& row) {
            return greedy_token(std::span<const float>(row).first(size_t(V)));
        };
        ForwardBatch prefill;
        prefill.seqs.push_back(SeqChunk{.seq_id = 1, .tokens = p, .start_pos = 0, .page_table = pages, .mtp = true});
        StepOutput out;
        ASSERT_TRUE((*runner)->forward_sampled(prefill, out).is_ok());
        std::vector<int32_t> got{argmax(out.logits[0])}, got_drafts_flat, want_drafts_flat;
        int64_t S = int64_t(p.size());
        while (int(got.size()) < n_new) {
            const int32_t g = got.back();
            ForwardBatch verify;
            verify.seqs.push_back(SeqChunk{.seq_id = 1,
                                           .tokens = std::span(&g, 1),
                                           .start_pos = S,
                                           .page_table = pages,
                                           .mtp = true,
                                           .draft_tokens = k});
            ASSERT_TRUE((*runner)->forward_sampled(verify, out).is_ok());
            ASSERT_EQ(out.drafts.size(), 1u);
            ASSERT_EQ(out.logits.size(), size_t(k + 1));
            const std::vector<int32_t>& d = out.drafts[0];
            got_drafts_flat.insert(got_drafts_flat.end(), d.begin(), d.end());
            int j = 0;
            while (j < k && d[size_t(j)] == argmax(out.logits[size_t(j)])) got.push_back(d[size_t(j++)]);
            got.push_back(argmax(out.logits[size_t(j)]));
            S += j + 1;
        }
        got.resize(size_t(n_new));
        for (const auto& d : want_drafts) want_drafts_flat.insert(want_drafts_flat.end(), d.begin(), d.end());
        EXPECT_EQ(got, *want) << "k " << k;
        EXPECT_EQ(got_drafts_flat, want_drafts_flat) << "k " << k;
    }
}

TEST(EngineSpeculative, RunnerRefusesWhatItCannotHold) {
    // A verify chunk may not span a ratio-4 window: at most 3 drafts.
    auto r = RefRunner::create(tiny(), 16, 4096, {4, DraftSource::kMtp});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("at most 3 speculative tokens"), std::string::npos) << r.status().message();
    // The engine verifies no more drafts than its runner holds.
    auto plain = RefRunner::create(tiny(), 16, 4096);
    ASSERT_TRUE(plain.is_ok());
    EXPECT_EQ((*plain)->max_draft_tokens(), 0);
    EngineConfig cfg;
    cfg.sched.speculative_tokens = 2;
    EngineStats stats;
    EngineCore core(**plain, cfg, stats);
    auto sink = std::make_shared<Sink>();
    ASSERT_TRUE(core.add({.id = 1, .prompt = prompt(10, 8), .params = greedy(6), .sink = sink}).is_ok());
    while (core.has_work()) core.step();
    EXPECT_EQ(sink->tokens[0].size(), 6u);
    EXPECT_EQ(stats.spec_verify_chunks_total, 0);
}

}  // namespace
}  // namespace dsv4
