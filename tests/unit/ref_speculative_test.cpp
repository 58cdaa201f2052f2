// Greedy speculative decoding on the CPU reference (model/ref_speculative.h): the same tokens as plain
// greedy decoding for k = 1..3 with MTP drafts (on random weights almost every draft is rejected, so
// nearly every cycle rolls the state back), with self drafts (every draft accepted: accept length k + 1)
// and with a wrong last draft (every cycle a partial acceptance), across the tiny model's window of
// 128 positions and its ratio-4 and ratio-128 compression boundaries. Against transformers' greedy
// tokens: tests/golden (GoldenTest.SpeculativeGreedyMatchesTransformers).
#include <gtest/gtest.h>

#include "model/ref_speculative.h"
#include "tests/unit/tiny_ref_model.h"

namespace dsv4 {
namespace {

using testing_tiny::max_abs_diff;
const RefModel& tiny_model() { return testing_tiny::tiny_ref_model(); }
std::vector<int32_t> prompt_of(int n, uint64_t seed) { return testing_tiny::random_token_ids(n, seed); }

// 120 prompt tokens + 24 new ones cross position 127 (the window wraps, an HCA row closes) and six
// CSA rows close on the way.
constexpr int kPrompt = 120, kNew = 24;
// Same logits as plain greedy up to the chunk size's last bits (RefModel: ~1e-6); a ring row or a
// compressor slot left from a rejected draft moves them by far more, even where the argmax holds.
constexpr double kLogitTol = 2e-5;

TEST(RefSpeculative, MtpDraftsGiveThePlainGreedyTokens) {
    const auto prompt = prompt_of(kPrompt, 21);
    std::vector<float> want_l, got_l;
    auto want = ref_greedy(tiny_model(), prompt, kNew, &want_l);
    ASSERT_TRUE(want.is_ok()) << want.status().to_string();
    for (int k = 1; k <= 3; ++k) {
        RefSpecStats st;
        auto got = ref_speculative_greedy(tiny_model(), prompt, kNew, {k, DraftSource::kMtp, {}}, &st, &got_l);
        ASSERT_TRUE(got.is_ok()) << got.status().to_string();
        EXPECT_EQ(*got, *want) << "k = " << k;
        EXPECT_LT(max_abs_diff(got_l, want_l), kLogitTol) << "k = " << k;
        EXPECT_EQ(st.drafted, int64_t(k) * st.verify_steps);
        EXPECT_LE(st.accepted, st.drafted);
        EXPECT_GE(st.verify_steps, (kNew - 1 + k) / (k + 1));
        std::printf("[spec k=%d mtp] %lld verify steps, accept length %.2f, %lld rollbacks\n", k,
                    (long long)st.verify_steps, st.accept_length(), (long long)st.rollbacks);
    }
}

TEST(RefSpeculative, SelfDraftsAreAllAcceptedAndGiveThePlainGreedyTokens) {
    const auto prompt = prompt_of(kPrompt, 22);
    std::vector<float> want_l, got_l;
    auto want = ref_greedy(tiny_model(), prompt, kNew, &want_l);
    ASSERT_TRUE(want.is_ok());
    for (int k = 1; k <= 3; ++k) {
        RefSpecStats st;
        auto got = ref_speculative_greedy(tiny_model(), prompt, kNew, {k, DraftSource::kSelf, {}}, &st, &got_l);
        ASSERT_TRUE(got.is_ok()) << got.status().to_string();
        EXPECT_EQ(*got, *want) << "k = " << k;
        EXPECT_LT(max_abs_diff(got_l, want_l), kLogitTol) << "k = " << k;
        EXPECT_EQ(st.accepted, st.drafted) << "k = " << k;  // the drafts are the target's own tokens
        EXPECT_EQ(st.rollbacks, 0);
        EXPECT_DOUBLE_EQ(st.accept_length(), double(k + 1));
    }
}

// Every cycle's last draft made wrong: j = k - 1 drafts accepted, the state rolled back past them.
TEST(RefSpeculative, PartialAcceptanceRollsBackToTheLastAcceptedToken) {
    const auto prompt = prompt_of(kPrompt, 23);
    std::vector<float> want_l, got_l;
    auto want = ref_greedy(tiny_model(), prompt, kNew, &want_l);
    ASSERT_TRUE(want.is_ok());
    const int32_t V = int32_t(tiny_model_config().vocab_size);
    for (int k = 1; k <= 3; ++k) {
        RefSpecOptions o{k, DraftSource::kSelf, [V](std::vector<int32_t>& d) { d.back() = (d.back() + 1) % V; }};
        RefSpecStats st;
        auto got = ref_speculative_greedy(tiny_model(), prompt, kNew, o, &st, &got_l);
        ASSERT_TRUE(got.is_ok()) << got.status().to_string();
        EXPECT_EQ(*got, *want) << "k = " << k;
        EXPECT_LT(max_abs_diff(got_l, want_l), kLogitTol) << "k = " << k;
        EXPECT_EQ(st.accepted, int64_t(k - 1) * st.verify_steps) << "k = " << k;
        EXPECT_EQ(st.rollbacks, st.verify_steps);
    }
}

TEST(RefSpeculative, ErrorsSayWhatIsWrong) {
    const auto prompt = prompt_of(4, 24);
    EXPECT_FALSE(ref_speculative_greedy(tiny_model(), prompt, 4, {0, DraftSource::kMtp, {}}).is_ok());
    EXPECT_FALSE(ref_speculative_greedy(tiny_model(), prompt, 4, {9, DraftSource::kMtp, {}}).is_ok());
    EXPECT_FALSE(ref_speculative_greedy(tiny_model(), {}, 4, {1, DraftSource::kMtp, {}}).is_ok());
    EXPECT_FALSE(ref_speculative_greedy(tiny_model(), prompt, 0, {1, DraftSource::kMtp, {}}).is_ok());
    EXPECT_FALSE(ref_greedy(tiny_model(), std::vector<int32_t>{-1}, 2).is_ok());
    const ModelConfig c0 = testing_tiny::tiny_config_without_mtp();
    const RefModel plain(c0, ModelWeights::random(c0, 1));
    auto r = ref_speculative_greedy(plain, prompt, 4, {1, DraftSource::kMtp, {}});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("MTP"), std::string::npos) << r.status().to_string();
    EXPECT_TRUE(ref_speculative_greedy(plain, prompt, 4, {2, DraftSource::kSelf, {}}).is_ok());
}

}  // namespace
}  // namespace dsv4
