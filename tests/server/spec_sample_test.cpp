// Speculative decoding's acceptance rule (sample_token_with_draft, issue 24): the emitted token is
// sample_token's own token at the same (seed, stream, position) whatever the draft, and the draft
// is accepted iff it is that token. What that implies is checked too: the emitted tokens follow the
// target distribution (a chi-square test over 40,000 seeds, deterministic draws so the test never
// flakes, against the analytic distribution, for a likely draft, an unlikely one and one that top-k
// leaves out) and a draft is accepted with probability p(draft), the rate of rejection sampling with
// a one-hot proposal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "sample/sampler.h"

namespace dsv4 {
namespace {

const std::vector<float> kLogits = {1.0f, 2.5f, 0.3f, -1.0f, 2.2f, 0.0f, 1.7f, -0.5f};

// softmax(logits / T) over the top_k largest logits (top_k 0: all).
std::vector<double> target(float temperature, int top_k) {
    std::vector<int> order(kLogits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [](int a, int b) { return kLogits[size_t(a)] > kLogits[size_t(b)]; });
    const size_t keep = top_k > 0 ? size_t(top_k) : order.size();
    std::vector<double> p(kLogits.size(), 0.0);
    double total = 0;
    for (size_t i = 0; i < keep; ++i)
        total += p[size_t(order[i])] = std::exp(double(kLogits[size_t(order[i])]) / temperature);
    for (double& x : p) x /= total;
    return p;
}

struct Tally {
    std::vector<int> count = std::vector<int>(kLogits.size(), 0);
    int accepted = 0;
};

Tally run(float temperature, int top_k, int32_t draft, int n) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    PenaltyState pen;
    Tally t;
    for (int s = 0; s < n; ++s) {
        std::vector<float> row = kLogits;
        const SampleContext ctx{.seed = uint64_t(1000 + s), .stream = 0, .position = 3};
        const DraftVerdict v = sample_token_with_draft(row, p, pen, ctx, draft);
        ++t.count[size_t(v.sample.token)];
        t.accepted += v.accepted;
        if (v.accepted) EXPECT_EQ(v.sample.token, draft);
    }
    return t;
}

double chi_square(const Tally& t, const std::vector<double>& p, int n) {
    double chi = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] == 0) {
            EXPECT_EQ(t.count[i], 0) << "token " << i << " is outside the kept set";
            continue;
        }
        const double e = p[i] * n;
        chi += (t.count[i] - e) * (t.count[i] - e) / e;
    }
    return chi;
}

TEST(SpeculativeSample, TokensFollowTheTargetDistributionWhateverTheDraft) {
    const int n = 40000;
    struct Case {
        float temperature;
        int top_k;
        int32_t draft;
    };
    // Token 1 is the most likely, 7 unlikely; with top_k 4 token 3 is not kept at all.
    for (const Case c : {Case{1.0f, 0, 1}, Case{1.0f, 0, 7}, Case{0.7f, 4, 3}, Case{0.7f, 4, 4}}) {
        const std::vector<double> p = target(c.temperature, c.top_k);
        const Tally t = run(c.temperature, c.top_k, c.draft, n);
        // At most 7 degrees of freedom: P(chi2 > 30) < 1e-4.
        EXPECT_LT(chi_square(t, p, n), 30.0) << "T " << c.temperature << " top_k " << c.top_k << " draft " << c.draft;
        // The draft is accepted with probability p(draft): within 5 standard deviations.
        const double pd = p[size_t(c.draft)], sd = std::sqrt(pd * (1 - pd) / n);
        EXPECT_NEAR(double(t.accepted) / n, pd, 5 * sd + 1e-9) << "draft " << c.draft;
    }
}

TEST(SpeculativeSample, GreedyAcceptsExactlyTheArgmax) {
    SamplingParams p;
    p.temperature = 0;
    PenaltyState pen;
    for (int32_t d = 0; d < int32_t(kLogits.size()); ++d) {
        std::vector<float> row = kLogits;
        const DraftVerdict v = sample_token_with_draft(row, p, pen, SampleContext{}, d);
        EXPECT_EQ(v.sample.token, 1);
        EXPECT_EQ(v.accepted, d == 1);
    }
}

// The token is the one sample_token draws without a draft (so a seeded output does not depend on
// which positions were drafts), and the draft is accepted iff it is that token.
TEST(SpeculativeSample, TheTokenIsSampleTokensWhateverTheDraft) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = 6;
    PenaltyState pen;
    int accepted = 0;
    for (int s = 0; s < 200; ++s)
        for (int32_t d = -1; d < int32_t(kLogits.size()); ++d) {
            std::vector<float> a = kLogits, b = kLogits;
            const SampleContext ctx{.seed = uint64_t(s), .stream = 2, .position = 11};
            const DraftVerdict v = sample_token_with_draft(a, p, pen, ctx, d);
            const SampleResult plain = sample_token(b, p, pen, ctx);
            EXPECT_EQ(v.sample.token, plain.token) << "seed " << s << " draft " << d;
            EXPECT_EQ(v.accepted, d >= 0 && d == plain.token);
            accepted += v.accepted;
        }
    EXPECT_EQ(accepted, 200);  // one draft of each seed's eight is the token
}

}  // namespace
}  // namespace dsv4
