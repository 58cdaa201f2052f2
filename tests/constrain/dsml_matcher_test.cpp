// Enforced tool calls (src/constrain/dsml_matcher.h): the DSML block the official encoder renders
// is accepted for allowed tools with valid arguments and refused otherwise (unknown tool, a missing
// required parameter, a string flag that does not fit the type, a value outside its schema, more
// calls than allowed), and random token-by-token generation from the mask always yields a block
// that the output parser reads back as valid calls.
#include <gtest/gtest.h>

#include <random>

#include "constrain/dsml_matcher.h"
#include "constrain/json_constraint.h"
#include "constrain/vocab_index.h"
#include "tokenizer/output_parser.h"

namespace dsv4::constrain {
namespace {

using json = nlohmann::json;

std::shared_ptr<const CompiledSchema> schema_of(const json& s) {
    return std::make_shared<const CompiledSchema>(*compile_json_schema(s));
}

std::shared_ptr<const ToolGrammar> weather_tools(int max_calls) {
    auto g = std::make_shared<ToolGrammar>();
    ToolSpec w;
    w.name = "get_weather";
    w.params = {"city", "days"};
    w.schemas = {schema_of({{"type", "string"}}), schema_of({{"type", "integer"}})};
    w.flags = {1, 2};
    w.required = {true, false};
    w.open = false;
    ToolSpec n;
    n.name = "noop";
    n.open = false;
    g->tools = {w, n};
    g->max_calls = max_calls;
    return g;
}

bool accepts(std::shared_ptr<const ToolGrammar> g, const std::string& text) {
    DsmlMatcher m(std::move(g));
    for (char c : text)
        if (!m.feed(uint8_t(c))) return false;
    return m.accepting();
}

const std::string kCall =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris <b>, \"</｜DSML｜param</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n";
const std::string kNoop = "<｜DSML｜invoke name=\"noop\">\n</｜DSML｜invoke>\n";
const std::string kClose = "</｜DSML｜tool_calls>";

TEST(DsmlMatcher, AcceptsTheEncodersBlockForAllowedCalls) {
    EXPECT_TRUE(accepts(weather_tools(-1), kCall + kClose));
    EXPECT_TRUE(accepts(weather_tools(-1), kCall + kNoop + kClose));
    EXPECT_FALSE(accepts(weather_tools(1), kCall + kNoop + kClose));  // parallel_tool_calls false
    EXPECT_TRUE(accepts(weather_tools(1), kCall + kClose));
    auto one = [](const std::string& params) {
        return "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n" + params + "</｜DSML｜invoke>\n" +
               kClose;
    };
    EXPECT_TRUE(
        accepts(weather_tools(-1), one("<｜DSML｜parameter name=\"city\" string=\"true\">x</｜DSML｜parameter>\n")));
    EXPECT_FALSE(accepts(weather_tools(-1), one("")));  // city is required
    EXPECT_FALSE(
        accepts(weather_tools(-1), one("<｜DSML｜parameter name=\"days\" string=\"false\">2</｜DSML｜parameter>\n")));
    EXPECT_FALSE(accepts(weather_tools(-1),
                         one("<｜DSML｜parameter name=\"city\" string=\"false\">\"x\"</｜DSML｜parameter>\n")));
    EXPECT_FALSE(
        accepts(weather_tools(-1), one("<｜DSML｜parameter name=\"city\" string=\"true\">x</｜DSML｜parameter>\n"
                                       "<｜DSML｜parameter name=\"days\" string=\"false\">2.5</｜DSML｜parameter>\n")));
    EXPECT_FALSE(
        accepts(weather_tools(-1), one("<｜DSML｜parameter name=\"cty\" string=\"true\">x</｜DSML｜parameter>\n")));
    EXPECT_FALSE(accepts(weather_tools(-1), "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_time\">\n"));
    EXPECT_FALSE(accepts(weather_tools(-1), "Sure! " + kCall + kClose));  // nothing before the block
    DsmlMatcher m(weather_tools(-1));
    EXPECT_TRUE(m.feed(std::string_view(kCall + kClose)));
    EXPECT_TRUE(m.finished());
    EXPECT_FALSE(m.feed(uint8_t('\n')));
    // Resumed after the DSML token (tool_choice auto): the rest of the opener comes next.
    DsmlMatcher r(weather_tools(-1), true);
    EXPECT_TRUE(r.feed(std::string_view(kCall.substr(kCall.find("tool_calls>")) + kClose)));
    EXPECT_TRUE(r.finished());
}

std::vector<std::string> fragments() {
    std::vector<std::string> v = {"",
                                  "<｜DSML｜tool_calls>",
                                  "</｜DSML｜tool_calls>",
                                  "<｜DSML｜invoke name=\"",
                                  "</｜DSML｜invoke>",
                                  "<｜DSML｜parameter name=\"",
                                  "</｜DSML｜parameter>",
                                  "｜DSML｜",
                                  "\" string=\"",
                                  "true\">",
                                  "false\">",
                                  "\">",
                                  "get_weather",
                                  "noop",
                                  "city",
                                  "days",
                                  "\n",
                                  "\n\n",
                                  "<",
                                  "</",
                                  "12",
                                  "Paris",
                                  "\\\""};
    for (char ch = 0x20; ch < 0x7f; ++ch) v.push_back(std::string(1, ch));
    return v;
}

TEST(ToolCallConstraint, RandomGenerationAlwaysParsesIntoValidCalls) {
    auto vocab = std::make_shared<const VocabIndex>(fragments());
    std::mt19937 g(3);
    int done = 0;
    for (int trial = 0; trial < 200; ++trial) {
        ToolCallConstraint c(DsmlMatcher(weather_tools(trial % 2 ? 1 : -1)), vocab);
        std::string text;
        for (int step = 0; step < 300; ++step) {
            std::vector<float> logits(size_t(vocab->size()), 0.0f);
            c.mask(logits, 0);
            std::vector<int32_t> live;
            for (int32_t t = 1; t < vocab->size(); ++t)
                if (std::isfinite(logits[size_t(t)])) live.push_back(t);
            if (c.finished()) break;
            ASSERT_FALSE(live.empty()) << text;
            // Prefer the structural pieces so a block closes within the step budget.
            int32_t t = live[g() % live.size()];
            for (int tries = 0; tries < 3 && vocab->bytes(t).size() < 3; ++tries) t = live[g() % live.size()];
            ASSERT_TRUE(c.advance(t));
            text += vocab->bytes(t);
        }
        if (!c.finished()) continue;
        ++done;
        const ParsedOutput p = parse_output(text, false);
        ASSERT_FALSE(p.tool_calls.empty()) << text;
        EXPECT_TRUE(p.content.find_first_not_of(" \n") == std::string::npos)
            << "content: '" << p.content << "' in " << text;
        if (trial % 2) EXPECT_EQ(p.tool_calls.size(), 1u);
        for (const ToolCall& tc : p.tool_calls) {
            const json args = json::parse(tc.arguments_json);
            if (tc.name == "noop") {
                EXPECT_TRUE(args.empty());
                continue;
            }
            ASSERT_EQ(tc.name, "get_weather") << text;
            ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << tc.arguments_json;
            if (args.contains("days")) EXPECT_TRUE(args["days"].is_number_integer()) << tc.arguments_json;
        }
    }
    EXPECT_GT(done, 100);
    std::printf(
        "[tool-call constraint] %d of 200 random generations closed their block; every one parsed into "
        "valid calls\n",
        done);
}

}  // namespace
}  // namespace dsv4::constrain
