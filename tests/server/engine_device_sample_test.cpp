// Device-side sampling through the ModelRunner interface, on the CPU: which rows the engine asks
// the runner to sample (sample_is_plain_argmax), the default runner rejecting such requests, and
// the engine giving identical outputs with device sampling on and off for a mix of greedy,
// penalised, min_tokens, logprobs and seeded-random requests. The "device" is a test runner that
// wraps FakeRunner and picks its own argmax, so a row routed to the wrong sequence or a row that
// needed the host sampler changes the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "core/philox.h"
#include "sched/device_sample.h"
#include "sched/engine_core.h"
#include "sched/fake_runner.h"

namespace dsv4 {
namespace {

// FakeRunner plus kGreedy device sampling done by an argmax of its own (first maximum).
class GreedyDeviceRunner final : public ModelRunner {
public:
    explicit GreedyDeviceRunner(FakeRunnerOptions o) : inner_(o) {}
    const ModelConfig& config() const override { return inner_.config(); }
    const KvLayout& kv_layout() const override { return inner_.kv_layout(); }
    int64_t n_pages() const override { return inner_.n_pages(); }
    Status forward(const ForwardBatch& b, std::vector<std::vector<float>>& logits) override {
        return inner_.forward(b, logits);
    }
    bool supports_device_sample(DeviceSample m) const override {
        return m == DeviceSample::kNone || m == DeviceSample::kGreedy;
    }
    Status forward_sampled(const ForwardBatch& b, StepOutput& out) override {
        out.logits.clear();
        out.tokens.clear();
        std::vector<std::vector<float>> all;
        DSV4_RETURN_IF_ERROR(inner_.forward(b, all));
        size_t r = 0;
        for (const auto& c : b.seqs) {
            if (!c.want_logits) continue;
            auto& row = all[r++];
            if (c.sample == DeviceSample::kGreedy) {
                out.tokens.push_back(int32_t(std::max_element(row.begin(), row.end()) - row.begin()));
                ++device_rows[c.seq_id];
            } else {
                out.logits.push_back(std::move(row));
            }
        }
        return Status::ok();
    }
    std::map<int64_t, int> device_rows;  // seq_id -> rows sampled here

private:
    FakeRunner inner_;
};

class Sink : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
        if (ev.finish != FinishReason::kNone) finish = ev.finish, error = ev.error;
    }
    std::vector<int32_t> tokens;
    FinishReason finish = FinishReason::kNone;
    std::string error;
};

SamplingParams greedy(int max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    return p;
}

// penalty_tokens (the kFull row's token list): applying each unique entry once, with the float
// operations sample_rows uses, gives exactly the logits sample_token's penalties and stop masking
// leave behind (sample_token modifies its row in place when no logprobs are asked for).
TEST(DeviceSampling, PenaltyTokensReproduceTheHostPenaltiesAndMasks) {
    std::vector<int32_t> prompt = {3, 3, 9, 40, 41, 3, 1}, output = {9, 9, 9, 12, 40, 5, 12};
    PenaltyState pen;
    pen.reset(prompt, output);
    for (int variant = 0; variant < 4; ++variant) {
        SamplingParams p;
        p.temperature = 0;
        p.repetition_penalty = variant == 1 ? 1.0f : 1.3f;
        p.presence_penalty = variant == 2 ? 0.0f : 0.5f;
        p.frequency_penalty = variant == 2 ? 0.0f : -0.25f;
        p.stop_token_ids = {5, 63};
        const SampleContext ctx{.seed = 1, .position = 2, .suppress_stops = variant != 3, .eos_token = 1};
        std::vector<float> logits(64);
        for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(int(i * 37 % 23) - 11) * 0.37f;
        std::vector<float> host = logits, dev = logits;
        (void)sample_token(host, p, pen, ctx);
        const auto toks = penalty_tokens(p, pen, ctx);
        std::set<int32_t> ids;
        for (const auto& t : toks) {
            EXPECT_TRUE(ids.insert(t.token).second) << "token " << t.token << " listed twice";
            float l = dev[size_t(t.token)];
            if (p.repetition_penalty != 1.0f && t.seen) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
            if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && t.output_count > 0) {
                const float f = p.frequency_penalty * float(t.output_count);
                l = (l - f) - p.presence_penalty;
            }
            if (t.masked) l = -INFINITY;
            dev[size_t(t.token)] = l;
        }
        EXPECT_EQ(dev, host) << "variant " << variant;
        const DeviceSampleParams d = device_sample_params(p, ctx, toks);
        EXPECT_EQ(d.seed, 1u);
        EXPECT_EQ(d.position, 2);
        EXPECT_EQ(d.penalty_tokens.size(), toks.size());
    }
}

TEST(DeviceSampling, PlainArgmaxOnlyWhenTheHostSamplerWouldDoNothingElse) {
    const SampleContext none{.eos_token = 1};
    const SampleContext masking{.suppress_stops = true, .eos_token = 1};
    SamplingParams p = greedy(4);
    EXPECT_TRUE(sample_is_plain_argmax(p, none));
    EXPECT_FALSE(sample_is_plain_argmax(p, masking));  // EOS masked before min_tokens
    p.ignore_eos = true;
    EXPECT_TRUE(sample_is_plain_argmax(p, masking));  // nothing left to mask
    p.stop_token_ids = {7};
    EXPECT_FALSE(sample_is_plain_argmax(p, masking));
    EXPECT_TRUE(sample_is_plain_argmax(p, none));
    SamplingParams q = greedy(4);
    q.repetition_penalty = 1.1f;
    EXPECT_FALSE(sample_is_plain_argmax(q, none));
    q = greedy(4);
    q.frequency_penalty = 0.5f;
    EXPECT_FALSE(sample_is_plain_argmax(q, none));
    q = greedy(4);
    q.logprobs = 0;
    EXPECT_FALSE(sample_is_plain_argmax(q, none));
    q = greedy(4);
    q.temperature = 0.7f;
    EXPECT_FALSE(sample_is_plain_argmax(q, none));
    // Whenever it holds, sample_token is the plain argmax (lowest id on ties, NaN skipped).
    std::vector<float> l = {0.f, NAN, 3.f, -1.f, 3.f};
    auto l2 = l;
    EXPECT_EQ(sample_token(l2, greedy(1), PenaltyState{}, none).token, 2);
}

TEST(DeviceSampling, HostPathRunnerRejectsDeviceRequests) {
    FakeRunnerOptions fo;
    fo.vocab_size = 300;
    FakeRunner runner(fo);
    EXPECT_FALSE(runner.supports_device_sample(DeviceSample::kGreedy));
    EXPECT_TRUE(runner.supports_device_sample(DeviceSample::kNone));
    const std::vector<int32_t> toks = {5, 6, 7};
    std::vector<int32_t> pages;
    for (int64_t i = 0; i < runner.kv_layout().pages_for_tokens(3); ++i) pages.push_back(int32_t(i));
    ForwardBatch b;
    b.seqs.push_back(SeqChunk{.seq_id = 1, .tokens = toks, .start_pos = 0, .want_logits = true, .page_table = pages});
    StepOutput out;
    ASSERT_TRUE(runner.forward_sampled(b, out).is_ok());
    EXPECT_EQ(out.logits.size(), 1u);
    EXPECT_TRUE(out.tokens.empty());
    b.seqs[0].sample = DeviceSample::kGreedy;
    const Status s = runner.forward_sampled(b, out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
}

struct RunResult {
    std::vector<std::vector<int32_t>> tokens;
    int64_t device_sampled = 0;
    std::map<int64_t, int> device_rows;
};

RunResult run(bool device_sampling, const std::vector<SamplingParams>& params) {
    FakeRunnerOptions fo;
    fo.vocab_size = 2000;
    fo.n_pages = 2048;
    fo.page_tokens = 16;
    GreedyDeviceRunner runner(fo);
    EngineConfig cfg;
    cfg.sched = {.max_running = 4, .max_tokens_per_step = 40, .max_prefill_chunk = 24};
    cfg.page_shuffle_seed = 11;
    cfg.device_sampling = device_sampling;
    EngineStats stats;
    EngineCore core(runner, cfg, stats);
    std::vector<std::shared_ptr<Sink>> sinks;
    for (size_t i = 0; i < params.size(); ++i) {
        auto sink = std::make_shared<Sink>();
        sinks.push_back(sink);
        std::vector<int32_t> prompt;
        for (size_t k = 0; k < 5 + 9 * i; ++k) prompt.push_back(int32_t(2 + philox_uniform(3, i, k) * 1900));
        GenRequest r{.id = i + 1, .prompt = prompt, .params = params[i], .sink = sink};
        EXPECT_TRUE(core.add(std::move(r)).is_ok());
    }
    RunResult res;
    for (int guard = 0; core.has_work() && guard < 10000; ++guard) res.device_sampled += core.step().n_device_sampled;
    for (auto& s : sinks) {
        EXPECT_TRUE(s->error.empty()) << s->error;
        res.tokens.push_back(s->tokens);
    }
    res.device_rows = runner.device_rows;
    return res;
}

TEST(DeviceSampling, EngineOutputsIdenticalWithDeviceSamplingOnAndOff) {
    std::vector<SamplingParams> ps;
    ps.push_back(greedy(20));  // seq 1: device every step
    SamplingParams p = greedy(20);
    p.repetition_penalty = 1.3f;  // seq 2: host
    ps.push_back(p);
    p = greedy(20);
    p.min_tokens = 6;  // seq 3: host for 6 tokens, then device
    ps.push_back(p);
    p = greedy(20);
    p.logprobs = 2;  // seq 4: host
    ps.push_back(p);
    p = SamplingParams{};
    p.temperature = 0.8f;
    p.top_k = 20;
    p.seed = 5;
    p.max_tokens = 20;  // seq 5: host
    ps.push_back(p);
    p = greedy(20);
    p.ignore_eos = true;
    p.min_tokens = 4;  // seq 6: device (nothing to mask)
    ps.push_back(p);
    const RunResult on = run(true, ps), off = run(false, ps);
    EXPECT_EQ(on.tokens, off.tokens);
    EXPECT_EQ(off.device_sampled, 0);
    EXPECT_TRUE(off.device_rows.empty());
    int64_t total = 0;
    for (const auto& t : on.tokens) total += int64_t(t.size());
    EXPECT_GT(on.device_sampled, 0);
    EXPECT_LT(on.device_sampled, total);
    for (int64_t host_only : {2, 4, 5}) EXPECT_EQ(on.device_rows.count(host_only), 0u) << "seq " << host_only;
    EXPECT_GT(on.device_rows.count(1), 0u);
    EXPECT_GT(on.device_rows.count(6), 0u);
    // seq 3: EOS masked for its first 6 tokens (host), plain argmax afterwards (device).
    if (on.tokens[2].size() > 6) {
        ASSERT_GT(on.device_rows.count(3), 0u);
        EXPECT_LE(on.device_rows.at(3), int(on.tokens[2].size()) - 6 + 1);
    }
    std::printf(
        "[device sampling, CPU] %zu requests, %lld of %lld tokens sampled by the runner; outputs identical on/off\n",
        ps.size(), (long long)on.device_sampled, (long long)total);
}

}  // namespace
}  // namespace dsv4
