// cuda::sample_rows (DeviceSample::kFull) against the host sampler (sample_token, the reference)
// on the same logits rows at the real vocabulary size: for each parameter combination, the same
// token for every row and seed, logprobs within 1e-4, and the logits rows restored after the
// penalties. Row kinds: spread (N(0, 3^2)), peaked, quantised to 0.5 (many exact ties, which both
// sides break by id) and partly -inf.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/ops/sample_rows.h"
#include "sample/sampler.h"
#include "sched/device_sample.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"

namespace dsv4 {
namespace {

constexpr int kV = 129280;
constexpr int kRows = 48;

std::vector<float> make_row(int kind, std::mt19937& g) {
    std::normal_distribution<float> n(0.0f, kind == 0 ? 3.0f : 1.0f);
    std::vector<float> r(kV);
    for (auto& x : r) x = n(g);
    if (kind == 1)
        for (int j = 0; j < 8; ++j) r[g() % kV] += 12.0f + float(j);
    if (kind == 2)
        for (auto& x : r) x = std::round(x * 4.0f) * 0.5f;
    if (kind == 3)
        for (int j = 0; j < kV / 10; ++j) r[g() % kV] = -INFINITY;
    return r;
}

// Row r's kernel arguments from its flattened parameters; its penalty tokens appended to toks.
cuda::SampleRowArgs row_args(const DeviceSampleParams& d, int r, std::vector<cuda::SamplePenaltyToken>& toks) {
    cuda::SampleRowArgs a;
    a.row = r;
    a.temperature = d.temperature, a.top_p = d.top_p, a.min_p = d.min_p, a.top_k = d.top_k;
    a.repetition_penalty = d.repetition_penalty, a.presence_penalty = d.presence_penalty;
    a.frequency_penalty = d.frequency_penalty, a.logprobs = d.logprobs;
    a.seed = d.seed, a.stream = d.stream, a.position = d.position;
    a.tok_begin = int32_t(toks.size()), a.n_tok = int32_t(d.penalty_tokens.size());
    for (const auto& t : d.penalty_tokens)
        toks.push_back({t.token, t.output_count, uint8_t(t.seen), uint8_t(t.masked), t.bias});
    return a;
}

struct Case {
    std::string name;
    SamplingParams p;
    bool suppress = false;
};

std::vector<Case> cases() {
    std::vector<Case> c;
    auto add = [&](std::string n, auto f, bool sup = false) {
        SamplingParams p;
        p.ignore_eos = true;
        f(p);
        c.push_back({std::move(n), p, sup});
    };
    add("t1", [](SamplingParams& p) { p.temperature = 1.0f; });
    add("t0.7 top_p0.9", [](SamplingParams& p) { p.temperature = 0.7f, p.top_p = 0.9f; });
    add("top_k50", [](SamplingParams& p) { p.top_k = 50; });
    add("top_k1", [](SamplingParams& p) { p.top_k = 1; });
    add("t0.9 min_p0.1", [](SamplingParams& p) { p.temperature = 0.9f, p.min_p = 0.1f; });
    add("top_k40 top_p0.8 min_p0.02",
        [](SamplingParams& p) { p.temperature = 0.8f, p.top_k = 40, p.top_p = 0.8f, p.min_p = 0.02f; });
    add("t1e-3", [](SamplingParams& p) { p.temperature = 1e-3f; });
    add("t2 top_p0.95", [](SamplingParams& p) { p.temperature = 2.0f, p.top_p = 0.95f; });
    add("penalties",
        [](SamplingParams& p) { p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.3f; });
    add("penalties top_p0.7",
        [](SamplingParams& p) { p.repetition_penalty = 0.8f, p.frequency_penalty = -0.7f, p.top_p = 0.7f; });
    add("greedy penalties",
        [](SamplingParams& p) { p.temperature = 0, p.repetition_penalty = 1.5f, p.frequency_penalty = 0.4f; });
    add("logprobs5 top_p0.9", [](SamplingParams& p) { p.logprobs = 5, p.top_p = 0.9f; });
    add("greedy logprobs20", [](SamplingParams& p) { p.temperature = 0, p.logprobs = 20; });
    add("logprobs0 penalties", [](SamplingParams& p) { p.logprobs = 0, p.presence_penalty = 1.5f; });
    add(
        "stop masking",
        [](SamplingParams& p) {
            p.ignore_eos = false, p.stop_token_ids = {5, 7, 11};
        },
        true);
    add("top_k>V", [](SamplingParams& p) { p.top_k = kV + 5; });
    add("top_p tiny", [](SamplingParams& p) { p.top_p = 1e-4f; });
    add("logit_bias", [](SamplingParams& p) { p.logit_bias = {{3, 5.5f}, {9, -100.0f}, {kV - 1, 2.25f}}; });
    add("greedy logit_bias penalties", [](SamplingParams& p) {
        p.temperature = 0, p.repetition_penalty = 1.2f, p.logit_bias = {{2, 7.0f}, {4, -3.0f}};
    });
    return c;
}

TEST(CudaSampleRows, SameTokensAsTheHostSampler) {
    SKIP_WITHOUT_GPU();
    std::mt19937 g(123);
    std::vector<std::vector<float>> rows;
    for (int r = 0; r < kRows; ++r) rows.push_back(make_row(r % 4, g));
    // Per row: a prompt and an output with repeats, the output holding the row's best tokens.
    std::vector<PenaltyState> pen(kRows);
    for (int r = 0; r < kRows; ++r) {
        std::vector<int32_t> prompt, output;
        for (int j = 0; j < 60; ++j) prompt.push_back(int32_t(g() % 300));
        int32_t best = 0;
        for (int i = 0; i < kV; ++i)
            if (rows[r][i] > rows[r][best]) best = i;
        for (int j = 0; j < 3; ++j) output.push_back(best);
        for (int j = 0; j < 30; ++j) output.push_back(int32_t(g() % 400));
        pen[r].reset(prompt, output);
    }
    float *d_logits = nullptr, *d_w = nullptr, *d_saved = nullptr;
    cuda::SampleRowArgs* d_args = nullptr;
    cuda::SamplePenaltyToken* d_toks = nullptr;
    cuda::SampleRowOut* d_out = nullptr;
    const size_t max_toks = 1 << 16;
    ASSERT_EQ(cudaMalloc(&d_logits, size_t(kRows) * kV * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_w, size_t(kRows) * kV * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_saved, max_toks * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_args, kRows * sizeof(cuda::SampleRowArgs)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_toks, max_toks * sizeof(cuda::SamplePenaltyToken)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, kRows * sizeof(cuda::SampleRowOut)), cudaSuccess);
    std::vector<float> flat(size_t(kRows) * kV);
    for (int r = 0; r < kRows; ++r) std::copy(rows[r].begin(), rows[r].end(), flat.begin() + size_t(r) * kV);
    ASSERT_EQ(cudaMemcpy(d_logits, flat.data(), flat.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);

    int64_t n_rows = 0, n_mismatch = 0;
    double max_lp = 0;
    for (const Case& c : cases()) {
        for (uint64_t seed_base : {1ull, 77ull, 123456789ull}) {
            std::vector<cuda::SampleRowArgs> args(kRows);
            std::vector<cuda::SamplePenaltyToken> toks;
            std::vector<SampleResult> host(kRows);
            for (int r = 0; r < kRows; ++r) {
                const SampleContext ctx{.seed = seed_base * 1000 + uint64_t(r),
                                        .stream = uint64_t(r % 3),
                                        .position = int64_t(r * 7 + seed_base % 5),
                                        .suppress_stops = c.suppress,
                                        .eos_token = 1};
                std::vector<float> copy = rows[r];
                host[r] = sample_token(copy, c.p, pen[r], ctx);
                const auto pt = penalty_tokens(c.p, pen[r], ctx);
                args[r] = row_args(device_sample_params(c.p, ctx, pt), r, toks);
            }
            ASSERT_LE(toks.size(), max_toks);
            ASSERT_EQ(cudaMemcpy(d_args, args.data(), args.size() * sizeof(args[0]), cudaMemcpyHostToDevice),
                      cudaSuccess);
            if (!toks.empty()) {
                ASSERT_EQ(cudaMemcpy(d_toks, toks.data(), toks.size() * sizeof(toks[0]), cudaMemcpyHostToDevice),
                          cudaSuccess);
            }
            ASSERT_EQ(cuda::sample_rows(d_logits, kV, d_args, kRows, d_toks, d_w, d_saved, d_out, nullptr),
                      cudaSuccess);
            std::vector<cuda::SampleRowOut> out(kRows);
            ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * sizeof(out[0]), cudaMemcpyDeviceToHost), cudaSuccess);
            for (int r = 0; r < kRows; ++r) {
                ++n_rows;
                const bool same = out[r].token == host[r].token;
                n_mismatch += !same;
                EXPECT_TRUE(same) << c.name << " seed " << seed_base << " row " << r << " (kind " << r % 4
                                  << "): device " << out[r].token << " host " << host[r].token;
                if (c.p.top_k == 1) {
                    std::vector<float> copy = rows[r];
                    SamplingParams gp = c.p;
                    gp.temperature = 0, gp.top_k = 0;
                    EXPECT_EQ(out[r].token, sample_token(copy, gp, pen[r], {}).token) << "top_k 1 != greedy, row " << r;
                }
                if (c.suppress) {
                    EXPECT_NE(out[r].token, 1);
                    for (int32_t s : c.p.stop_token_ids) EXPECT_NE(out[r].token, s);
                }
                if (c.p.logprobs >= 0) {
                    EXPECT_NEAR(out[r].logprob, host[r].logprob, 1e-4) << c.name << " row " << r;
                    max_lp = std::max(max_lp, double(std::fabs(out[r].logprob - host[r].logprob)));
                    ASSERT_EQ(out[r].n_top, int(host[r].top.size())) << c.name << " row " << r;
                    for (int t = 0; t < out[r].n_top; ++t) {
                        EXPECT_EQ(out[r].top_token[t], host[r].top[t].token) << c.name << " row " << r << " top " << t;
                        EXPECT_NEAR(out[r].top_logprob[t], host[r].top[t].logprob, 1e-4);
                        max_lp = std::max(max_lp, double(std::fabs(out[r].top_logprob[t] - host[r].top[t].logprob)));
                    }
                }
            }
        }
    }
    std::vector<float> back(flat.size());
    ASSERT_EQ(cudaMemcpy(back.data(), d_logits, back.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(back == flat) << "sample_rows did not restore the penalised logits";
    std::printf(
        "[sample_rows] %zu cases x 3 seeds x %d rows (V=%d): %lld/%lld tokens equal to the host sampler; "
        "max |logprob diff| %.3g\n",
        cases().size(), kRows, kV, (long long)(n_rows - n_mismatch), (long long)n_rows, max_lp);
    cudaFree(d_logits), cudaFree(d_w), cudaFree(d_saved), cudaFree(d_args), cudaFree(d_toks), cudaFree(d_out);
}

// Overlapped scheduling: a row whose latest output token is pending (SampleRowArgs::pending_index)
// gets penalty entries built without it; the kernel counts it as the host sampler would have.
// Against sample_token with that token added to the PenaltyState: same tokens, same logprobs, for
// a pending token already in the list (a repeat, a prompt token) and one that is not, under each
// penalty kind. The pending token is each row's best raw token, so whether it is counted decides.
TEST(CudaSampleRows, PendingTokenCountedLikeTheHost) {
    SKIP_WITHOUT_GPU();
    std::mt19937 g(321);
    constexpr int R = 24;
    std::vector<std::vector<float>> rows;
    for (int r = 0; r < R; ++r) rows.push_back(make_row(1, g));  // peaked rows
    std::vector<SamplingParams> ps(4);
    ps[0].temperature = 0, ps[0].repetition_penalty = 1.7f;
    ps[1].temperature = 0, ps[1].frequency_penalty = 4.0f, ps[1].presence_penalty = 3.0f;
    ps[2].temperature = 0.8f, ps[2].repetition_penalty = 1.4f, ps[2].presence_penalty = 2.0f, ps[2].logprobs = 3;
    ps[3].temperature = 0, ps[3].repetition_penalty = 1.5f, ps[3].logit_bias = {{7, 1.5f}};
    float *d_logits = nullptr, *d_w = nullptr, *d_saved = nullptr;
    int32_t* d_step_tokens = nullptr;
    cuda::SampleRowArgs* d_args = nullptr;
    cuda::SamplePenaltyToken* d_toks = nullptr;
    cuda::SampleRowOut* d_out = nullptr;
    const size_t max_toks = 1 << 14;
    ASSERT_EQ(cudaMalloc(&d_logits, size_t(R) * kV * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_w, size_t(R) * kV * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_saved, max_toks * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_step_tokens, 4 * R * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_args, R * sizeof(cuda::SampleRowArgs)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_toks, max_toks * sizeof(cuda::SamplePenaltyToken)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, R * sizeof(cuda::SampleRowOut)), cudaSuccess);
    std::vector<float> flat(size_t(R) * kV);
    for (int r = 0; r < R; ++r) std::copy(rows[r].begin(), rows[r].end(), flat.begin() + size_t(r) * kV);
    ASSERT_EQ(cudaMemcpy(d_logits, flat.data(), flat.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    int n_rows = 0, n_changed = 0;
    for (size_t pi = 0; pi < ps.size(); ++pi) {
        std::vector<cuda::SampleRowArgs> args(R);
        std::vector<cuda::SamplePenaltyToken> toks;
        std::vector<int32_t> step_tokens(4 * R, 0);
        std::vector<SampleResult> host(R);
        for (int r = 0; r < R; ++r) {
            int32_t best = 0;
            for (int i = 0; i < kV; ++i)
                if (rows[r][i] > rows[r][best]) best = i;
            // Row kinds by r % 3: the pending token already in the output, in the prompt, or new.
            std::vector<int32_t> prompt, output;
            for (int j = 0; j < 20; ++j) prompt.push_back(int32_t(100 + g() % 300));
            for (int j = 0; j < 10; ++j) output.push_back(int32_t(500 + g() % 300));
            if (r % 3 == 0) output.push_back(best);
            if (r % 3 == 1) prompt.push_back(best);
            PenaltyState before, after;
            before.reset(prompt, output);
            output.push_back(best);
            after.reset(prompt, output);
            const SampleContext ctx{.seed = 40 + uint64_t(r), .position = 11, .eos_token = 1};
            std::vector<float> copy = rows[r];
            host[r] = sample_token(copy, ps[pi], after, ctx);
            std::vector<float> copy2 = rows[r];
            n_changed += sample_token(copy2, ps[pi], before, ctx).token != host[r].token;
            const auto pt = penalty_tokens(ps[pi], before, ctx);
            args[r] = row_args(device_sample_params(ps[pi], ctx, pt), r, toks);
            args[r].pending_index = 4 * r + 3;
            step_tokens[size_t(args[r].pending_index)] = best;
        }
        ASSERT_EQ(cudaMemcpy(d_args, args.data(), args.size() * sizeof(args[0]), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_toks, toks.data(), toks.size() * sizeof(toks[0]), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_step_tokens, step_tokens.data(), step_tokens.size() * 4, cudaMemcpyHostToDevice),
                  cudaSuccess);
        ASSERT_EQ(cuda::sample_rows(d_logits, kV, d_args, R, d_toks, d_w, d_saved, d_out, nullptr, d_step_tokens),
                  cudaSuccess);
        std::vector<cuda::SampleRowOut> out(R);
        ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * sizeof(out[0]), cudaMemcpyDeviceToHost), cudaSuccess);
        for (int r = 0; r < R; ++r) {
            ++n_rows;
            EXPECT_EQ(out[r].token, host[r].token) << "params " << pi << " row " << r << " (kind " << r % 3 << ")";
            if (ps[pi].logprobs >= 0) {
                EXPECT_NEAR(out[r].logprob, host[r].logprob, 1e-4);
            }
        }
    }
    std::vector<float> back(flat.size());
    ASSERT_EQ(cudaMemcpy(back.data(), d_logits, back.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(back == flat) << "sample_rows did not restore the logits (pending token included)";
    EXPECT_GT(n_changed, n_rows / 4) << "the pending token's count rarely mattered: the test would not see it missing";
    std::printf(
        "[sample_rows] pending token counted on the device: %d rows equal to the host; its count changed "
        "%d of them\n",
        n_rows, n_changed);
    cudaFree(d_logits), cudaFree(d_w), cudaFree(d_saved), cudaFree(d_step_tokens), cudaFree(d_args), cudaFree(d_toks),
        cudaFree(d_out);
}

// Informational: sample_rows time per call for R rows of the full vocabulary (temperature 1.0,
// and temperature 0.7 + top_p 0.9), CUDA events over 20 calls after a warm-up.
TEST(CudaSampleRowsPerf, TimePerCall) {
    SKIP_WITHOUT_GPU();
    std::mt19937 g(5);
    for (int R : {1, 64, 256}) {
        std::vector<float> flat(size_t(R) * kV);
        std::normal_distribution<float> n(0.0f, 2.0f);
        for (auto& x : flat) x = n(g);
        float *d_logits = nullptr, *d_w = nullptr, *d_saved = nullptr;
        cuda::SampleRowArgs* d_args = nullptr;
        cuda::SampleRowOut* d_out = nullptr;
        ASSERT_EQ(cudaMalloc(&d_logits, flat.size() * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&d_w, flat.size() * 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&d_saved, 4), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&d_args, R * sizeof(cuda::SampleRowArgs)), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&d_out, R * sizeof(cuda::SampleRowOut)), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_logits, flat.data(), flat.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        for (int mode = 0; mode < 2; ++mode) {
            std::vector<cuda::SampleRowArgs> args(R);
            for (int r = 0; r < R; ++r) {
                args[r].row = r, args[r].seed = uint64_t(r), args[r].position = 3;
                if (mode == 1) args[r].temperature = 0.7f, args[r].top_p = 0.9f;
            }
            ASSERT_EQ(cudaMemcpy(d_args, args.data(), R * sizeof(args[0]), cudaMemcpyHostToDevice), cudaSuccess);
            for (int i = 0; i < 3; ++i)
                cuda::sample_rows(d_logits, kV, d_args, R, nullptr, d_w, d_saved, d_out, nullptr);
            cudaEvent_t a, b;
            cudaEventCreate(&a), cudaEventCreate(&b);
            cudaEventRecord(a);
            for (int i = 0; i < 20; ++i)
                cuda::sample_rows(d_logits, kV, d_args, R, nullptr, d_w, d_saved, d_out, nullptr);
            cudaEventRecord(b);
            ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
            float ms = 0;
            cudaEventElapsedTime(&ms, a, b);
            std::printf("[perf sample_rows] R=%3d %-18s %.1f us per call\n", R, mode ? "t0.7 top_p0.9" : "t1.0",
                        1000.0 * ms / 20);
            cudaEventDestroy(a), cudaEventDestroy(b);
        }
        cudaFree(d_logits), cudaFree(d_w), cudaFree(d_saved), cudaFree(d_args), cudaFree(d_out);
    }
}

}  // namespace
}  // namespace dsv4
