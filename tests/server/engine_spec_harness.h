// The harness of the speculative-decoding engine tests (engine_spec_test.cpp,
// engine_spec_overlap_test.cpp): the built-in tiny model on the CPU reference runner behind an
// EngineCore with speculation, overlap, device picks (HostSamplingRunner), a tight pool, the prefix
// cache, the speculation batch limit and the EOS id set per run; requests that arrive or are aborted
// at given steps; and what came out per request and choice.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/philox.h"
#include "runtime/ref_runner.h"
#include "runtime/runner_factory.h"
#include "sched/engine_core.h"
#include "tests/server/choice_sink.h"
#include "tests/server/host_sampling_runner.h"

namespace dsv4::spec_test {

inline std::shared_ptr<const RefModel> tiny() {
    static const std::shared_ptr<const RefModel> m = *load_ref_model("tiny", 0);
    return m;
}

// ChoiceSink plus what a front end relies on: the reported completion count and stop id, and no
// event after a choice's finish.
class Sink : public ChoiceSink {
public:
    void on_event(SeqEvent&& ev) override {
        if (finish.count(ev.choice)) ++late_events;
        completion[ev.choice] = ev.completion_tokens;
        if (ev.finish != FinishReason::kNone) stop_token[ev.choice] = ev.stop_token;
        ChoiceSink::on_event(std::move(ev));
    }
    std::map<int, int64_t> completion;
    std::map<int, int32_t> stop_token;
    int late_events = 0;
};

struct Job {
    std::vector<int32_t> prompt;
    SamplingParams params;
    int n = 1;
    int arrive_at_step = 0;  // added before this engine step (0: before the first)
    int abort_at_step = -1;  // >= 0: aborted before this engine step (if not finished by then)
};

struct SpecSetup {
    int k = 0;  // speculative tokens (0: off)
    DraftSource draft = DraftSource::kMtp;
    int64_t budget = 512, chunk = 512;
    int max_running = 16, max_batch = 0;
    int64_t tight_pool = 0;  // > 0: a pool of two sequences of this many tokens and one page
    bool prefix_cache = false;
    bool overlap = false;  // EngineConfig::Overlap::kAlways (the bookkeeping of a step in flight)
    // The runner picks greedy rows itself (HostSamplingRunner, as the CUDA runner does on the device),
    // verify chunks' k + 1 rows included.
    bool device_picks = false;
    int32_t eos = -1;  // >= 0: the engine sees this id as the model's EOS (ConfigRunner)
};

struct Outcome {
    std::vector<std::map<int, std::vector<int32_t>>> tokens;
    int64_t verify = 0, drafted = 0, accepted = 0, preempted = 0, generated = 0;
    int64_t verify_rows_picked = 0;  // by the runner, with SpecSetup::device_picks
    // Per request and choice: the finish reason, the final event's completion_tokens and stop id.
    std::vector<std::map<int, FinishReason>> finish;
    std::vector<std::map<int, int64_t>> completion;
    std::vector<std::map<int, int32_t>> stop_token;
    std::vector<std::string> errors;  // per request ("" when none)
    int late_events = 0;              // events after a choice's finish, all requests
    int64_t pending_seen = 0;         // chunk tokens launched as kPendingToken (device_picks)
    int64_t overlapped_steps = 0;
};

// A runner whose config() reports another EOS id (everything else is the inner runner's): any
// token of the tiny model's output can play EOS, among accepted drafts too.
class ConfigRunner final : public ModelRunner {
public:
    ConfigRunner(ModelRunner& inner, ModelConfig cfg) : inner_(inner), cfg_(std::move(cfg)) {}
    const ModelConfig& config() const override { return cfg_; }
    const KvLayout& kv_layout() const override { return inner_.kv_layout(); }
    int64_t n_pages() const override { return inner_.n_pages(); }
    int64_t max_positions() const override { return inner_.max_positions(); }
    int max_draft_tokens() const override { return inner_.max_draft_tokens(); }
    bool supports_device_sample(DeviceSample m) const override { return inner_.supports_device_sample(m); }
    Status forward(const ForwardBatch& b, std::vector<std::vector<float>>& logits) override {
        return inner_.forward(b, logits);
    }
    Status forward_sampled(const ForwardBatch& b, StepOutput& out) override { return inner_.forward_sampled(b, out); }

private:
    ModelRunner& inner_;
    ModelConfig cfg_;
};

inline std::vector<int32_t> prompt(uint64_t seed, int n) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(int32_t(2 + philox_uniform(seed, 1, uint64_t(i)) * 120000));
    return p;
}

inline SamplingParams greedy(int max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

// Runs the jobs to the end. want: every choice's finish reason (kNone: not checked here).
inline Outcome run(const std::vector<Job>& jobs, const SpecSetup& s, FinishReason want = FinishReason::kLength) {
    const int64_t page_tokens = 64;
    int64_t n_pages = 1024;
    if (s.tight_pool > 0) {
        const bool mtp = s.k > 0 && s.draft == DraftSource::kMtp;
        auto layout = KvLayout::make(tiny()->config(), page_tokens, 4, KvRowFormat::kF32, mtp ? 1 : 0, s.k);
        EXPECT_TRUE(layout.is_ok());
        n_pages = 2 * layout->pages_for_tokens(s.tight_pool) + 1;
    }
    auto runner = RefRunner::create(tiny(), page_tokens, n_pages, {s.k, s.draft});
    EXPECT_TRUE(runner.is_ok()) << runner.status().message();
    ModelConfig model_cfg = tiny()->config();
    if (s.eos >= 0) model_cfg.eos_token_id = s.eos;
    ConfigRunner with_eos(**runner, model_cfg);
    ModelRunner& model = s.eos >= 0 ? static_cast<ModelRunner&>(with_eos) : **runner;
    EngineConfig cfg;
    cfg.sched = {.max_running = s.max_running, .max_tokens_per_step = s.budget, .max_prefill_chunk = s.chunk};
    cfg.sched.prefix_cache = s.prefix_cache;
    cfg.sched.speculative_tokens = s.k;
    cfg.sched.speculative_max_batch = s.max_batch;
    cfg.page_shuffle_seed = 5;
    if (s.overlap) cfg.overlap = EngineConfig::Overlap::kAlways;
    cfg.default_seed = 11;
    EngineStats stats;
    test::HostSamplingRunner picking(model);
    if (!s.device_picks) cfg.device_sampling = false;
    EngineCore core(s.device_picks ? static_cast<ModelRunner&>(picking) : model, cfg, stats);
    std::vector<std::shared_ptr<Sink>> sinks;
    for (size_t i = 0; i < jobs.size(); ++i) sinks.push_back(std::make_shared<Sink>());
    auto arrive = [&](int step) {
        for (size_t i = 0; i < jobs.size(); ++i)
            if (jobs[i].arrive_at_step == step) {
                EXPECT_TRUE(core.add({.id = i + 1,
                                      .prompt = jobs[i].prompt,
                                      .params = jobs[i].params,
                                      .n = jobs[i].n,
                                      .sink = sinks[i]})
                                .is_ok());
            }
    };
    int last_event = 0;
    for (const Job& j : jobs) last_event = std::max({last_event, j.arrive_at_step, j.abort_at_step});
    for (int step = 0; step < 20000; ++step) {
        arrive(step);
        for (size_t i = 0; i < jobs.size(); ++i)
            if (jobs[i].abort_at_step == step) core.abort(i + 1);
        if (!core.has_work() && step >= last_event) break;
        core.step();
    }
    EXPECT_FALSE(core.has_work());
    Outcome o;
    for (size_t i = 0; i < sinks.size(); ++i) {
        if (want != FinishReason::kNone) {
            for (int c = 0; c < jobs[i].n; ++c)
                EXPECT_EQ(sinks[i]->finish[c], want) << "job " << i << ": " << sinks[i]->error;
        }
        o.tokens.push_back(sinks[i]->tokens);
        o.finish.push_back(sinks[i]->finish);
        o.completion.push_back(sinks[i]->completion);
        o.stop_token.push_back(sinks[i]->stop_token);
        o.errors.push_back(sinks[i]->error);
        o.late_events += sinks[i]->late_events;
    }
    o.verify = stats.spec_verify_chunks_total;
    o.drafted = stats.spec_draft_tokens_total;
    o.accepted = stats.spec_accepted_tokens_total;
    o.preempted = stats.preemptions_total;
    o.generated = stats.generated_tokens_total;
    o.verify_rows_picked = picking.verify_rows;
    o.pending_seen = picking.pending_seen;
    o.overlapped_steps = stats.overlapped_steps_total;
    if (!s.prefix_cache) {
        EXPECT_EQ(core.pages().n_used(), 0);
    }
    return o;
}

}  // namespace dsv4::spec_test
