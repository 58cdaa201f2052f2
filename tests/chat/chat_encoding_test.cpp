// render_chat behaviour beyond the goldens: errors that name the bad message, the sorted-key
// json overload, and Python-compatible JSON text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_encoding.h"
#include "tokenizer/chat_request.h"
#include "tokenizer/py_json.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

std::string error_of(const ordered_json& messages, ChatOptions opts = {}) {
    auto r = render_chat(messages, opts);
    return r.is_ok() ? "OK" : r.status().message();
}

TEST(ChatEncoding, MinimalChatAndThinkingPrompts) {
    ordered_json msgs = ordered_json::parse(R"([{"role":"user","content":"hi"}])");
    EXPECT_EQ(*render_chat(msgs, {}), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
    ChatOptions t;
    t.thinking = true;
    EXPECT_EQ(*render_chat(msgs, t), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>");
    t.add_generation_prompt = false;
    EXPECT_EQ(*render_chat(msgs, t), "<｜begin▁of▁sentence｜><｜User｜>hi");
}

TEST(ChatEncoding, PlainJsonOverloadRendersTheSame) {
    nlohmann::json msgs = nlohmann::json::parse(
        R"([{"role":"user","content":"hi"},{"role":"assistant","content":"yo","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]}])");
    auto a = render_chat(msgs, {});
    auto b = render_chat(ordered_json(msgs), {});
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(*a, *b);
    EXPECT_NE(a->find("<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>"), std::string::npos);
}

TEST(ChatEncoding, ErrorsNameTheProblem) {
    EXPECT_EQ(error_of(ordered_json::object()), "messages must be a JSON array");
    EXPECT_EQ(error_of(ordered_json::parse(R"([42])")), "messages[0] must be an object");
    EXPECT_EQ(error_of(ordered_json::parse(R"([{"content":"x"}])")), "messages[0]: missing or non-string \"role\"");
    EXPECT_NE(error_of(ordered_json::parse(R"([{"role":"user","content":"a"},{"role":"robot","content":"x"}])"))
                  .find("messages[1]: unknown role 'robot'"),
              std::string::npos);
    EXPECT_EQ(error_of(ordered_json::parse(R"([{"role":"user","content":5}])")),
              "messages[0].content must be a string, null or an array of text parts");
    EXPECT_NE(error_of(ordered_json::parse(R"([{"role":"user","content":[{"type":"image_url","image_url":{}}]}])"))
                  .find("unsupported content part type 'image_url'"),
              std::string::npos);
    EXPECT_EQ(error_of(ordered_json::parse(
                  R"([{"role":"assistant","tool_calls":[{"type":"function","function":{"arguments":"{}"}}]}])")),
              "messages[0].tool_calls[0]: tool call without a function name");
    EXPECT_EQ(error_of(ordered_json::parse(R"([{"role":"assistant","tool_calls":[{"id":"x"}]}])")),
              "messages[0].tool_calls[0]: tool call without a \"function\" object");
    EXPECT_EQ(error_of(ordered_json::parse(
                  R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{oops"}}]}])")),
              "messages[0].tool_calls[0].function.arguments is not valid JSON");
    EXPECT_EQ(error_of(ordered_json::parse(
                  R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}])")),
              "messages[0].tool_calls[0].function.arguments must be a JSON object");
    EXPECT_EQ(error_of(ordered_json::parse(R"([{"role":"developer","content":""}])")),
              "messages[0]: a developer message needs non-empty content");
    EXPECT_EQ(error_of(ordered_json::parse(R"([{"role":"latest_reminder"}])")),
              "messages[0]: a latest_reminder message needs string content");
    EXPECT_NE(error_of(ordered_json::parse(R"([{"role":"user","content":"x","task":"dance"}])")).find("unknown task"),
              std::string::npos);
    EXPECT_EQ(
        error_of(ordered_json::parse(R"([{"role":"user","content":"x","tool_calls":[{"function":{"name":"f"}}]}])")),
        "messages[0]: only assistant messages may carry tool_calls");
    ChatOptions bad_tools;
    bad_tools.tools = ordered_json::parse(R"([{"name":"f"}])");
    EXPECT_NE(error_of(ordered_json::parse(R"([{"role":"user","content":"x"}])"), bad_tools).find("tools[0]"),
              std::string::npos);
}

TEST(ChatEncoding, EmptyArgumentsStringMeansNoParameters) {
    auto r = render_chat(
        ordered_json::parse(
            R"([{"role":"assistant","content":"","tool_calls":[{"function":{"name":"now","arguments":""}}]}])"),
        {});
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_NE(r->find("<｜DSML｜invoke name=\"now\">\n\n</｜DSML｜invoke>"), std::string::npos);
}

TEST(ChatRequest, AcceptsArrayOrObjectWithOptions) {
    auto a = parse_chat_request(ordered_json::parse(R"([{"role":"user","content":"x"}])"));
    ASSERT_TRUE(a.is_ok());
    EXPECT_FALSE(a->options.thinking);
    auto b = parse_chat_request(ordered_json::parse(
        R"({"model":"m","messages":[],"chat_template_kwargs":{"thinking":true},"reasoning_effort":"max"})"));
    ASSERT_TRUE(b.is_ok());
    EXPECT_TRUE(b->options.thinking);
    EXPECT_EQ(b->options.reasoning_effort, "max");
    EXPECT_FALSE(parse_chat_request(ordered_json::parse(R"({"thinking":true})")).is_ok());
    EXPECT_FALSE(parse_chat_request(ordered_json::parse(R"({"messages":[],"thinking":"yes"})")).is_ok());
}

TEST(PyJson, MatchesPythonJsonDumps) {
    // Expected strings are what Python 3.11 json.dumps(..., ensure_ascii=False) prints.
    auto j =
        ordered_json::parse(R"({"z": 1, "a": [1.5, 1e-07, 1e16, 100.0, true, null, -0.0, 0.0001, 123456789.125]})");
    EXPECT_EQ(py_json_dumps(j),
              R"({"z": 1, "a": [1.5, 1e-07, 1e+16, 100.0, true, null, -0.0, 0.0001, 123456789.125]})");
    EXPECT_EQ(py_json_dumps(ordered_json(1e15)), "1000000000000000.0");
    EXPECT_EQ(py_json_dumps(ordered_json(1.2345678901234568e+17)), "1.2345678901234568e+17");
    EXPECT_EQ(py_json_dumps(ordered_json(1e-300)), "1e-300");
    EXPECT_EQ(py_json_dumps(ordered_json(0.1)), "0.1");
    EXPECT_EQ(py_json_dumps(ordered_json(12345678901234567890ull)), "12345678901234567890");
    EXPECT_EQ(py_json_dumps(ordered_json("é\"\\\n\t\x01\x7f😀")), "\"é\\\"\\\\\\n\\t\\u0001\x7f😀\"");
    EXPECT_EQ(py_json_dumps(ordered_json::parse("{}")), "{}");
    EXPECT_EQ(py_json_dumps(ordered_json::parse("[]")), "[]");
}

}  // namespace
}  // namespace dsv4
