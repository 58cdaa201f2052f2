// Request validation (B27): malformed, mistyped and out-of-range bodies become 400 errors that
// name the parameter and never echo the body; good bodies parse into the expected params.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "server/generation_defaults.h"
#include "server/openai_request.h"

namespace dsv4 {
namespace {

TEST(OpenAIRequest, RejectsMalformedBodies) {
    const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
    const std::string bad[] = {
        "[]",
        "[1,2]",
        "true",
        "null",
        "123",
        "\"x\"",
        "{",
        "",
        R"({"messages":"hi"})",
        R"({"messages":[]})",
        R"({"messages":[{"role":"wizard","content":"x"}]})",
        "{" + msgs + R"(,"max_tokens":"ten"})",
        "{" + msgs + R"(,"tools":5})",
        "{" + msgs + R"(,"response_format":{"type":"json_schema","schema":{}}})",
        "{" + msgs + R"(,"temperature":-1})",
        "{" + msgs + R"(,"top_p":1.5})",
        "{" + msgs + R"(,"n":100})",
        "{" + msgs + R"(,"seed":"a"})",
        "{" + msgs + R"(,"stop":[1]})",
        "{" + msgs + R"(,"max_tokens":1.5})",
        "{" + msgs + R"(,"max_tokens":99999999999999999999})",
        std::string(5000, '['),
        "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
        "{" + msgs + R"(,"logit_bias":[1]})",
        "{" + msgs + R"(,"logit_bias":{"x":1}})",
        "{" + msgs + R"(,"logit_bias":{"-1":1}})",
        "{" + msgs + R"(,"logit_bias":{"5":101}})",
        "{" + msgs + R"(,"logit_bias":{"5":"a"}})",
    };
    for (const auto& b : bad) {
        auto r = parse_openai_request(b, true);
        ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << b.substr(0, 80);
        const auto& e = std::get<ApiError>(r);
        EXPECT_EQ(e.status, 400);
        EXPECT_LT(e.body().size(), 1024u);
    }
}

TEST(OpenAIRequest, ParsesParams) {
    auto r = parse_openai_request(
        R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0,
            "top_p":0.5,"top_k":5,"max_tokens":7,"stop":"x","seed":-1,"n":2,"stream":true,
            "stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":3,
            "thinking":{"type":"enabled"}})",
        true);
    ASSERT_TRUE(std::holds_alternative<ParsedRequest>(r));
    const auto& p = std::get<ParsedRequest>(r);
    EXPECT_TRUE(p.params.greedy());
    EXPECT_EQ(p.params.top_k, 5);
    EXPECT_EQ(p.params.max_tokens, 7);
    EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
    EXPECT_EQ(p.params.seed, ~uint64_t(0));
    EXPECT_EQ(p.n, 2);
    EXPECT_TRUE(p.stream && p.include_usage && p.thinking);
    EXPECT_EQ(p.params.logprobs, 3);
    auto b = parse_openai_request(R"({"prompt":"x","logit_bias":{"17":-100,"4":2.5}})", false);
    ASSERT_TRUE(std::holds_alternative<ParsedRequest>(b));
    auto lb = std::get<ParsedRequest>(b).params.logit_bias;
    std::sort(lb.begin(), lb.end());
    EXPECT_EQ(lb, (std::vector<std::pair<int32_t, float>>{{4, 2.5f}, {17, -100.f}}));
    auto c = parse_openai_request(R"({"prompt":[[1,2,3]],"logprobs":2})", false);
    ASSERT_TRUE(std::holds_alternative<ParsedRequest>(c));
    EXPECT_EQ(std::get<ParsedRequest>(c).prompt_ids, (std::vector<int32_t>{1, 2, 3}));
}

// generation_config.json as request defaults (issue 14 item 4): read keys applied, the rest
// ignored, bad values rejected naming file and key; explicit request fields win over them.
TEST(GenerationDefaults, FromTheModelDirectory) {
    const auto dir = std::filesystem::temp_directory_path() / ("dsv4_gencfg_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto write = [&](const std::string& text) { std::ofstream(dir / "generation_config.json") << text; };
    {
        auto none = load_generation_defaults(dir.string());  // no file: built-in defaults
        ASSERT_TRUE(none.is_ok());
        EXPECT_TRUE(none->summary.empty());
        EXPECT_EQ(none->params.temperature, SamplingParams{}.temperature);
        EXPECT_FALSE(none->max_tokens.has_value());
    }
    write(R"({"bos_token_id":0,"eos_token_id":1,"do_sample":true,"temperature":0.6,"top_p":0.95,
              "top_k":-1,"max_new_tokens":333,"transformers_version":"4.57"})");
    auto d = load_generation_defaults(dir.string());
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_FLOAT_EQ(d->params.temperature, 0.6f);
    EXPECT_FLOAT_EQ(d->params.top_p, 0.95f);
    EXPECT_EQ(d->params.top_k, 0);
    EXPECT_EQ(d->max_tokens, 333);
    EXPECT_NE(d->summary.find("temperature 0.6"), std::string::npos) << d->summary;
    const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
    auto r = parse_openai_request("{" + msgs + "}", true, &d->params);
    ASSERT_TRUE(std::holds_alternative<ParsedRequest>(r));
    EXPECT_FLOAT_EQ(std::get<ParsedRequest>(r).params.temperature, 0.6f);
    EXPECT_FLOAT_EQ(std::get<ParsedRequest>(r).params.top_p, 0.95f);
    r = parse_openai_request("{" + msgs + R"(,"temperature":0,"top_p":0.5})", true, &d->params);
    ASSERT_TRUE(std::holds_alternative<ParsedRequest>(r));
    EXPECT_TRUE(std::get<ParsedRequest>(r).params.greedy());
    EXPECT_FLOAT_EQ(std::get<ParsedRequest>(r).params.top_p, 0.5f);
    for (const char* bad : {R"({"temperature":"hot"})", R"({"temperature":3})", R"({"top_p":0})", R"({"top_k":1.5})",
                            R"({"max_new_tokens":0})", R"({"repetition_penalty":0})", "[1]", "{"}) {
        write(bad);
        auto e = load_generation_defaults(dir.string());
        ASSERT_FALSE(e.is_ok()) << bad;
        EXPECT_NE(e.status().message().find("generation_config.json"), std::string::npos) << e.status().message();
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dsv4
