// Streaming pieces: lossy UTF-8 stream decoding, the incremental detokenizer (B20) and the
// stop-string matcher (B23).
#include <gtest/gtest.h>

#include "tests/tokenizer/test_tokenizer_file.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/stop_matcher.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

constexpr std::string_view kFffd = "\xEF\xBF\xBD";

TEST(Utf8, SanitizeUsesMaximalSubparts) {
    EXPECT_EQ(utf8::sanitize("abc"), "abc");
    EXPECT_EQ(utf8::sanitize("a\xFF"
                             "b"),
              "a\xEF\xBF\xBD"
              "b");
    // E2 82 is one incomplete sequence -> one U+FFFD.
    EXPECT_EQ(utf8::sanitize("\xE2\x82"), std::string(kFffd));
    // ED A0 80 (a surrogate): ED is a lead whose second byte must be <= 9F, so three U+FFFD.
    EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), std::string(kFffd) + std::string(kFffd) + std::string(kFffd));
    // Overlong C0 AF: C0 is never valid -> two U+FFFD.
    EXPECT_EQ(utf8::sanitize("\xC0\xAF"), std::string(kFffd) + std::string(kFffd));
    // F0 9F 98 then 'A': the incomplete emoji is one U+FFFD, 'A' survives.
    EXPECT_EQ(utf8::sanitize("\xF0\x9F\x98"
                             "A"),
              std::string(kFffd) + "A");
    EXPECT_TRUE(utf8::is_valid("😀 é 中"));
    EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));
}

TEST(Utf8, StreamDecoderMatchesWholeDecodingForEverySplit) {
    const std::string bytes =
        "a\xF0\x9F\x98\x80"
        "b\xE2\x82"
        "c\xC3\xA9\xFF\xF0\x9F";
    const std::string whole = utf8::sanitize(bytes);
    for (size_t cut1 = 0; cut1 <= bytes.size(); ++cut1) {
        for (size_t cut2 = cut1; cut2 <= bytes.size(); ++cut2) {
            utf8::StreamDecoder d;
            std::string out;
            d.push(std::string_view(bytes).substr(0, cut1), out);
            d.push(std::string_view(bytes).substr(cut1, cut2 - cut1), out);
            d.push(std::string_view(bytes).substr(cut2), out);
            d.finish(out);
            ASSERT_EQ(out, whole) << cut1 << "," << cut2;
        }
    }
}

TEST(IncrementalDetokenizer, NoReplacementForCharactersSplitAcrossTokens) {  // B20
    DSV4_REQUIRE_TOKENIZER(tok);
    const std::string text = "ok 👋🏽 家族 🇯🇵 é 🙂🙂 <｜User｜>x";
    auto ids = tok->encode(text);
    ASSERT_TRUE(ids.is_ok());
    // At least one character must span several tokens for the test to mean something.
    size_t partial_tokens = 0;
    for (int32_t id : *ids) partial_tokens += utf8::is_valid(tok->token_bytes(id, false)) ? 0 : 1;
    EXPECT_GT(partial_tokens, 0u);
    for (bool skip : {false, true}) {
        IncrementalDetokenizer d(*tok, skip);
        std::string streamed;
        for (int32_t id : *ids) {
            const std::string delta = d.push(id);
            EXPECT_EQ(delta.find(kFffd), std::string::npos);
            EXPECT_TRUE(utf8::is_valid(delta));
            streamed += delta;
        }
        streamed += d.finish();
        EXPECT_EQ(streamed, tok->decode(*ids, skip));
    }
}

TEST(IncrementalDetokenizer, TruncatedStreamFlushesValidText) {  // B20, cut by max_tokens
    DSV4_REQUIRE_TOKENIZER(tok);
    auto ids = tok->encode("ab🙂");
    ASSERT_TRUE(ids.is_ok());
    ASSERT_GE(ids->size(), 3u);
    IncrementalDetokenizer d(*tok, false);
    std::string streamed;
    for (size_t i = 0; i + 1 < ids->size(); ++i) streamed += d.push((*ids)[i]);
    EXPECT_EQ(streamed, "ab");
    const std::string tail = d.finish();
    EXPECT_EQ(tail, std::string(kFffd));  // the cut character, once, and only at the end
    EXPECT_EQ(streamed + tail, tok->decode(std::span(*ids).first(ids->size() - 1), false));
}

// Feeds `chunks` through a StopMatcher and returns the emitted text and whether it stopped.
std::pair<std::string, bool> run_stops(std::vector<std::string> stops, const std::vector<std::string>& chunks) {
    StopMatcher m(std::move(stops));
    std::string out;
    bool stopped = false;
    for (const auto& c : chunks) {
        auto r = m.push(c);
        out += r.emit;
        stopped = stopped || r.stopped;
    }
    out += m.finish();
    return {out, stopped};
}

TEST(StopMatcher, StopSpanningChunksIsFoundAndNotEmitted) {  // B23
    const std::vector<std::string> chunks = {"red", " or", "ange", " yel", "low", " green"};
    EXPECT_EQ(run_stops({"orange yellow"}, chunks), std::make_pair(std::string("red "), true));
    EXPECT_EQ(run_stops({"ow gr"}, chunks), std::make_pair(std::string("red orange yell"), true));
    EXPECT_EQ(run_stops({"green", "yellow"}, chunks), std::make_pair(std::string("red orange "), true));
    EXPECT_EQ(run_stops({"absent"}, chunks), std::make_pair(std::string("red orange yellow green"), false));
}

TEST(StopMatcher, HeldBackPrefixIsFlushedAtEnd) {  // B23, koboldcpp case
    StopMatcher m({"please stop"});
    auto a = m.push("Type:");
    auto b = m.push(" pleas");
    EXPECT_EQ(a.emit + b.emit, "Type: ");
    EXPECT_FALSE(b.stopped);
    EXPECT_EQ(m.finish(), "pleas");
}

TEST(StopMatcher, NothingAfterStopAndEveryChunkingAgrees) {
    const std::string text = "abc STOP def";
    for (size_t cut = 0; cut <= text.size(); ++cut) {
        auto r = run_stops({"STOP", ""}, {text.substr(0, cut), text.substr(cut)});
        EXPECT_EQ(r, std::make_pair(std::string("abc "), true)) << cut;
    }
    StopMatcher m({"x"});
    EXPECT_TRUE(m.push("axb").stopped);
    EXPECT_EQ(m.push("more").emit, "");
    EXPECT_EQ(m.finish(), "");
    // No stops at all: everything passes straight through.
    StopMatcher none({});
    EXPECT_EQ(none.push("hi").emit, "hi");
}

}  // namespace
}  // namespace dsv4
