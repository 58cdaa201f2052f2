// Device-side greedy sampling in the CUDA runner (ModelRunner::forward_sampled, DeviceSample::kGreedy):
// token ids equal the host argmax of the same step's logits for mixed batches (device rows, logits
// rows, a chunk without logits; eager prefill and graph-replayed decode), the serving engine gives
// identical outputs with device sampling on and off, and (informational, for the ledger) the
// decode-step wall time with and without the logits copy to the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "runtime/cuda_runner.h"
#include "runtime/runner_factory.h"
#include "sample/sampler.h"
#include "sched/device_sample.h"
#include "sched/engine_core.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"

namespace dsv4 {
namespace {

std::shared_ptr<const RefModel> tiny() {
    static auto m = load_ref_model("tiny", 7);
    EXPECT_TRUE(m.is_ok());
    return *m;
}

// The host sampler's greedy pick (what the engine does with a logits row).
int32_t host_greedy(std::vector<float> row) {
    SamplingParams p;
    p.temperature = 0;
    return sample_token(row, p, PenaltyState{}, {}).token;
}

struct Seq {
    int64_t id = 1;
    std::vector<int32_t> table;
    int64_t pos = 0;
};

// Page table for n_tokens: every other id going down from `next` (scattered, descending), which
// moves past the pages it used.
std::vector<int32_t> table_for(const ModelRunner& r, int64_t n_tokens, int64_t& next) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < r.kv_layout().pages_for_tokens(n_tokens); ++i, next -= 2) t.push_back(int32_t(next));
    EXPECT_GE(next, 0) << "page pool too small for the test";
    return t;
}

ForwardBatch batch_of(const std::vector<Seq>& seqs, const std::vector<std::vector<int32_t>>& chunks,
                      const std::vector<DeviceSample>& modes, const std::vector<bool>& want,
                      const std::vector<DeviceSampleParams>& params = {}) {
    ForwardBatch b;
    for (size_t i = 0; i < seqs.size(); ++i)
        b.seqs.push_back(SeqChunk{.seq_id = seqs[i].id,
                                  .tokens = chunks[i],
                                  .start_pos = seqs[i].pos,
                                  .want_logits = want[i],
                                  .page_table = seqs[i].table,
                                  .sample = modes[i],
                                  .params = i < params.size() ? params[i] : DeviceSampleParams{}});
    return b;
}

TEST(CudaSampling, DeviceGreedyEqualsHostArgmaxOfTheSameStep) {
    SKIP_WITHOUT_GPU();
    auto model = tiny();
    CudaRunnerOptions o;
    o.n_pages = 3000;
    o.verbose = false;
    auto ra = make_cuda_runner(model, "", o);  // forward(): logits for every row
    auto rb = make_cuda_runner(model, "", o);  // forward_sampled(): device rows + logits rows
    ASSERT_TRUE(ra.is_ok() && rb.is_ok());
    ModelRunner &A = **ra, &B = **rb;
    EXPECT_TRUE(B.supports_device_sample(DeviceSample::kGreedy));
    const int64_t V = model->config().vocab_size;
    std::mt19937 g(5);
    const std::vector<int> lens = {1, 7, 33, 2, 64};
    const int n = int(lens.size());
    std::vector<Seq> seqs(n);
    int64_t next_page = o.n_pages - 1;
    for (int i = 0; i < n; ++i) seqs[i] = {i + 1, table_for(A, 64 + 40, next_page), 0};
    std::vector<std::vector<int32_t>> chunks(n);
    for (int i = 0; i < n; ++i)
        for (int k = 0; k < lens[i]; ++k) chunks[i].push_back(int32_t(g() % uint32_t(V)));
    const DeviceSample G = DeviceSample::kGreedy, N = DeviceSample::kNone, F = DeviceSample::kFull;
    int device_rows = 0, full_rows = 0, logits_rows = 0, steps = 0;
    double logits_diff = 0;
    for (int st = 0; st < 9; ++st) {
        // Step 0: prefill (eager) with one chunk that wants no logits; later steps: decode (graphs).
        std::vector<DeviceSample> modes(n);
        std::vector<bool> want(n, true);
        for (int i = 0; i < n; ++i) modes[i] = (i + st) % 3 == 0 ? N : (i + st) % 3 == 1 ? G : F;
        if (st == 0) want[3] = false;
        if (st == 7) std::fill(modes.begin(), modes.end(), F);
        // kFull rows: seeded temperature 1.0 with top_p 0.95 on odd rows (as sample_token does it).
        std::vector<SamplingParams> sp(n);
        std::vector<SampleContext> ctx(n);
        std::vector<DeviceSampleParams> dp(n);
        for (int i = 0; i < n; ++i) {
            sp[i].temperature = 1.0f;
            sp[i].top_p = i % 2 ? 0.95f : 1.0f;
            ctx[i] = SampleContext{.seed = 40 + uint64_t(i), .stream = 0, .position = st};
            dp[i] = device_sample_params(sp[i], ctx[i], {});
        }
        if (st == 5) std::fill(modes.begin(), modes.end(), G);  // every row on the device
        if (st == 6) std::fill(modes.begin(), modes.end(), N);  // none
        const ForwardBatch b = batch_of(seqs, chunks, modes, want, dp);
        std::vector<std::vector<float>> la;
        ASSERT_TRUE(A.forward(b, la).is_ok());  // sample flags ignored: logits for every want row
        StepOutput ob;
        const Status s = B.forward_sampled(b, ob);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        int n_want = 0, n_dev = 0;
        for (int i = 0; i < n; ++i) n_want += want[i], n_dev += want[i] && modes[i] != N;
        ASSERT_EQ(int(la.size()), n_want);
        ASSERT_EQ(int(ob.tokens.size()), n_dev);
        ASSERT_EQ(int(ob.logits.size()), n_want - n_dev);
        size_t ra_row = 0, dev = 0, host = 0;
        std::vector<std::vector<int32_t>> next(n);
        for (int i = 0; i < n; ++i) {
            if (!want[i]) {
                next[i] = {int32_t(g() % uint32_t(V))};
                continue;
            }
            const auto& ref_row = la[ra_row++];
            const int32_t want_tok = host_greedy(ref_row);
            if (modes[i] == G) {
                EXPECT_EQ(ob.tokens[dev], want_tok) << "step " << st << " seq " << i;
                next[i] = {ob.tokens[dev++]};
                ++device_rows;
            } else if (modes[i] == F) {
                std::vector<float> row = ref_row;
                EXPECT_EQ(ob.tokens[dev], sample_token(row, sp[i], PenaltyState{}, ctx[i]).token)
                    << "kFull, step " << st << " seq " << i;
                next[i] = {ob.tokens[dev++]};
                ++full_rows;
            } else {
                const auto& got = ob.logits[host++];
                ASSERT_EQ(got.size(), size_t(V));
                for (size_t k = 0; k < got.size(); ++k)
                    logits_diff = std::max(logits_diff, double(std::fabs(got[k] - ref_row[k])));
                next[i] = {host_greedy(got)};
                ++logits_rows;
            }
        }
        for (int i = 0; i < n; ++i) seqs[i].pos += int64_t(chunks[i].size());
        chunks = next;
        ++steps;
    }
    EXPECT_EQ(logits_diff, 0.0) << "the logits rows of the two runners differ";
    std::printf(
        "[device sampling] %d steps (eager prefill + graph decode), B=%d: %d device-greedy ids equal the host "
        "argmax of the same step, %d kFull ids equal sample_token on it, %d logits rows identical (max |diff| %.3g)\n",
        steps, n, device_rows, full_rows, logits_rows, logits_diff);
}

class Sink : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
        for (const auto& r : ev.logprobs) logprobs.push_back(r.logprob);
        if (ev.finish == FinishReason::kError) error = ev.error;
    }
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    std::string error;
};

TEST(CudaSampling, EngineOutputsIdenticalWithDeviceSamplingOnAndOff) {
    SKIP_WITHOUT_GPU();
    auto model = tiny();
    CudaRunnerOptions o;
    o.n_pages = 3000;
    o.page_tokens = 16;
    o.verbose = false;
    auto runner = make_cuda_runner(model, "", o);
    ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
    std::vector<SamplingParams> params;
    for (int i = 0; i < 7; ++i) {
        SamplingParams p;
        p.temperature = 0;
        p.max_tokens = 12;
        p.ignore_eos = true;
        if (i == 3) p.repetition_penalty = 1.2f;                     // device kFull (host when off)
        if (i == 4) p.temperature = 0.8f, p.top_k = 40, p.seed = 3;  // device kFull
        if (i == 5) p.ignore_eos = false, p.min_tokens = 4;          // kFull for 4 tokens, then kGreedy
        if (i == 6) p.temperature = 1.0f, p.seed = 11, p.logprobs = 3, p.presence_penalty = 0.4f;
        params.push_back(p);
    }
    for (int i = 0; i < 4; ++i) {  // seeded temperature 1.0 (the served default), top_p, min_p
        SamplingParams p;
        p.temperature = 1.0f;
        p.seed = 100 + uint64_t(i);
        p.max_tokens = 12;
        p.ignore_eos = true;
        if (i == 1) p.top_p = 0.9f;
        if (i == 2) p.min_p = 0.05f, p.frequency_penalty = 0.5f;
        if (i == 3) p.temperature = 0.6f, p.top_k = 5, p.top_p = 0.8f;
        params.push_back(p);
    }
    std::mt19937 g(9);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {1, 5, 37, 90, 3, 64, 17, 9, 21, 2, 44}) {
        std::vector<int32_t> p(static_cast<size_t>(len));
        for (auto& t : p) t = int32_t(2 + g() % 20000);
        prompts.push_back(p);
    }
    std::vector<std::vector<float>> lps[2];
    auto serve = [&](bool device, int64_t& n_dev) {
        EngineConfig cfg;
        cfg.sched.max_running = 8;
        cfg.sched.max_tokens_per_step = 48;
        cfg.sched.max_prefill_chunk = 32;
        cfg.page_shuffle_seed = 77;
        cfg.device_sampling = device;
        EngineStats stats;
        EngineCore core(**runner, cfg, stats);
        std::vector<std::shared_ptr<Sink>> sinks;
        for (size_t i = 0; i < prompts.size(); ++i) {
            auto s = std::make_shared<Sink>();
            sinks.push_back(s);
            GenRequest r{.id = i + 1, .prompt = prompts[i], .params = params[i], .sink = s};
            EXPECT_TRUE(core.add(std::move(r)).is_ok());
        }
        n_dev = 0;
        for (int guard = 0; core.has_work() && guard < 10000; ++guard) n_dev += core.step().n_device_sampled;
        std::vector<std::vector<int32_t>> out;
        for (auto& s : sinks) {
            EXPECT_TRUE(s->error.empty()) << s->error;
            out.push_back(s->tokens);
            lps[device].push_back(s->logprobs);
        }
        return out;
    };
    int64_t dev_on = 0, dev_off = 0;
    const auto on = serve(true, dev_on), off = serve(false, dev_off);
    int64_t total = 0;
    for (const auto& t : on) total += int64_t(t.size());
    EXPECT_EQ(on, off);
    EXPECT_EQ(dev_off, 0);
    EXPECT_EQ(dev_on, total);  // every row: kGreedy or kFull
    for (size_t i = 0; i < lps[0].size(); ++i) {
        ASSERT_EQ(lps[0][i].size(), lps[1][i].size()) << "request " << i;
        for (size_t k = 0; k < lps[0][i].size(); ++k) EXPECT_NEAR(lps[0][i][k], lps[1][i][k], 1e-4);
    }
    EXPECT_FALSE(lps[1][6].empty());
    int same = 0;
    for (size_t i = 0; i < on.size(); ++i) same += on[i] == off[i];
    std::printf(
        "[engine cuda device sampling] %zu requests (greedy, penalties, seeded temperature / top-k / top-p / min-p, "
        "logprobs, min_tokens): %lld of %lld "
        "tokens sampled on the device; %d/%zu outputs identical to device sampling off\n",
        on.size(), (long long)dev_on, (long long)total, same, on.size());
}

// Informational (docs/perf/ledger-ops6.md): wall time per decode step (graphs on) of the built-in
// tiny model (vocab 129,280) when the host gets every logits row and takes the argmax itself vs.
// when the runner returns device-greedy ids. Modes alternate per repetition (ABAB...) so drift
// hits both; median and range over the repetitions.
TEST(CudaSamplingPerf, DecodeStepHostLogitsVsDeviceGreedy) {
    SKIP_WITHOUT_GPU();
    auto model = tiny();
    CudaRunnerOptions o;
    o.n_pages = 6000;
    o.verbose = false;
    auto runner = make_cuda_runner(model, "", o);
    ASSERT_TRUE(runner.is_ok());
    ModelRunner& R = **runner;
    const int64_t V = model->config().vocab_size;
    const int reps = 5, steps = 30;
    for (int B : {1, 8, 32}) {
        std::vector<Seq> seqs(B);
        std::vector<std::vector<int32_t>> chunks(B);
        std::mt19937 g(B);
        int64_t next_page = o.n_pages - 1;
        for (int i = 0; i < B; ++i) {
            seqs[i] = {i + 1, table_for(R, 16 + 5 + 2 * reps * steps + 8, next_page), 0};
            for (int k = 0; k < 16; ++k) chunks[i].push_back(int32_t(g() % uint32_t(V)));
        }
        auto run_step = [&](bool device) {
            const std::vector<DeviceSample> modes(B, device ? DeviceSample::kGreedy : DeviceSample::kNone);
            StepOutput out;
            const Status s = R.forward_sampled(batch_of(seqs, chunks, modes, std::vector<bool>(B, true)), out);
            EXPECT_TRUE(s.is_ok()) << s.to_string();
            for (int i = 0; i < B; ++i) {
                seqs[i].pos += int64_t(chunks[i].size());
                chunks[i] = {device ? out.tokens[i] : host_greedy(std::move(out.logits[i]))};
            }
        };
        for (int i = 0; i < 6; ++i) run_step(i % 2 == 1);  // prefill + warm-up (graphs captured)
        std::vector<double> ms[2];
        for (int rep = 0; rep < 2 * reps; ++rep) {
            const bool device = rep % 2 == 1;
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < steps; ++i) run_step(device);
            ms[device].push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps);
        }
        for (int d = 0; d < 2; ++d) {
            auto v = ms[d];
            std::sort(v.begin(), v.end());
            std::printf("[perf decode step] B=%2d %-22s median %.3f ms (min %.3f, max %.3f) over %d x %d steps\n", B,
                        d ? "device greedy ids" : "host logits + argmax", v[v.size() / 2], v.front(), v.back(), reps,
                        steps);
        }
    }
}

}  // namespace
}  // namespace dsv4
