// SSE decoding (any split of the byte stream, every line-ending style, comments,
// multi-line data) and OpenAI chunk interpretation, including usage and error chunks.
#include <gtest/gtest.h>

#include "bench/sse.h"

namespace dsv4::bench {
namespace {

std::vector<SseEvent> decode_in_pieces(const std::string& s, size_t piece) {
    SseDecoder d;
    std::vector<SseEvent> out;
    for (size_t i = 0; i < s.size(); i += piece) {
        d.feed(std::string_view(s).substr(i, piece), [&](const SseEvent& e) { out.push_back(e); });
    }
    return out;
}

TEST(BenchSse, AnySplitGivesTheSameEvents) {
    const std::string stream =
        ": keep-alive\n\ndata: {\"a\":1}\n\nevent: note\ndata: line1\ndata: line2\n\n"
        "data:nospace\r\n\r\ndata: cr\r\rdata: [DONE]\n\n";
    for (size_t piece : {1u, 2u, 3u, 7u, 1000u}) {
        auto ev = decode_in_pieces(stream, piece);
        ASSERT_EQ(ev.size(), 5u) << "piece " << piece;
        EXPECT_EQ(ev[0].data, "{\"a\":1}");
        EXPECT_EQ(ev[1].event, "note");
        EXPECT_EQ(ev[1].data, "line1\nline2");
        EXPECT_EQ(ev[2].data, "nospace");
        EXPECT_EQ(ev[3].data, "cr");
        EXPECT_EQ(ev[4].data, "[DONE]");
    }
}

TEST(BenchSse, IncompleteEventIsNotDispatched) {
    auto ev = decode_in_pieces("data: x\n", 1);
    EXPECT_TRUE(ev.empty());
}

TEST(BenchSse, ParsesChatCompletionAndUsageChunks) {
    auto c =
        parse_openai_chunk(R"({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]})");
    EXPECT_EQ(c.text, "Hi");
    EXPECT_FALSE(c.error);
    auto r = parse_openai_chunk(R"({"choices":[{"delta":{"reasoning_content":"hm","content":null}}]})");
    EXPECT_EQ(r.text, "hm");
    auto role = parse_openai_chunk(R"({"choices":[{"delta":{"role":"assistant"}}]})");
    EXPECT_TRUE(role.text.empty());
    auto t = parse_openai_chunk(R"({"choices":[{"text":"abc","finish_reason":"length"}]})");
    EXPECT_EQ(t.text, "abc");
    EXPECT_EQ(t.finish_reason, "length");
    auto u =
        parse_openai_chunk(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}})");
    EXPECT_EQ(u.prompt_tokens, 12);
    EXPECT_EQ(u.completion_tokens, 34);
    EXPECT_TRUE(parse_openai_chunk("[DONE]").done);
}

TEST(BenchSse, ReportsErrors) {
    auto e = parse_openai_chunk(R"({"error":{"message":"overloaded","type":"server_error"}})");
    ASSERT_TRUE(e.error);
    EXPECT_EQ(*e.error, "overloaded");
    EXPECT_TRUE(parse_openai_chunk("not json").error);
}

TEST(BenchSse, RecorderTimesTokensAndPrefersUsage) {
    RequestRecord rec;
    rec.start = 1.0;
    StreamRecorder r(rec);
    r.on_body("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", 1.1);
    r.on_body("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choi", 1.5);
    r.on_body("ces\":[{\"delta\":{\"content\":\"b\"}}]}\n\n", 1.7);
    r.on_body("data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}]}\n\n", 2.0);
    r.finish(2.1);
    EXPECT_FALSE(rec.ok) << "no [DONE] yet";
    r.on_body(
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}\n\n"
        "data: [DONE]\n\n",
        2.2);
    r.finish(2.3);
    EXPECT_TRUE(rec.ok) << rec.error;
    EXPECT_DOUBLE_EQ(rec.ttft(), 0.5);
    EXPECT_EQ(rec.text_chunks, 3);
    EXPECT_EQ(rec.output_tokens(), 6) << "usage wins over chunk count";
    EXPECT_EQ(rec.prompt_tokens(), 5);
    ASSERT_EQ(rec.chunk_times.size(), 3u);
    EXPECT_DOUBLE_EQ(rec.chunk_times[1], 1.7);
    EXPECT_NEAR(rec.e2e(), 1.3, 1e-12);
}

TEST(BenchSse, RecorderCountsChunksWithoutUsage) {
    RequestRecord rec;
    StreamRecorder r(rec);
    r.on_body(
        "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: {\"choices\":[{\"text\":\"y\"}]}\n\n"
        "data: [DONE]\n\n",
        0.5);
    r.finish(0.6);
    EXPECT_TRUE(rec.ok);
    EXPECT_EQ(rec.output_tokens(), 2);
    EXPECT_EQ(rec.prompt_tokens(), -1);
}

TEST(BenchSse, RecorderKeepsServerError) {
    RequestRecord rec;
    StreamRecorder r(rec);
    r.on_body("data: {\"error\":{\"message\":\"context too long\"}}\n\ndata: [DONE]\n\n", 0.1);
    r.finish(0.2);
    EXPECT_FALSE(rec.ok);
    EXPECT_EQ(rec.error, "context too long");
}

}  // namespace
}  // namespace dsv4::bench
