// Golden renderings of DeepSeek-V4 conversations: data/cases/NAME.json rendered by render_chat
// must equal NAME.prompt.txt byte for byte (text from the official Python encoder, see
// make_goldens.py). NAME.ids.json holds the reference tokenizer's ids for that text; they are
// compared with what our Tokenizer makes of our rendering (skipped without tokenizer.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/tokenizer/test_tokenizer_file.h"
#include "tokenizer/chat_request.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<std::string> case_names() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(fs::path(DSV4_CHAT_DATA_DIR) / "cases"))
        if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

Result<std::string> render_case(const std::string& name) {
    auto doc = nlohmann::ordered_json::parse(read_file(fs::path(DSV4_CHAT_DATA_DIR) / "cases" / (name + ".json")));
    auto req = parse_chat_request(doc);
    if (!req) return req.status();
    return render_chat(req->messages, req->options);
}

class ChatGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatGolden, RendersLikeTheOfficialEncoder) {
    const std::string name = GetParam();
    auto got = render_case(name);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    const std::string want = read_file(fs::path(DSV4_CHAT_DATA_DIR) / (name + ".prompt.txt"));
    ASSERT_FALSE(want.empty());
    if (*got != want) {
        size_t i = 0;
        while (i < got->size() && i < want.size() && (*got)[i] == want[i]) ++i;
        FAIL() << "first difference at byte " << i << "\n got: ..." << got->substr(i > 40 ? i - 40 : 0, 120)
               << "\nwant: ..." << want.substr(i > 40 ? i - 40 : 0, 120);
    }
}

TEST_P(ChatGolden, TokenizesToTheReferenceIds) {
    const std::string name = GetParam();
    auto ids = nlohmann::json::parse(read_file(fs::path(DSV4_CHAT_DATA_DIR) / (name + ".ids.json")));
    ASSERT_TRUE(ids.is_array());
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 0) << "every prompt starts with the BOS id, once";
    EXPECT_NE(ids.size() > 1 ? ids[1].get<int>() : -1, 0);
    DSV4_REQUIRE_TOKENIZER(tok);
    auto prompt = render_case(name);
    ASSERT_TRUE(prompt.is_ok()) << prompt.status().to_string();
    auto got = tok->encode(*prompt);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(nlohmann::json(*got), ids);
}

INSTANTIATE_TEST_SUITE_P(Cases, ChatGolden, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

TEST(ChatGoldenSet, CoversAtLeastTwentyConversations) { EXPECT_GE(case_names().size(), 20u); }

}  // namespace
}  // namespace dsv4
