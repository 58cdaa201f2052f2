// Prefix caching (sched/prefix_cache.h, issue 17). The cache itself: hash-chained blocks verified
// token by token, snapshots at block ends, page owners, LRU eviction of leaves, salts, flush. Then
// the engine: requests sharing prefixes that end at every residue around the block boundaries give
// the same outputs (FakeRunner: history read back from the pages) and bitwise the same logits (the
// tiny CPU reference: window ring, ratio-4 and ratio-128 compressors, indexer) with the cache as
// without it, with chunked prefill, overlap, preemption, n > 1 and aborts; and no page is leaked:
// idle, the pages in use are exactly the cache's, and a flush returns them all.
#include "sched/prefix_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "core/philox.h"
#include "runtime/runner_factory.h"
#include "sched/engine_core.h"
#include "sched/fake_runner.h"
#include "tests/server/host_sampling_runner.h"
#include "tests/server/recording_runner.h"

namespace dsv4 {
namespace {

KvLayout fake_layout(int64_t page_tokens) {
    KvLayout l;
    l.page_tokens = page_tokens;
    l.n_state_pages = 2;
    return l;
}

std::vector<int32_t> ids(uint64_t seed, int n, int32_t lo = 2, int32_t hi = 1900) {
    std::vector<int32_t> p;
    for (int k = 0; k < n; ++k) p.push_back(lo + int32_t(philox_uniform(seed, 0, uint64_t(k)) * float(hi - lo)));
    return p;
}

TEST(PrefixCache, BlocksSnapshotsOwnersAndEviction) {
    const KvLayout L = fake_layout(16);
    PageAllocator pages(64);
    PrefixCache cache(L, 32, pages);  // 2 token pages a block
    EXPECT_EQ(prefix_block_tokens(L), 16);
    const std::vector<int32_t> toks = ids(1, 100);
    // A sequence with 2 state pages and 7 token pages (100 tokens), a snapshot after 64 tokens.
    std::vector<int32_t> seq, snap;
    ASSERT_TRUE(pages.allocate(2 + 7, seq));
    ASSERT_TRUE(pages.allocate(2, snap));
    const std::vector<int32_t> snap_ids = snap;
    const auto token_pages = std::span<const int32_t>(seq).subspan(2);
    cache.insert(toks, 0, token_pages, 64, snap);
    EXPECT_TRUE(snap.empty());
    EXPECT_EQ(cache.n_blocks(), 2);
    EXPECT_EQ(cache.n_snapshots(), 1);
    EXPECT_EQ(cache.pages_held(), 4 + 2);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(pages.owners(token_pages[size_t(i)]), 2);  // sequence + cache
    // Lookups: the whole 64-token prefix when at least 64 tokens precede the last one; nothing
    // shorter has a snapshot; another salt or a changed token misses.
    PrefixCache::Hit h = cache.lookup(toks, 0, 99);
    EXPECT_EQ(h.tokens, 64);
    EXPECT_EQ(h.snapshot, snap_ids);
    EXPECT_EQ(h.token_pages, std::vector<int32_t>(token_pages.begin(), token_pages.begin() + 4));
    EXPECT_EQ(pages.owners(token_pages[0]), 3);  // the caller's owner
    pages.release(h.token_pages);
    EXPECT_EQ(cache.lookup(toks, 0, 63).tokens, 0);
    EXPECT_EQ(cache.lookup(toks, 7, 99).tokens, 0);
    std::vector<int32_t> other = toks;
    other[40] ^= 1;
    EXPECT_EQ(cache.lookup(other, 0, 99).tokens, 0);  // block 1 differs: block 0 has no snapshot
    // The sequence ends: the cache keeps the blocks alone.
    pages.release(seq);
    EXPECT_EQ(pages.n_used(), cache.pages_held());
    // A second sequence with the same first block and a different second one, snapshot at 32.
    std::vector<int32_t> seq2, snap2;
    ASSERT_TRUE(pages.allocate(2 + 4, seq2));
    ASSERT_TRUE(pages.allocate(2, snap2));
    cache.insert(other, 0, std::span<const int32_t>(seq2).subspan(2), 32, snap2);
    EXPECT_EQ(cache.n_blocks(), 2);  // block 0 known: its pages stay the first sequence's
    h = cache.lookup(other, 0, 99);
    EXPECT_EQ(h.tokens, 32);
    pages.release(h.token_pages);
    pages.release(seq2);
    // Eviction drops leaves, least recently used first, until enough pages are free.
    const int64_t free0 = pages.n_free();
    EXPECT_EQ(cache.evict_until_free(free0 + 1), 1);  // block 1 (the only leaf) with its snapshot
    EXPECT_EQ(pages.n_free(), free0 + 4);
    h = cache.lookup(toks, 0, 99);
    EXPECT_EQ(h.tokens, 32);
    pages.release(h.token_pages);
    cache.flush();
    EXPECT_EQ(pages.n_used(), 0);
    EXPECT_EQ(cache.n_blocks(), 0);
}

class Sink : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        auto& c = choices[ev.choice];
        c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
        if (ev.finish != FinishReason::kNone) {
            c.finish = ev.finish;
            c.error = ev.error;
            cached = std::max(cached, ev.cached_tokens);
        }
    }
    struct Choice {
        std::vector<int32_t> tokens;
        FinishReason finish = FinishReason::kNone;
        std::string error;
        bool operator==(const Choice& o) const { return tokens == o.tokens && finish == o.finish; }
    };
    std::map<int, Choice> choices;
    int64_t cached = 0;
};

struct Job {
    std::vector<int32_t> prompt;
    SamplingParams params;
    int n = 1;
    uint64_t salt = 0;
};

struct Outcome {
    std::vector<std::map<int, Sink::Choice>> results;
    std::vector<int64_t> cached;
    int64_t hit_tokens = 0, preemptions = 0, idle_used = -1, idle_cache_pages = -1, after_flush = -1;
};

// One job at a time when `serial` (so later ones find earlier ones cached), else all at once.
Outcome drive(ModelRunner& runner, const std::vector<Job>& jobs, bool cache, SchedulerConfig sched,
              EngineConfig::Overlap overlap = EngineConfig::Overlap::kOff, bool serial = true, uint64_t abort_id = 0,
              int abort_after = -1) {
    EngineConfig cfg;
    cfg.sched = sched;
    cfg.sched.prefix_cache = cache;
    cfg.sched.align_prefill_chunks = true;  // the same chunks with and without the cache
    cfg.page_shuffle_seed = 3;
    cfg.default_seed = 5;
    cfg.overlap = overlap;
    cfg.device_sampling = overlap != EngineConfig::Overlap::kOff;
    EngineStats stats;
    EngineCore core(runner, cfg, stats);
    std::vector<std::shared_ptr<Sink>> sinks;
    int steps = 0;
    auto run = [&] {
        for (int guard = 0; core.has_work() && guard < 50000; ++guard, ++steps) {
            if (steps == abort_after) core.abort(abort_id);
            core.step();
        }
    };
    for (size_t i = 0; i < jobs.size(); ++i) {
        sinks.push_back(std::make_shared<Sink>());
        EXPECT_TRUE(core.add({.id = i + 1,
                              .prompt = jobs[i].prompt,
                              .params = jobs[i].params,
                              .n = jobs[i].n,
                              .sink = sinks.back(),
                              .cache_salt = jobs[i].salt})
                        .is_ok());
        if (serial) run();
    }
    run();
    Outcome o;
    for (auto& s : sinks) {
        for (const auto& [c, ch] : s->choices) EXPECT_TRUE(ch.error.empty()) << ch.error;
        o.results.push_back(s->choices);
        o.cached.push_back(s->cached);
    }
    o.hit_tokens = stats.prefix_cache_hit_tokens_total;
    o.preemptions = stats.preemptions_total;
    o.idle_used = core.pages().n_used();
    o.idle_cache_pages = stats.prefix_cache_pages;
    core.flush_prefix_cache();
    o.after_flush = core.pages().n_used();
    return o;
}

SamplingParams greedy(int max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    return p;
}

FakeRunnerOptions fake(int64_t n_pages) {
    FakeRunnerOptions fo;
    fo.vocab_size = 2000;
    fo.page_tokens = 16;
    fo.n_pages = n_pages;
    return fo;
}

// Prompts sharing one 120-token prefix cut at every residue around the 16-token blocks, repeats,
// a longer continuation, another salt, seeded sampling and n = 3.
std::vector<Job> fake_jobs() {
    const std::vector<int32_t> base = ids(9, 120);
    std::vector<Job> jobs;
    for (int cut : {15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 96, 100, 119, 120}) {
        Job j{std::vector<int32_t>(base.begin(), base.begin() + cut), greedy(20)};
        const auto tail = ids(100 + uint64_t(cut), cut % 5);
        j.prompt.insert(j.prompt.end(), tail.begin(), tail.end());
        jobs.push_back(j);
    }
    jobs.push_back({base, greedy(40)});  // the same prompt twice
    jobs.push_back({base, greedy(40)});
    Job salted{base, greedy(12)};
    salted.salt = 77;
    jobs.push_back(salted);
    SamplingParams t;
    t.temperature = 0.9f;
    t.seed = 4;
    t.max_tokens = 25;
    jobs.push_back({base, t, 3});
    return jobs;
}

TEST(PrefixCacheEngine, FakeModelSameOutputsAndNoLeak) {
    const SchedulerConfig sched{.max_running = 8, .max_tokens_per_step = 64, .max_prefill_chunk = 48};
    for (const bool serial : {true, false}) {
        FakeRunner a(fake(4096)), b(fake(4096));
        const Outcome off = drive(a, fake_jobs(), false, sched, EngineConfig::Overlap::kOff, serial);
        const Outcome on = drive(b, fake_jobs(), true, sched, EngineConfig::Overlap::kOff, serial);
        EXPECT_EQ(on.results, off.results) << "serial " << serial;
        EXPECT_EQ(off.hit_tokens, 0);
        EXPECT_GT(on.hit_tokens, serial ? 1000 : 0) << "serial " << serial;
        EXPECT_EQ(on.idle_used, on.idle_cache_pages) << "idle pages other than the cache's: a leak";
        EXPECT_GT(on.idle_cache_pages, 0);
        EXPECT_EQ(on.after_flush, 0);
        EXPECT_EQ(off.idle_used, 0);
        if (serial) {
            EXPECT_EQ(on.cached[0], 0);     // the first job found nothing
            EXPECT_EQ(on.cached[14], 112);  // the base prompt after the 119-token cut's run
            EXPECT_EQ(on.cached[15], 112);  // and again
            EXPECT_EQ(on.cached[16], 0);    // another salt shares nothing
        }
    }
}

TEST(PrefixCacheEngine, FakeModelWithOverlapPreemptionAndAborts) {
    const SchedulerConfig sched{.max_running = 8, .max_tokens_per_step = 64, .max_prefill_chunk = 48};
    FakeRunner a(fake(4096));
    const Outcome off = drive(a, fake_jobs(), false, sched, EngineConfig::Overlap::kOff, false);
    // Overlap (device-sampling test runner), all jobs at once.
    FakeRunner b0(fake(4096));
    test::HostSamplingRunner b(b0);
    const Outcome on = drive(b, fake_jobs(), true, sched, EngineConfig::Overlap::kAlways, false);
    EXPECT_EQ(on.results, off.results);
    EXPECT_EQ(on.idle_used, on.idle_cache_pages);
    EXPECT_EQ(on.after_flush, 0);
    // A pool too small for everything: preemption and eviction, serial and at once.
    for (const bool serial : {true, false}) {
        FakeRunner c0(fake(40));
        test::HostSamplingRunner c(c0);
        const Outcome tight = drive(c, fake_jobs(), true, sched, EngineConfig::Overlap::kAlways, serial);
        EXPECT_EQ(tight.results, off.results) << "serial " << serial;
        EXPECT_EQ(tight.idle_used, tight.idle_cache_pages);
        EXPECT_EQ(tight.after_flush, 0);
    }
    // Aborts at several points: the other requests are unchanged, nothing leaks.
    for (int after : {1, 3, 8}) {
        FakeRunner d0(fake(4096));
        test::HostSamplingRunner d(d0);
        const Outcome ab = drive(d, fake_jobs(), true, sched, EngineConfig::Overlap::kAlways, false, 15, after);
        for (size_t i = 0; i < ab.results.size(); ++i)
            if (i != 14) {
                EXPECT_EQ(ab.results[i], off.results[i]) << "job " << i << " abort after " << after;
            }
        EXPECT_EQ(ab.idle_used, ab.idle_cache_pages);
        EXPECT_EQ(ab.after_flush, 0);
    }
}

// The CPU reference: logits of every step bitwise equal with and without the cache, for prefixes
// ending around the 4- and 128-token boundaries and past the 128-token window.
TEST(PrefixCacheEngine, TinyModelLogitsBitwiseEqual) {
    const std::vector<int32_t> base = ids(31, 400, 3, 120000);
    std::vector<Job> jobs;
    jobs.push_back({std::vector<int32_t>(base.begin(), base.begin() + 300), greedy(3)});  // caches 256
    for (int cut : {127, 128, 129, 131, 132, 255, 256, 257, 260, 300, 385}) {
        Job j{std::vector<int32_t>(base.begin(), base.begin() + cut), greedy(4)};
        const auto tail = ids(200 + uint64_t(cut), 3 + cut % 4, 3, 120000);
        j.prompt.insert(j.prompt.end(), tail.begin(), tail.end());
        jobs.push_back(j);
    }
    // One request after another with 160-token chunks; then all at once with 96-token chunks.
    for (const bool serial : {true, false}) {
        const int64_t chunk = serial ? 160 : 96;
        const SchedulerConfig sched{.max_running = 4, .max_tokens_per_step = chunk, .max_prefill_chunk = chunk};
        std::map<int64_t, std::vector<std::vector<float>>> rows[2];
        Outcome out[2];
        for (int cache = 0; cache < 2; ++cache) {
            auto r = make_model_runner({.model = "tiny", .page_tokens = 64, .n_pages = 600});
            ASSERT_TRUE(r.is_ok());
            test::RecordingRunner rec(**r);
            out[cache] = drive(rec, jobs, cache == 1, sched, EngineConfig::Overlap::kOff, serial);
            rows[cache] = rec.rows;
        }
        EXPECT_EQ(out[1].results, out[0].results);
        ASSERT_EQ(rows[1].size(), rows[0].size());
        // One at a time, every sequence runs the same chunks with and without the cache: bitwise.
        // All at once, the step budget splits prompts differently when some resume from the cache,
        // and the reference is chunking-invariant only to float rounding (BLAS over other row
        // counts).
        int64_t compared = 0;
        double worst = 0, scale = 0;
        for (const auto& [seq, r0] : rows[0]) {
            const auto& r1 = rows[1].at(seq);
            ASSERT_EQ(r1.size(), r0.size()) << "seq " << seq;
            for (size_t i = 0; i < r0.size(); ++i) {
                if (serial) {
                    EXPECT_EQ(std::memcmp(r0[i].data(), r1[i].data(), r0[i].size() * sizeof(float)), 0)
                        << "seq " << seq << " row " << i;
                }
                for (size_t j = 0; j < r0[i].size(); ++j) {
                    worst = std::max(worst, double(std::fabs(r1[i][j] - r0[i][j])));
                    scale = std::max(scale, double(std::fabs(r0[i][j])));
                }
                ++compared;
            }
        }
        EXPECT_LE(worst, 1e-5 * scale);
        for (size_t i = 0; i < jobs.size(); ++i) {
            EXPECT_EQ(out[1].cached[i] % 128, 0);
            EXPECT_LT(out[1].cached[i], int64_t(jobs[i].prompt.size()));
        }
        if (serial) {
            EXPECT_GT(out[1].hit_tokens, 128 * 8);
            // Cut 129 resumes from cut 128's snapshot, 257 from job 0's at 256, 385 too (nobody
            // reached 384 with that prefix before it).
            EXPECT_EQ(out[1].cached[3], 128);
            EXPECT_EQ(out[1].cached[8], 256);
            EXPECT_EQ(out[1].cached[11], 256);
        } else {
            EXPECT_GT(out[1].hit_tokens, 0);
        }
        EXPECT_EQ(out[1].idle_used, out[1].idle_cache_pages);
        EXPECT_EQ(out[1].after_flush, 0);
        std::printf(
            "[prefix cache, tiny model, %s, %lld-token chunks] %lld logits rows %s with and "
            "without the cache "
            "(max |diff| %.3g, scale %.3g); %lld prompt tokens resumed from it\n",
            serial ? "one at a time" : "all at once", (long long)chunk, (long long)compared,
            serial ? "bitwise equal" : "equal to float rounding", worst, scale, (long long)out[1].hit_tokens);
    }
}

}  // namespace
}  // namespace dsv4
