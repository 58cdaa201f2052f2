// Speculative decoding (issue 24) with overlapped scheduling and greedy rows picked by the runner, all
// at once: k = 1..3, MTP drafts (mostly rejected on the tiny model) and self drafts (all accepted),
// EngineConfig::Overlap::kAlways (step N + 1 launched before step N is collected, tokens not known yet
// launched as kPendingToken) and HostSamplingRunner (kGreedy / kFull rows answered by the runner,
// verify chunks' k + 1 picks included). Each case compares against the same engine without
// speculation: greedy tokens identical, the same finish reasons, no error, no event after a finish,
// completion counts that include a final stop id, and no page left in use. Cases: a stop id or EOS
// among accepted drafts, max_tokens inside a verify chunk, min_tokens masking EOS (plain argmax
// off, then on), n > 1, preemption, the prefix cache, speculative_max_batch switching speculation off
// and on as requests arrive and finish, seeded sampled requests beside greedy ones (their outputs
// identical too), aborts with a step
// in flight, greedy rows that are not plain argmax, and random mixes of all of these.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/philox.h"
#include "tests/server/engine_spec_harness.h"

namespace dsv4 {
namespace {

using spec_test::greedy;
using spec_test::Job;
using spec_test::Outcome;
using spec_test::prompt;
using spec_test::run;
using spec_test::SpecSetup;

// Every speculating setup of the matrix: k = 1..3, self and MTP drafts, overlap, runner picks.
struct Variant {
    int k;
    DraftSource draft;
    std::string name() const {
        return "k " + std::to_string(k) + (draft == DraftSource::kSelf ? " self" : " mtp") + " drafts";
    }
};
std::vector<Variant> variants() {
    std::vector<Variant> v;
    for (int k = 1; k <= 3; ++k)
        for (const DraftSource d : {DraftSource::kSelf, DraftSource::kMtp}) v.push_back({k, d});
    return v;
}
SpecSetup with(SpecSetup s, const Variant& v) {
    s.k = v.k;
    s.draft = v.draft;
    return s;
}

// What every run must satisfy on its own: no error, nothing after a finish, a finish reason, the
// reported completion count (a final stop id or EOS counts) and the stop id that ended it.
void expect_clean(const Outcome& o, const std::vector<Job>& jobs, const std::string& what) {
    EXPECT_EQ(o.late_events, 0) << what;
    for (size_t i = 0; i < jobs.size(); ++i) {
        EXPECT_EQ(o.errors[i], "") << what << " job " << i;
        for (int c = 0; c < jobs[i].n; ++c) {
            const auto f = o.finish[i].find(c);
            ASSERT_NE(f, o.finish[i].end()) << what << " job " << i << " choice " << c << " never finished";
            const bool aborted = jobs[i].abort_at_step >= 0 && f->second == FinishReason::kAbort;
            EXPECT_TRUE(f->second == FinishReason::kStop || f->second == FinishReason::kLength || aborted)
                << what << " job " << i << " choice " << c << ": " << finish_reason_name(f->second);
            const std::vector<int32_t> none;
            const auto t = o.tokens[i].find(c);
            const std::vector<int32_t>& toks = t == o.tokens[i].end() ? none : t->second;
            if (aborted) {
                EXPECT_EQ(o.completion[i].at(c), int64_t(toks.size())) << what << " job " << i;
                EXPECT_LT(int64_t(toks.size()), jobs[i].params.max_tokens) << what << " job " << i;
                continue;
            }
            const bool stop = f->second == FinishReason::kStop;
            EXPECT_EQ(o.completion[i].at(c), int64_t(toks.size()) + (stop ? 1 : 0)) << what << " job " << i;
            EXPECT_LE(int64_t(toks.size()) + (stop ? 1 : 0), jobs[i].params.max_tokens) << what << " job " << i;
            if (!stop) {
                EXPECT_EQ(int64_t(toks.size()), jobs[i].params.max_tokens) << what << " job " << i;
                continue;
            }
            const int32_t id = o.stop_token[i].at(c);
            const auto& ids = jobs[i].params.stop_token_ids;
            EXPECT_GE(id, 0) << what << " job " << i;
            EXPECT_GE(int64_t(toks.size()) + 1, jobs[i].params.min_tokens) << what << " job " << i;
            // Nothing it would have stopped at is in the output.
            for (int32_t x : toks)
                EXPECT_TRUE(std::find(ids.begin(), ids.end(), x) == ids.end())
                    << what << " job " << i << " emitted " << x << " after which it must stop";
        }
    }
}

// The same jobs with speculation off (same engine otherwise) and with every variant: identical
// greedy tokens and finish reasons. `also` sees each variant's outcome. Returns the baseline.
Outcome expect_same_as_without_speculation(const std::vector<Job>& jobs, const SpecSetup& setup,
                                           const std::string& what, int32_t eos = -1,
                                           const std::function<void(const Outcome&, const Variant&)>& also = {}) {
    SpecSetup base_setup = setup;
    base_setup.k = 0;
    base_setup.eos = eos;
    const Outcome base = run(jobs, base_setup, FinishReason::kNone);
    expect_clean(base, jobs, what + " (no speculation)");
    for (const Variant& v : variants()) {
        SpecSetup s = with(setup, v);
        s.eos = eos;
        const Outcome on = run(jobs, s, FinishReason::kNone);
        const std::string label = what + ", " + v.name();
        expect_clean(on, jobs, label);
        EXPECT_EQ(on.tokens, base.tokens) << label;
        EXPECT_EQ(on.finish, base.finish) << label;
        EXPECT_EQ(on.stop_token, base.stop_token) << label;
        EXPECT_GT(on.verify, 0) << label;
        EXPECT_LE(on.accepted, on.drafted) << label;
        if (setup.overlap) {
            EXPECT_GT(on.overlapped_steps, 0) << label;
        }
        if (setup.device_picks) {
            EXPECT_GT(on.pending_seen, 0) << label;
        }
        if (also) also(on, v);
    }
    return base;
}

const SpecSetup kOverlapPicks{.overlap = true, .device_picks = true};

// The greedy tokens of one prompt, alone, without speculation.
std::vector<int32_t> free_run(const std::vector<int32_t>& p, int n) {
    return run({{p, greedy(n)}}, {}).tokens[0].at(0);
}

// The output of `free` up to the first of `ids`.
std::vector<int32_t> until_first(const std::vector<int32_t>& free, int32_t id) {
    return {free.begin(), std::find(free.begin(), free.end(), id)};
}

// A stop id or EOS met among a verify chunk's accepted drafts ends the output there. Self drafts are
// all accepted, so with the first token from the prefill row, the first verify chunk's drafts are
// output positions 1..k and its own token k + 1, and so on: the positions below fall on drafts, on
// verify chunks' own tokens and on the prefill's token for every k. One request per stop position
// (same prompt), beside one that goes on; the EOS case is a request that does not ignore EOS, with an
// output token playing EOS.
TEST(EngineSpecOverlap, StopIdOrEosAmongAcceptedDrafts) {
    const std::vector<int32_t> p = prompt(31, 9);
    const std::vector<int32_t> free = free_run(p, 14);
    const std::vector<std::pair<int, std::vector<int>>> batches = {{2, {0, 1, 3, 5, 9}}, {5, {2, 4, 6, 7}}};
    for (const auto& [eos_at, stop_ats] : batches) {
        std::vector<Job> jobs;
        std::vector<int32_t> ids;
        for (const int at : stop_ats) {
            Job j{p, greedy(14)};
            j.params.stop_token_ids = {free[size_t(at)]};
            jobs.push_back(j);
            ids.push_back(free[size_t(at)]);
        }
        const int32_t eos = free[size_t(eos_at)];
        Job eos_job{p, greedy(14)};
        eos_job.params.ignore_eos = false;
        jobs.push_back(eos_job);
        ids.push_back(eos);
        jobs.push_back({prompt(32, 17), greedy(11)});
        const std::string what = "EOS at " + std::to_string(eos_at);
        const Outcome base = expect_same_as_without_speculation(jobs, kOverlapPicks, what, eos);
        for (size_t i = 0; i < ids.size(); ++i) {
            EXPECT_EQ(base.finish[i].at(0), FinishReason::kStop) << what << " job " << i;
            EXPECT_EQ(base.tokens[i].at(0), until_first(free, ids[i])) << what << " job " << i;
            EXPECT_EQ(base.stop_token[i].at(0), ids[i]) << what << " job " << i;
        }
    }
}

// max_tokens falls inside what a verify chunk would have accepted: its drafts are cut so that the
// last row is the last token, for every limit from 1 to 8 in the same steps, also with a step budget
// too small to give every sequence k drafts.
TEST(EngineSpecOverlap, MaxTokensInsideAVerifyChunk) {
    std::vector<Job> jobs;
    for (int m = 1; m <= 8; ++m) jobs.push_back({prompt(40 + uint64_t(m), 2 + m), greedy(m)});
    expect_same_as_without_speculation(jobs, kOverlapPicks, "max_tokens 1..8");
    SpecSetup tight = kOverlapPicks;
    tight.budget = 6;
    tight.chunk = 4;
    expect_same_as_without_speculation(jobs, tight, "max_tokens 1..8, budget 6");
}

// min_tokens with EOS or a stop id (ignore_eos false): before min_tokens they are masked, so the rows
// are not plain argmax (kFull rows; a verify chunk's rows judged by the runner while the masking is the
// same at its first and last row, on the host when it crosses min_tokens), from there on they are
// (kGreedy picks). The id is a token the free run emits first at position a >= 4:
// min_tokens <= a leaves the output as it was and stops at a; a + 1 masks it there.
TEST(EngineSpecOverlap, MinTokensMaskEosThenPlainArgmax) {
    const std::vector<int32_t> p = prompt(51, 7);
    const std::vector<int32_t> free = free_run(p, 16);
    size_t a = 4;
    while (a < free.size() && std::find(free.begin(), free.begin() + long(a), free[a]) != free.begin() + long(a)) ++a;
    ASSERT_LT(a, free.size()) << "no new token after position 4 in the free run";
    const int32_t id = free[a];
    const int64_t A = int64_t(a);
    std::vector<Job> jobs;
    for (const int64_t m : {int64_t(1), int64_t(2), A - 1, A, A + 1, A + 3}) {
        Job j{p, greedy(16)};
        j.params.min_tokens = m;
        j.params.ignore_eos = false;
        jobs.push_back(j);
    }
    for (const int64_t m : {int64_t(3), A, A + 2}) {
        Job j{p, greedy(16)};
        j.params.min_tokens = m;
        j.params.stop_token_ids = {id};
        jobs.push_back(j);
    }
    jobs.push_back({prompt(52, 12), greedy(9)});
    const Outcome base = expect_same_as_without_speculation(jobs, kOverlapPicks, "min_tokens", id);
    for (size_t i = 0; i < jobs.size() - 1; ++i) {
        const auto& out = base.tokens[i].at(0);
        if (jobs[i].params.min_tokens <= A) {
            EXPECT_EQ(base.finish[i].at(0), FinishReason::kStop) << "job " << i;
            EXPECT_EQ(out, std::vector<int32_t>(free.begin(), free.begin() + long(a))) << "job " << i;
        } else {
            EXPECT_GE(int64_t(out.size()), A + 1) << "job " << i;
            EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + long(a)),
                      std::vector<int32_t>(free.begin(), free.begin() + long(a)))
                << "job " << i;
            EXPECT_NE(out[a], id) << "job " << i;
        }
    }
    // The host path without overlap agrees.
    EXPECT_EQ(run(jobs, {.eos = id}, FinishReason::kNone).tokens, base.tokens);
}

// n > 1 choices of greedy requests (identical choices), one with a stop id among its drafts.
TEST(EngineSpecOverlap, SeveralChoices) {
    const std::vector<int32_t> p = prompt(61, 11);
    const std::vector<int32_t> free = free_run(p, 12);
    Job stopping{p, greedy(12), 3};
    stopping.params.stop_token_ids = {free[5]};
    const std::vector<Job> jobs = {{prompt(62, 5), greedy(10), 2}, stopping, {prompt(63, 20), greedy(7), 4}};
    const Outcome base = expect_same_as_without_speculation(jobs, kOverlapPicks, "n > 1");
    for (size_t i = 0; i < jobs.size(); ++i)
        for (int c = 1; c < jobs[i].n; ++c) EXPECT_EQ(base.tokens[i].at(c), base.tokens[i].at(0)) << i;
    for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(base.finish[1].at(c), FinishReason::kStop);
        EXPECT_EQ(base.tokens[1].at(c), until_first(free, free[5]));
    }
}

// A tight pool: sequences preempted (recomputed from position 0) with verify chunks in flight and
// pending tokens, then resumed.
TEST(EngineSpecOverlap, PreemptionUnderATightPool) {
    const auto preempted = [](const Outcome& on, const Variant& v) { EXPECT_GT(on.preempted, 0) << v.name(); };
    const std::vector<Job> three = {
        {prompt(11, 60), greedy(12)}, {prompt(12, 60), greedy(12)}, {prompt(13, 60), greedy(12)}};
    SpecSetup s = kOverlapPicks;
    s.tight_pool = 61;
    expect_same_as_without_speculation(three, s, "tight pool, three 60-token prompts", -1, preempted);
    // A prompt prefilled in chunks needs pages that only a preemption of a speculating sequence frees.
    const std::vector<Job> two = {{prompt(21, 60), greedy(14)}, {prompt(23, 130), greedy(6)}};
    s.budget = 48;
    s.chunk = 32;
    expect_same_as_without_speculation(two, s, "tight pool, chunked 130-token prompt", -1, preempted);
}

// The prefix cache: choices 2..n resume from choice 0's cached prompt, later requests continue an
// earlier one's prompt from a snapshot taken while verify chunks were in flight.
TEST(EngineSpecOverlap, PrefixCache) {
    const std::vector<int32_t> p = prompt(71, 131);
    std::vector<int32_t> longer = p;
    const std::vector<int32_t> tail = prompt(72, 9);
    longer.insert(longer.end(), tail.begin(), tail.end());
    const std::vector<Job> jobs = {{p, greedy(12), 2},
                                   {prompt(73, 6), greedy(10)},
                                   {.prompt = longer, .params = greedy(8), .arrive_at_step = 6},
                                   {.prompt = p, .params = greedy(6), .arrive_at_step = 9}};
    SpecSetup s = kOverlapPicks;
    s.prefix_cache = true;
    const Outcome base = expect_same_as_without_speculation(jobs, s, "prefix cache");
    // And without the cache.
    EXPECT_EQ(run(jobs, {}).tokens, base.tokens);
}

// speculative_max_batch = 2: speculation goes off when a third sequence runs and on again when
// sequences finish; requests arrive at different steps and end at different lengths, so a sequence's
// verify chunk follows a plain decode whose token is still pending and the other way round.
TEST(EngineSpecOverlap, SpeculationSwitchedByTheBatchLimit) {
    std::vector<Job> jobs;
    const int arrive[] = {0, 0, 2, 3, 5, 8, 13, 14};
    const int max_tokens[] = {14, 5, 9, 3, 12, 7, 10, 4};
    for (int i = 0; i < 8; ++i)
        jobs.push_back({.prompt = prompt(80 + uint64_t(i), 4 + 3 * i),
                        .params = greedy(max_tokens[i]),
                        .arrive_at_step = arrive[i]});
    SpecSetup s = kOverlapPicks;
    s.max_batch = 2;
    // Some tokens came one at a time (above the limit).
    const Outcome base = expect_same_as_without_speculation(
        jobs, s, "speculative_max_batch 2", -1,
        [](const Outcome& on, const Variant& v) { EXPECT_LT(on.verify + on.accepted, on.generated) << v.name(); });
    // Nothing depends on arrival: all at once, without the limit, the same tokens.
    std::vector<Job> at_once = jobs;
    for (Job& j : at_once) j.arrive_at_step = 0;
    EXPECT_EQ(run(at_once, {}).tokens, base.tokens);
}

std::vector<Job> sampled_and_greedy_jobs() {
    SamplingParams hot;
    hot.temperature = 1.0f;
    hot.max_tokens = 9;
    hot.ignore_eos = true;
    hot.seed = 5;
    SamplingParams penalised = hot;
    penalised.seed = 9;
    penalised.repetition_penalty = 1.3f;
    penalised.frequency_penalty = 0.5f;
    penalised.top_k = 40;
    penalised.top_p = 0.9f;
    SamplingParams unseeded = hot;
    unseeded.seed.reset();  // EngineConfig::default_seed and the order of arrival
    unseeded.ignore_eos = false;
    unseeded.max_tokens = 7;
    return {{prompt(91, 8), greedy(9)},
            {prompt(92, 10), hot, 2},
            {prompt(93, 6), penalised},
            {.prompt = prompt(94, 13), .params = greedy(8), .arrive_at_step = 2},
            {.prompt = prompt(95, 5), .params = unseeded, .arrive_at_step = 3}};
}

// Seeded sampled requests (temperature 1; penalties, top-k / top-p; one seeded by the engine) beside
// greedy ones in the same steps: the sampled rows are kFull rows (penalty counts lacking a pending
// token) and host-judged verify chunks. Every output, sampled ones included, equals the same engine
// without speculation: a draft is kept iff it is the token sample_token draws at its position, so a
// seeded output does not depend on which positions were drafts.
TEST(EngineSpecOverlap, SampledBesideGreedy) {
    expect_same_as_without_speculation(sampled_and_greedy_jobs(), kOverlapPicks, "sampled beside greedy");
}

// The same mix under a step budget of 20 tokens (prompts split, drafts cut, overlap taking sequences
// that wait for their verify chunk out of every other step) and with speculation switched off while
// more than 4 sequences run (5 of the 6 once the fourth request arrives): still the outputs of no
// speculation.
TEST(EngineSpecOverlap, SampledBesideGreedyUnderAStepBudgetAndTheBatchLimit) {
    SpecSetup budgeted = kOverlapPicks;
    budgeted.budget = 20;
    budgeted.chunk = 6;
    expect_same_as_without_speculation(sampled_and_greedy_jobs(), budgeted, "sampled, budget 20");
    SpecSetup limited = kOverlapPicks;
    limited.max_batch = 4;
    expect_same_as_without_speculation(sampled_and_greedy_jobs(), limited, "sampled, speculative_max_batch 4");
}

// Aborts with a step in flight: a speculating request aborted after 2, 3 or 5 steps (its verify
// chunk, or the prefill whose pending token the next verify chunk decodes, still in flight) ends with
// an abort and nothing after it; the others' tokens are those of the run without the abort.
TEST(EngineSpecOverlap, AbortWithAStepInFlight) {
    SamplingParams hot;
    hot.temperature = 1.0f;
    hot.max_tokens = 8;
    hot.ignore_eos = true;
    hot.seed = 3;
    const std::vector<Job> jobs = {{prompt(111, 6), greedy(12)},
                                   {prompt(112, 9), greedy(8), 2},
                                   {prompt(113, 7), hot},
                                   {prompt(114, 5), greedy(12)}};
    for (const Variant& v : variants()) {
        const SpecSetup s = with(kOverlapPicks, v);
        const Outcome whole = run(jobs, s);
        for (const int at : {2, 3, 5}) {
            std::vector<Job> aborting = jobs;
            aborting[0].abort_at_step = at;
            aborting[3].abort_at_step = at + 1;
            const std::string label = v.name() + ", abort at step " + std::to_string(at);
            const Outcome cut = run(aborting, s, FinishReason::kNone);
            expect_clean(cut, aborting, label);
            EXPECT_EQ(cut.finish[0].at(0), FinishReason::kAbort) << label;
            for (const size_t i : {size_t(0), size_t(3)}) {  // a prefix of the whole run's output
                const auto& part = cut.tokens[i].count(0) ? cut.tokens[i].at(0) : std::vector<int32_t>{};
                const auto& all = whole.tokens[i].at(0);
                ASSERT_LE(part.size(), all.size()) << label;
                EXPECT_EQ(part, std::vector<int32_t>(all.begin(), all.begin() + long(part.size()))) << label;
            }
            for (const size_t i : {size_t(1), size_t(2)}) EXPECT_EQ(cut.tokens[i], whole.tokens[i]) << label;
        }
    }
}

// Greedy requests that are not plain argmax (penalties, logit_bias: kFull rows and host-judged
// verify chunks, the penalty counts of the pending token and of each accepted draft) and one with
// logprobs (no speculation, kFull rows with logprobs) beside plain ones.
TEST(EngineSpecOverlap, GreedyRowsThatAreNotPlainArgmax) {
    const std::vector<int32_t> p = prompt(121, 9);
    const std::vector<int32_t> free = free_run(p, 10);
    SamplingParams rep = greedy(10);
    rep.repetition_penalty = 1.5f;
    SamplingParams freq = greedy(10);
    freq.frequency_penalty = 1.0f;
    freq.presence_penalty = 0.5f;
    SamplingParams bias = greedy(10);
    bias.logit_bias = {{free[3], -100.0f}, {free[6], 5.0f}};
    SamplingParams lp = greedy(10);
    lp.logprobs = 2;
    const std::vector<Job> jobs = {{p, rep}, {p, freq}, {p, bias, 2}, {p, lp}, {p, greedy(10)}};
    const Outcome base = expect_same_as_without_speculation(jobs, kOverlapPicks, "not plain argmax");
    EXPECT_EQ(base.tokens[4].at(0), free);
    EXPECT_NE(base.tokens[2].at(0), free);
}

// Random mixes (prompt lengths, max_tokens, stop ids and EOS taken from a probe run's output,
// min_tokens, n, arrivals, sampled requests, penalties, aborts) under random engine setups (step
// budget, prefill chunk, batch limit, prefix cache, a tight pool), each with one speculating variant
// against speculation off.
TEST(EngineSpecOverlap, RandomMixes) {
    // (Seeds 1..400 passed when this was written; 6 keep the test short.)
    for (uint64_t seed = 1; seed <= 6; ++seed) {
        uint64_t draw_i = 0;
        auto draw = [&](int lo, int hi) {  // uniform in [lo, hi]
            return lo + int(philox_uniform(seed, 7, draw_i++) * double(hi - lo + 1) * 0.999999);
        };
        std::vector<Job> jobs;
        const int n_jobs = draw(3, 6);
        for (int i = 0; i < n_jobs; ++i) {
            const int len = draw(0, 4) == 0 ? draw(52, 62) : draw(1, 20);  // long ones cross a page
            Job j{prompt(1000 * seed + uint64_t(i), len), greedy(draw(1, 12)), draw(1, 2)};
            j.arrive_at_step = draw(0, 1) ? 0 : draw(1, 8);
            jobs.push_back(j);
        }
        const Outcome probe = run(jobs, {}, FinishReason::kNone);
        int32_t eos = -1;
        for (size_t i = 0; i < jobs.size(); ++i) {
            const auto& out = probe.tokens[i].at(0);
            SamplingParams& params = jobs[i].params;
            switch (draw(0, 6)) {
                case 0:  // a stop id from its own output
                    params.stop_token_ids = {out[size_t(draw(0, int(out.size()) - 1))]};
                    break;
                case 1:  // EOS (the first request to ask picks it), maybe with min_tokens
                    if (eos < 0) eos = out[size_t(draw(0, int(out.size()) - 1))];
                    params.ignore_eos = false;
                    params.min_tokens = draw(0, 4);
                    break;
                case 2:  // seeded sampling, maybe with min_tokens or a penalty (verify rows on the host)
                    params.temperature = 1.0f;
                    params.seed = seed * 100 + i;
                    params.ignore_eos = draw(0, 1) == 1;
                    params.min_tokens = draw(0, 1) ? 0 : draw(1, 4);
                    params.presence_penalty = draw(0, 2) == 0 ? 0.5f : 0.0f;
                    break;
                case 3:  // greedy, not plain argmax
                    params.repetition_penalty = 1.4f;
                    params.logit_bias = {{out[0], -3.0f}};
                    break;
                case 4:  // aborted after a few steps
                    jobs[i].abort_at_step = jobs[i].arrive_at_step + draw(1, 6);
                    break;
                default:
                    break;
            }
        }
        SpecSetup s = kOverlapPicks;
        s.budget = draw(0, 1) ? 512 : draw(8, 40);
        s.chunk = draw(0, 1) ? 512 : draw(3, 16);
        s.max_batch = draw(0, 2) == 0 ? draw(1, 3) : 0;
        s.prefix_cache = draw(0, 2) == 0;
        s.tight_pool = draw(0, 2) == 0 ? 61 : 0;
        s.eos = eos;
        const Variant v = variants()[size_t(draw(0, 5))];
        const std::string label = "mix " + std::to_string(seed) + ", " + v.name() + ", budget " +
                                  std::to_string(s.budget) + ", chunk " + std::to_string(s.chunk) + ", batch limit " +
                                  std::to_string(s.max_batch) + (s.prefix_cache ? ", prefix cache" : "") +
                                  (s.tight_pool ? ", tight pool" : "");
        SpecSetup off = s;
        off.k = 0;
        const Outcome base = run(jobs, off, FinishReason::kNone);
        const Outcome on = run(jobs, with(s, v), FinishReason::kNone);
        expect_clean(base, jobs, label + " (no speculation)");
        expect_clean(on, jobs, label);
        for (size_t i = 0; i < jobs.size(); ++i)
            if (jobs[i].abort_at_step >= 0) {  // what came before the abort: a prefix of the probe's output
                for (const auto& [c, got] : on.tokens[i]) {
                    const auto& all = probe.tokens[i].at(c);
                    ASSERT_LE(got.size(), all.size()) << label << " job " << i;
                    EXPECT_EQ(got, std::vector<int32_t>(all.begin(), all.begin() + long(got.size())))
                        << label << " job " << i;
                }
            } else {  // greedy and seeded sampled alike
                EXPECT_EQ(on.tokens[i], base.tokens[i]) << label << " job " << i;
                EXPECT_EQ(on.finish[i], base.finish[i]) << label << " job " << i;
            }
    }
}

// Everything at once: arrivals, the batch limit, a small step budget, stop ids, EOS, min_tokens,
// n > 1, a sampled request, a tight pool (two sequences cross position 64: preemptions). Every
// output, the sampled one's included, equals speculation off.
TEST(EngineSpecOverlap, EverythingAtOnce) {
    const std::vector<int32_t> p = prompt(101, 8);
    const std::vector<int32_t> free = free_run(p, 14);
    const int32_t eos = free[4];
    Job stop_job{p, greedy(14), 2};
    stop_job.params.stop_token_ids = {free[2]};
    stop_job.arrive_at_step = 1;
    Job eos_job{p, greedy(14)};
    eos_job.params.ignore_eos = false;
    eos_job.params.min_tokens = 6;
    eos_job.arrive_at_step = 3;
    SamplingParams hot;
    hot.temperature = 1.0f;
    hot.max_tokens = 10;
    hot.seed = 21;
    hot.ignore_eos = true;
    // The first two cross position 64 side by side: one is preempted.
    const std::vector<Job> jobs = {{prompt(102, 56), greedy(13)},
                                   {prompt(104, 58), greedy(9)},
                                   stop_job,
                                   eos_job,
                                   {.prompt = prompt(103, 30), .params = hot, .n = 2, .arrive_at_step = 2},
                                   {.prompt = prompt(105, 3), .params = greedy(5), .arrive_at_step = 7}};
    SpecSetup s = kOverlapPicks;
    s.max_batch = 3;
    s.budget = 24;
    s.chunk = 16;
    s.tight_pool = 61;
    const Outcome base = run(jobs, {.eos = eos}, FinishReason::kNone);
    expect_clean(base, jobs, "baseline");
    EXPECT_EQ(base.finish[2].at(1), FinishReason::kStop);
    int64_t preempted = 0;
    for (const Variant& v : variants()) {
        SpecSetup on_setup = with(s, v);
        on_setup.eos = eos;
        const Outcome on = run(jobs, on_setup, FinishReason::kNone);
        expect_clean(on, jobs, v.name());
        EXPECT_GT(on.verify, 0) << v.name();
        preempted += on.preempted;
        EXPECT_EQ(on.tokens, base.tokens) << v.name();
        EXPECT_EQ(on.finish, base.finish) << v.name();
    }
    EXPECT_GT(preempted, 0);
}

}  // namespace
}  // namespace dsv4
