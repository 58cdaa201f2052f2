// Prompt sources: the ShareGPT and MT-Bench/HumanEval formats (inline samples and the
// shared data files when present) and seeded, repeatable draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "bench/prompts.h"
#include "bench/sweep.h"

namespace dsv4::bench {
namespace {

TEST(BenchPrompts, ShareGptTakesFirstHumanTurn) {
    auto r = load_sharegpt(R"([
      {"id":"a","conversations":[{"from":"human","value":"first"},{"from":"gpt","value":"x"}]},
      {"id":"b","conversations":[{"from":"gpt","value":"skip"},{"from":"human","value":"second"}]},
      {"id":"c","conversations":[]}])");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ((*r)[0], "first");
    EXPECT_EQ((*r)[1], "second");
    EXPECT_FALSE(load_sharegpt("{}").is_ok());
}

TEST(BenchPrompts, JsonlTurnsOrPrompt) {
    auto r = load_jsonl_prompts(
        "{\"question_id\":1,\"turns\":[\"q1\",\"q2\"]}\n\n"
        "{\"task_id\":\"H/0\",\"prompt\":\"def f():\"}\n");
    ASSERT_TRUE(r.is_ok());
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ((*r)[0], "q1");
    EXPECT_EQ((*r)[1], "def f():");
    EXPECT_FALSE(load_jsonl_prompts("{\"x\":1}\n").is_ok());
    EXPECT_FALSE(load_jsonl_prompts("nope\n").is_ok());
}

TEST(BenchPrompts, SharedDataFiles) {
    const std::string dir = DSV4_PROMPTS_DIR;
    if (!std::filesystem::exists(dir + "/mt_bench_question.jsonl")) GTEST_SKIP() << "no " << dir;
    auto mt = load_prompt_file(dir + "/mt_bench_question.jsonl");
    ASSERT_TRUE(mt.is_ok()) << mt.status().to_string();
    EXPECT_EQ(mt->size(), 80u);
    auto sg = load_prompt_file(dir + "/sharegpt_v3_filtered_500.json");
    ASSERT_TRUE(sg.is_ok()) << sg.status().to_string();
    EXPECT_GT(sg->size(), 400u);
    auto he = load_prompt_file(dir + "/HumanEval.jsonl.gz");
    ASSERT_TRUE(he.is_ok()) << he.status().to_string();
    EXPECT_EQ(he->size(), 164u);
    EXPECT_FALSE(load_prompt_file(dir + "/missing.json").is_ok());
}

TEST(BenchPrompts, DrawsAreSeededAndDistinct) {
    PromptSourceOptions o;
    o.kind = PromptKind::kRandomIds;
    o.input_len = 32;
    o.token_id_min = 10;
    o.token_id_max = 20;
    auto src = PromptSource::create(o);
    ASSERT_TRUE(src.is_ok());
    auto a = src->draw(5, 3), b = src->draw(5, 3), c = src->draw(6, 3);
    ASSERT_EQ(a.size(), 3u);
    EXPECT_EQ(a[0].ids, b[0].ids);
    EXPECT_NE(a[0].ids, c[0].ids);
    EXPECT_EQ(a[0].known_tokens, 32);
    for (int32_t id : a[1].ids) {
        EXPECT_GE(id, 10);
        EXPECT_LT(id, 20);
    }
    o.kind = PromptKind::kRandomWords;
    o.input_len = 5;
    auto words = PromptSource::create(o);
    ASSERT_TRUE(words.is_ok());
    auto w = words->draw(1, 1);
    EXPECT_EQ(std::count(w[0].text.begin(), w[0].text.end(), ' '), 4);
}

TEST(BenchPrompts, FileDrawIsAPermutation) {
    const std::string path = ::testing::TempDir() + "bench_prompts.jsonl";
    {
        std::FILE* f = std::fopen(path.c_str(), "w");
        for (int i = 0; i < 5; ++i) std::fprintf(f, "{\"prompt\":\"p%d\"}\n", i);
        std::fclose(f);
    }
    PromptSourceOptions o;
    o.kind = PromptKind::kFile;
    o.path = path;
    auto src = PromptSource::create(o);
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto d = src->draw(9, 5);
    std::set<std::string> seen;
    for (const auto& p : d) seen.insert(p.text);
    EXPECT_EQ(seen.size(), 5u);
    EXPECT_EQ(src->draw(9, 12).size(), 12u);
}

TEST(BenchPrompts, RequestBodies) {
    SweepOptions o;
    o.max_tokens = 9;
    o.ignore_eos = true;
    Prompt p;
    p.text = "hello";
    auto chat = nlohmann::json::parse(build_request_body(p, "m", o));
    EXPECT_EQ(chat["messages"][0]["content"], "hello");
    EXPECT_EQ(chat["max_tokens"], 9);
    EXPECT_EQ(chat["stream"], true);
    EXPECT_EQ(chat["stream_options"]["include_usage"], true);
    EXPECT_EQ(chat["ignore_eos"], true);
    o.chat = false;
    Prompt ids;
    ids.ids = {1, 2, 3};
    auto comp = nlohmann::json::parse(build_request_body(ids, "m", o));
    EXPECT_EQ(comp["prompt"], nlohmann::json::array({1, 2, 3}));
}

}  // namespace
}  // namespace dsv4::bench
