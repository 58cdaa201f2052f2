// Output parsing: reasoning/content/DSML tool calls, and the streaming parser giving the same
// result as the all-at-once parse for every chunking (B21, B22 in regression-cases.md).
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "tests/tokenizer/test_tokenizer_file.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/output_parser.h"

namespace dsv4 {
namespace {

const std::string kBlockOpen = "<｜DSML｜tool_calls>";
const std::string kBlockClose = "</｜DSML｜tool_calls>";

std::string invoke(const std::string& name, const std::vector<std::string>& params) {
    std::string s = "<｜DSML｜invoke name=\"" + name + "\">\n";
    for (const auto& p : params) s += p + "\n";
    return s + "</｜DSML｜invoke>";
}
std::string param(const std::string& key, bool is_string, const std::string& value) {
    return "<｜DSML｜parameter name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") + "\">" + value +
           "</｜DSML｜parameter>";
}

// The B21 text: prose, then three calls with string and JSON values, a value ending in letters
// of the tag name, and a JSON object argument holding "}" and "<".
std::string b21_text() {
    return "Let me look.\n\n" + kBlockOpen + "\n" +
           invoke("run_shell", {param("command", true, "find /tmp"), param("timeout", false, "-7")}) + "\n" +
           invoke("get_weather", {param("city", true, "Zürich")}) + "\n" +
           invoke("write", {param("spec", false, R"({"body": "a}b<c", "n": [1, 2]})"),
                            param("tail", true, "ends in parameter")}) +
           "\n" + kBlockClose;
}

struct Stream {
    ParsedOutput out;
    bool name_before_args = true;  // every call was named before any argument text
    std::vector<bool> named;
};

Stream run_chunks(const std::string& text, const std::vector<size_t>& cuts, bool thinking) {
    StreamingOutputParser p(thinking);
    Stream s;
    auto take = [&](const OutputDelta& d) {
        for (const auto& ev : d.tool_events) {
            if (ev.index >= static_cast<int>(s.named.size())) s.named.resize(ev.index + 1, false);
            if (!ev.name.empty()) s.named[ev.index] = true;
            if (!ev.arguments_delta.empty() && !s.named[ev.index]) s.name_before_args = false;
        }
        apply_delta(s.out, d);
    };
    size_t prev = 0;
    for (size_t c : cuts) {
        take(p.push(std::string_view(text).substr(prev, c - prev)));
        prev = c;
    }
    take(p.push(std::string_view(text).substr(prev)));
    take(p.finish());
    return s;
}

void expect_same(const ParsedOutput& a, const ParsedOutput& b, const std::string& how) {
    EXPECT_EQ(a.reasoning, b.reasoning) << how;
    EXPECT_EQ(a.content, b.content) << how;
    ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size()) << how;
    for (size_t i = 0; i < a.tool_calls.size(); ++i) {
        EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name) << how;
        EXPECT_EQ(a.tool_calls[i].arguments_json, b.tool_calls[i].arguments_json) << how;
    }
}

// Every 2-way split, 1-byte chunks, 1..8-byte and 3..7-"token" random chunkings.
int check_all_chunkings(const std::string& text, bool thinking, int random_runs = 200) {
    const ParsedOutput whole = parse_output(text, thinking);
    int n = 0;
    auto check = [&](const std::vector<size_t>& cuts, const std::string& how) {
        Stream s = run_chunks(text, cuts, thinking);
        expect_same(s.out, whole, how);
        EXPECT_TRUE(s.name_before_args) << how;
        ++n;
        return !::testing::Test::HasFailure();
    };
    for (size_t i = 0; i <= text.size(); ++i)
        if (!check({i}, "split at " + std::to_string(i))) return n;
    std::vector<size_t> ones;
    for (size_t i = 1; i < text.size(); ++i) ones.push_back(i);
    check(ones, "1-byte chunks");
    std::mt19937 rng(1234);
    for (int r = 0; r < random_runs; ++r) {
        std::vector<size_t> cuts;
        const int lo = r % 2 ? 1 : 3, hi = r % 2 ? 8 : 21;  // 3..7 tokens of ~3 bytes
        for (size_t at = std::uniform_int_distribution<int>(lo, hi)(rng); at < text.size();
             at += std::uniform_int_distribution<int>(lo, hi)(rng))
            cuts.push_back(at);
        if (!check(cuts, "random chunking " + std::to_string(r))) return n;
    }
    return n;
}

bool no_markers(const std::string& s) {
    return s.find("｜DSML｜") == std::string::npos && s.find("<think>") == std::string::npos &&
           s.find("</think>") == std::string::npos;
}

TEST(OutputParser, B21ToolCallsAllAtOnce) {
    ParsedOutput o = parse_output(b21_text(), false);
    EXPECT_EQ(o.content, "Let me look.");
    ASSERT_EQ(o.tool_calls.size(), 3u);
    EXPECT_EQ(o.tool_calls[0].name, "run_shell");
    EXPECT_EQ(o.tool_calls[0].arguments_json, R"({"command": "find /tmp", "timeout": -7})");
    EXPECT_EQ(o.tool_calls[1].name, "get_weather");
    EXPECT_EQ(o.tool_calls[1].arguments_json, R"({"city": "Zürich"})");
    EXPECT_EQ(o.tool_calls[2].name, "write");
    EXPECT_EQ(o.tool_calls[2].arguments_json,
              R"({"spec": {"body": "a}b<c", "n": [1, 2]}, "tail": "ends in parameter"})");
    for (const auto& c : o.tool_calls) {
        EXPECT_TRUE(nlohmann::json::accept(c.arguments_json)) << c.arguments_json;
        EXPECT_TRUE(no_markers(c.arguments_json));
    }
    EXPECT_TRUE(no_markers(o.content));
}

TEST(OutputParser, B21EveryChunkingGivesTheSameCalls) {
    EXPECT_GT(check_all_chunkings(b21_text(), false), 500);
    EXPECT_GT(check_all_chunkings("<think>plan</think>" + b21_text(), true), 500);
}

// Chunks as a model streams them: the decoded bytes of 1 token, or of 3..7 tokens (speculative
// decoding), per step.
TEST(OutputParser, B21B22TokenAlignedChunkings) {
    DSV4_REQUIRE_TOKENIZER(tok);
    const std::vector<std::pair<std::string, bool>> texts = {
        {b21_text(), false}, {"plan A</think>Answer: 42", true}, {"plan</think>" + b21_text(), true}};
    std::mt19937 rng(7);
    for (const auto& [text, thinking] : texts) {
        auto ids = tok->encode(text);
        ASSERT_TRUE(ids.is_ok());
        const ParsedOutput whole = parse_output(text, thinking);
        for (int per_step : {1, 0}) {
            for (int run = 0; run < (per_step ? 1 : 50); ++run) {
                std::vector<size_t> cuts;
                size_t at = 0;
                for (size_t i = 0; i < ids->size();) {
                    const int n = per_step ? 1 : std::uniform_int_distribution<int>(3, 7)(rng);
                    for (int k = 0; k < n && i < ids->size(); ++k, ++i) at += tok->token_bytes((*ids)[i], false).size();
                    if (at < text.size()) cuts.push_back(at);
                }
                ASSERT_EQ(at, text.size());
                Stream s = run_chunks(text, cuts, thinking);
                expect_same(s.out, whole, per_step ? "1 token per step" : "3..7 tokens per step");
                EXPECT_TRUE(s.name_before_args);
            }
        }
    }
}

TEST(OutputParser, B22ReasoningSplit) {
    struct Case {
        std::string text;
        bool thinking;
        std::string reasoning, content;
        size_t calls;
    };
    const std::vector<Case> cases = {
        {"plan A</think>Answer: 42", true, "plan A", "Answer: 42", 0},
        {"plan A", true, "plan A", "", 0},  // truncated by max_tokens: all reasoning
        {"plan</think>\n\n" + kBlockOpen + "\n" + invoke("f", {param("x", false, "1")}) + "\n" + kBlockClose, true,
         "plan", "", 1},
        {"Answer: 42", false, "", "Answer: 42", 0},
        {"<think>abc</think>normal", true, "abc", "normal", 0},  // stray opening marker dropped
        {"a</thin", true, "a</thin", "", 0},                     // partial marker at the end is text
        {"x </think> y </think> z", true, "x ", " y </think> z", 0},
    };
    for (const auto& c : cases) {
        ParsedOutput o = parse_output(c.text, c.thinking);
        EXPECT_EQ(o.reasoning, c.reasoning) << c.text;
        EXPECT_EQ(o.content, c.content) << c.text;
        EXPECT_EQ(o.tool_calls.size(), c.calls) << c.text;
        check_all_chunkings(c.text, c.thinking, 50);
    }
}

ChatOptions thinking_options() {
    ChatOptions o;
    o.thinking = true;
    return o;
}

TEST(OutputParser, B22MultiTurnAfterToolResult) {
    // (5): after a tool result the thinking-mode prompt again ends with "<think>", so the next
    // output starts in reasoning and the final answer lands in content.
    auto prompt = render_chat(nlohmann::ordered_json::parse(R"([
        {"role":"user","content":"weather?"},
        {"role":"assistant","content":"","reasoning_content":"need tool","tool_calls":[
          {"id":"c","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Oslo\"}"}}]},
        {"role":"tool","tool_call_id":"c","content":"-2C"}])"),
                              thinking_options());
    ASSERT_TRUE(prompt.is_ok());
    ASSERT_TRUE(prompt->ends_with("<think>"));
    ParsedOutput o = parse_output("it is cold</think>It is -2C in Oslo.", true);
    EXPECT_EQ(o.reasoning, "it is cold");
    EXPECT_EQ(o.content, "It is -2C in Oslo.");
}

TEST(OutputParser, RoundTripsTheEncodersToolCalls) {
    // The assistant turn as the encoder renders it is what the model is trained to emit.
    auto args = nlohmann::ordered_json::parse(
        R"({"command": "echo \"hi\" | grep '<'", "timeout": 3.0, "flags": [1, -2, 0.25, "s"], "env": {"LANG": "C"},
            "dry": false, "nothing": null, "tab": "a\tb\nc", "emoji": "🧪"})");
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    msgs.push_back({{"role", "user"}, {"content", "go"}});
    msgs.push_back({{"role", "assistant"},
                    {"content", "Calling."},
                    {"tool_calls",
                     {{{"id", "1"}, {"type", "function"}, {"function", {{"name", "run"}, {"arguments", args.dump()}}}},
                      {{"id", "2"}, {"type", "function"}, {"function", {{"name", "now"}, {"arguments", "{}"}}}}}}});
    auto prompt = render_chat(msgs, {});
    ASSERT_TRUE(prompt.is_ok());
    const std::string head = "<｜Assistant｜></think>", eos = "<｜end▁of▁sentence｜>";
    std::string out = prompt->substr(prompt->find(head) + head.size());
    out = out.substr(0, out.size() - eos.size());
    ParsedOutput o = parse_output(out, false);
    EXPECT_EQ(o.content, "Calling.");
    ASSERT_EQ(o.tool_calls.size(), 2u);
    EXPECT_EQ(o.tool_calls[0].name, "run");
    EXPECT_EQ(nlohmann::ordered_json::parse(o.tool_calls[0].arguments_json), args);
    EXPECT_EQ(o.tool_calls[1].name, "now");
    EXPECT_EQ(o.tool_calls[1].arguments_json, "{}");
    check_all_chunkings(out, false, 50);
}

TEST(OutputParser, MalformedDsmlDegradesToContentWithoutLoss) {
    const std::string pre = "Intro.\n\n" + kBlockOpen + "\n";
    const std::vector<std::string> texts = {
        pre + "no invoke here",
        pre + "<｜DSML｜invoke nam=\"x\">\n</｜DSML｜invoke>",
        pre + "<｜DSML｜invoke name=\"\">\n",
        pre + "<｜DSML｜invoke name=\"a<b\">",
        pre + "<｜DSML｜inv",              // truncated inside a marker
        pre + "<｜DSML｜invoke name=\"f",  // truncated inside the tag
        pre,                               // block opened, nothing else
        "text <｜DSML｜tool_calls",        // partial block marker at the end
        "just \n\n text with <｜DSML｜ inside",
    };
    for (const auto& t : texts) {
        ParsedOutput o = parse_output(t, false);
        EXPECT_EQ(o.content, t) << t;
        EXPECT_TRUE(o.tool_calls.empty()) << t;
        check_all_chunkings(t, false, 30);
    }
}

TEST(OutputParser, MalformedAfterACallKeepsTheCallAndTheRest) {
    const std::string good = invoke("f", {param("a", true, "1")});
    // Garbage inside the second call's parameter list.
    std::string t = "\n\n" + kBlockOpen + "\n" + good + "\n<｜DSML｜invoke name=\"g\">\noops " +
                    param("b", false, "2") + "\n</｜DSML｜invoke>\n" + kBlockClose + " after";
    ParsedOutput o = parse_output(t, false);
    ASSERT_EQ(o.tool_calls.size(), 2u);
    EXPECT_EQ(o.tool_calls[0].arguments_json, R"({"a": "1"})");
    EXPECT_EQ(o.tool_calls[1].name, "g");
    EXPECT_EQ(o.tool_calls[1].arguments_json, "{}");
    EXPECT_EQ(o.content, "\noops " + param("b", false, "2") + "\n</｜DSML｜invoke>\n" + kBlockClose + " after");
    check_all_chunkings(t, false, 50);
}

TEST(OutputParser, TruncatedCallsStayValidJson) {
    const std::vector<std::string> texts = {
        "\n\n" + kBlockOpen + "\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">hal",
        "\n\n" + kBlockOpen + "\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">[1, 2",
        "\n\n" + kBlockOpen +
            "\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜par",
        "\n\n" + kBlockOpen + "\n<｜DSML｜invoke name=\"f\">\n",
    };
    for (const auto& t : texts) {
        ParsedOutput o = parse_output(t, false);
        ASSERT_EQ(o.tool_calls.size(), 1u) << t;
        EXPECT_EQ(o.tool_calls[0].name, "f");
        EXPECT_TRUE(nlohmann::json::accept(o.tool_calls[0].arguments_json)) << o.tool_calls[0].arguments_json;
        EXPECT_TRUE(no_markers(o.tool_calls[0].arguments_json)) << o.tool_calls[0].arguments_json;
        check_all_chunkings(t, false, 30);
    }
}

TEST(OutputParser, NonJsonValueBecomesAString) {
    std::string t =
        kBlockOpen + "\n" + invoke("f", {param("a", false, "not json"), param("b", false, " 2 ")}) + "\n" + kBlockClose;
    ParsedOutput o = parse_output(t, false);
    ASSERT_EQ(o.tool_calls.size(), 1u);
    EXPECT_EQ(o.tool_calls[0].arguments_json, R"({"a": "not json", "b": 2})");
}

// JSON readers that stop at a NUL byte (nlohmann's does) would accept "-7\0<anything>"; arguments
// must be JSON for every reader, so a raw NUL anywhere counts as invalid here.
bool strict_json_object(const std::string& s) {
    if (s.find('\0') != std::string::npos) return false;
    const auto j = nlohmann::json::parse(s, nullptr, false);
    return !j.is_discarded() && j.is_object();
}

// Reduced from tests/fuzz/known_crashes/output_parser-crash-5fce87d7: a string="false" value that
// is JSON up to a NUL byte used to be copied verbatim, so the text after the NUL (here a quote and
// a forged second key) landed unescaped in the arguments.
TEST(OutputParser, ValueWithNulIsNotJson) {
    const std::string value("-7\0\"}, \"x\": 1", 13);
    const std::string t = kBlockOpen + "\n" + invoke("f", {param("timeout", false, value)}) + "\n" + kBlockClose;
    ParsedOutput o = parse_output(t, false);
    ASSERT_EQ(o.tool_calls.size(), 1u);
    EXPECT_EQ(o.tool_calls[0].arguments_json, R"({"timeout": "-7\u0000\"}, \"x\": 1"})");
    EXPECT_TRUE(strict_json_object(o.tool_calls[0].arguments_json)) << o.tool_calls[0].arguments_json;
    EXPECT_EQ(o.content, "");
    check_all_chunkings(t, false, 30);

    // A NUL alone, before the value and inside a quoted JSON string: never JSON either.
    const std::vector<std::string> nul_values = {{'\0'}, {'\0', '1'}, {'"', 'a', '\0', 'b', '"'}};
    for (const std::string& v : nul_values) {
        const std::string u = kBlockOpen + "\n" + invoke("f", {param("v", false, v)}) + "\n" + kBlockClose;
        ParsedOutput p = parse_output(u, false);
        ASSERT_EQ(p.tool_calls.size(), 1u);
        EXPECT_TRUE(strict_json_object(p.tool_calls[0].arguments_json)) << p.tool_calls[0].arguments_json;
        EXPECT_EQ(nlohmann::json::parse(p.tool_calls[0].arguments_json)["v"], v);
    }
}

// True if `s` is a run of complete UTF-8 sequences (lead byte plus its continuation bytes).
bool whole_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        const size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
        if (len == 0 || i + len > s.size()) return false;
        for (size_t k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

TEST(OutputParser, DeltasNeverSplitAUtf8Character) {
    std::string t = "思考中</think>答案：苏黎世";
    StreamingOutputParser p(true);
    for (size_t i = 0; i < t.size(); ++i) {
        OutputDelta d = p.push(std::string_view(t).substr(i, 1));
        for (const std::string* s : {&d.reasoning, &d.content}) EXPECT_TRUE(whole_utf8(*s)) << "delta at byte " << i;
    }
}

// Random texts built from markers, marker fragments and ordinary text: whatever the parser makes
// of them, every chunking must make the same, and arguments must stay valid JSON.
TEST(OutputParser, RandomDsmlSoupIsChunkingInvariant) {
    const std::vector<std::string> pieces = {"hello",
                                             " ",
                                             "\n",
                                             "\n\n",
                                             "Zürich",
                                             "\"",
                                             "<",
                                             ">",
                                             "}",
                                             "{\"k\": [1]}",
                                             "-7",
                                             "true",
                                             kBlockOpen,
                                             kBlockClose,
                                             "<｜DSML｜invoke name=\"f\">",
                                             "<｜DSML｜invoke",
                                             " name=\"g\"",
                                             ">",
                                             "</｜DSML｜invoke>",
                                             "<｜DSML｜parameter name=\"a\" string=\"true\">",
                                             "<｜DSML｜parameter name=\"b\" string=\"false\">",
                                             "</｜DSML｜parameter>",
                                             "</｜DSML｜par",
                                             "<｜DSML｜",
                                             "</think>",
                                             "<think>",
                                             "</thi",
                                             "｜"};
    std::mt19937 rng(42);
    int texts = 0;
    for (int r = 0; r < 400; ++r) {
        std::string t;
        const int n = std::uniform_int_distribution<int>(1, 30)(rng);
        for (int i = 0; i < n; ++i) t += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
        const bool thinking = r % 3 == 0;
        ParsedOutput o = parse_output(t, thinking);
        for (const auto& c : o.tool_calls) {
            EXPECT_FALSE(c.name.empty()) << t;
            EXPECT_TRUE(nlohmann::json::accept(c.arguments_json)) << t << "\n=> " << c.arguments_json;
        }
        check_all_chunkings(t, thinking, 10);
        if (HasFailure()) break;
        ++texts;
    }
    EXPECT_EQ(texts, 400);
}

}  // namespace
}  // namespace dsv4
