// Tokenizer on the official DeepSeek-V4 tokenizer.json: known ids, added tokens, decode,
// round trips, invalid UTF-8, and the long-word merge path.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "tests/tokenizer/test_tokenizer_file.h"
#include "tokenizer/bpe_model.h"

namespace dsv4 {
namespace {

std::vector<int32_t> enc(const Tokenizer& t, std::string_view s) {
    auto r = t.encode(s);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? r.value() : std::vector<int32_t>{};
}

TEST(Tokenizer, KnownIdsFromDataReadme) {
    DSV4_REQUIRE_TOKENIZER(tok);
    EXPECT_EQ(enc(*tok, "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜></think>"),
              (std::vector<int32_t>{0, 128803, 19923, 128804, 128822}));
    EXPECT_EQ(enc(*tok, "Hello, my dog is cute"), (std::vector<int32_t>{19923, 14, 1026, 6397, 344, 33125}));
    EXPECT_EQ(enc(*tok, "你好，世界！12345 ナルト"),
              (std::vector<int32_t>{30594, 303, 3427, 1175, 6895, 1883, 223, 27071, 120468}));
}

TEST(Tokenizer, VocabAndSpecialTokens) {
    DSV4_REQUIRE_TOKENIZER(tok);
    EXPECT_EQ(tok->vocab_size(), 129280);
    EXPECT_EQ(tok->token_to_id("<｜begin▁of▁sentence｜>"), 0);
    EXPECT_EQ(tok->token_to_id("<｜User｜>"), 128803);
    EXPECT_EQ(tok->token_to_id("Hello"), 19923);
    EXPECT_FALSE(tok->token_to_id("no such token").has_value());
    EXPECT_EQ(tok->id_to_token(128821), "<think>");
    EXPECT_EQ(tok->id_to_token(14), ",");
    EXPECT_EQ(tok->id_to_token(-1), "");
    EXPECT_EQ(tok->id_to_token(129280), "");
    EXPECT_TRUE(tok->is_special(0));
    EXPECT_TRUE(tok->is_special(1));
    EXPECT_FALSE(tok->is_special(128803));  // <｜User｜> is an added but not special token
    EXPECT_FALSE(tok->is_special(19923));
    EXPECT_FALSE(tok->is_special(-5));
}

TEST(Tokenizer, DecodeSkipsOnlySpecialTokens) {
    DSV4_REQUIRE_TOKENIZER(tok);
    const std::vector<int32_t> ids = {0, 19923, 128803, 1};
    EXPECT_EQ(tok->decode(ids, false), "<｜begin▁of▁sentence｜>Hello<｜User｜><｜end▁of▁sentence｜>");
    EXPECT_EQ(tok->decode(ids, true), "Hello<｜User｜>");
    const std::vector<int32_t> unknown = {19923, 999999, -3};
    EXPECT_EQ(tok->decode(unknown, false), "Hello");
}

TEST(Tokenizer, RoundTripRegressionStrings) {
    DSV4_REQUIRE_TOKENIZER(tok);
    for (const char* s : {"rfid501.go",
                          "7",
                          "12",
                          "123",
                          "1234",
                          "1234567",
                          "0.0001",
                          "2026-08-26",
                          "v4.0.31",
                          "١٢٣",
                          "３４５",
                          "x=10000;",
                          "hello world",
                          "  two leading spaces",
                          "tab\there",
                          "line1\nline2",
                          "中文 与 English",
                          "<｜User｜>hi<｜Assistant｜>",
                          "",
                          "a\r\n\r\n  b  ",
                          "👨‍👩‍👧‍👦 👍🏽 e\u0301"}) {
        const auto ids = enc(*tok, s);
        EXPECT_EQ(tok->decode(ids, false), s);
    }
    EXPECT_TRUE(enc(*tok, "").empty());
}

TEST(Tokenizer, DigitsAreGroupedByThree) {  // B17
    DSV4_REQUIRE_TOKENIZER(tok);
    const auto ids = enc(*tok, "1234567");
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(tok->decode(std::span(ids).subspan(0, 1), false), "123");
    EXPECT_EQ(tok->decode(std::span(ids).subspan(1, 1), false), "456");
    EXPECT_EQ(tok->decode(std::span(ids).subspan(2, 1), false), "7");
}

TEST(Tokenizer, InvalidUtf8IsReplacedNotRejected) {
    DSV4_REQUIRE_TOKENIZER(tok);
    EXPECT_EQ(enc(*tok,
                  "a\xFF"
                  "b"),
              enc(*tok,
                  "a\xEF\xBF\xBD"
                  "b"));
    EXPECT_EQ(enc(*tok, "\xF0\x9F\x98"), enc(*tok, "\xEF\xBF\xBD"));
    EXPECT_EQ(enc(*tok, std::string_view("\0x\0", 3)).size(), 3u);
}

TEST(Tokenizer, DecodeOfSplitCharacterIsReplacement) {
    DSV4_REQUIRE_TOKENIZER(tok);
    const auto ids = enc(*tok, "🙂");
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(tok->decode(std::span(ids).first(1), false), "\xEF\xBF\xBD");
}

TEST(Tokenizer, HeapAndQuadraticMergeAgree) {
    // Long words use the heap loop, short ones the quadratic loop: both must pick the same
    // merges, including overlapping pairs like "a a a".
    BpeSpec spec;
    spec.vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}, {"aaa", 7}, {"ca", 8}};
    spec.merges = {{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "a"}, {"aa", "a"}, {"c", "a"}};
    auto model = BpeModel::create(spec);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    std::mt19937 rng(7);
    for (int trial = 0; trial < 2000; ++trial) {
        std::vector<int32_t> ids(1 + rng() % 40);
        for (auto& x : ids) x = static_cast<int32_t>(rng() % 3);
        auto q = ids;
        auto h = ids;
        model->merge_quadratic(q);
        model->merge_heap(h);
        ASSERT_EQ(q, h) << "trial " << trial;
    }
}

TEST(Tokenizer, LongWordsMatchShortWordPath) {
    DSV4_REQUIRE_TOKENIZER(tok);
    // A 300-letter word goes through the heap loop; it must decode back exactly.
    std::string word;
    std::mt19937 rng(3);
    for (int i = 0; i < 300; ++i) word.push_back(static_cast<char>('a' + rng() % 26));
    const auto ids = enc(*tok, word);
    EXPECT_EQ(tok->decode(ids, false), word);
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
    DSV4_REQUIRE_TOKENIZER(tok);
    // The word cache is shared between threads; results must not depend on interleaving.
    std::vector<std::string> texts;
    for (int i = 0; i < 200; ++i)
        texts.push_back("word" + std::to_string(i * 7919) + " 東京 <think>x</think> 👍🏽");
    std::vector<std::vector<int32_t>> want;
    for (const auto& t : texts) want.push_back(enc(*tok, t));
    std::vector<std::thread> threads;
    std::vector<int> bad(4, 0);
    for (int k = 0; k < 4; ++k) {
        threads.emplace_back([&, k] {
            for (size_t i = 0; i < texts.size(); ++i) {
                auto r = tok->encode(texts[(i + static_cast<size_t>(k) * 50) % texts.size()]);
                if (!r.is_ok() || *r != want[(i + static_cast<size_t>(k) * 50) % texts.size()])
                    ++bad[static_cast<size_t>(k)];
            }
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(bad, std::vector<int>(4, 0));
}

TEST(Tokenizer, CopiesShareStateAndAreUsable) {
    DSV4_REQUIRE_TOKENIZER(tok);
    Tokenizer copy = *tok;
    EXPECT_EQ(enc(copy, "Hello, my dog is cute"), enc(*tok, "Hello, my dog is cute"));
}

}  // namespace
}  // namespace dsv4
