// Loading small synthetic tokenizer.json files: what is accepted, and that everything else is
// rejected with a message naming the problem.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

using nlohmann::json;

// A tiny byte-level BPE over the 256-symbol alphabet plus two merges and two added tokens.
json tiny() {
    json vocab = json::object();
    int id = 0;
    // Byte-level alphabet in byte order (same rule as byte_level.cpp, written independently).
    int extra = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const int cp = printable ? b : extra++;
        std::string s;
        if (cp < 0x80)
            s.push_back(static_cast<char>(cp));
        else {
            s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
            s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        }
        vocab[s] = id++;
    }
    vocab["he"] = id++;
    vocab["hel"] = id++;
    json added = json::array({
        {{"id", 33},
         {"content", "!"},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"special", true}},
        {{"id", id},
         {"content", "<sp>"},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"special", true}},
        {{"id", id + 1},
         {"content", "<x>"},
         {"single_word", false},
         {"lstrip", true},
         {"rstrip", true},
         {"normalized", true},
         {"special", false}},
    });
    return json{
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           json::array(
               {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+|\\S+"}}}, {"behavior", "Isolated"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab", vocab},
          {"merges", json::array({"h e", json::array({"he", "l"})})}}}};
}

Status load(const json& j) {
    auto r = Tokenizer::from_json_text(j.dump());
    return r.is_ok() ? Status::ok() : r.status();
}

void expect_rejected(const json& j, const std::string& needle) {
    Status s = load(j);
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(TokenizerJson, TinyTokenizerWorks) {
    auto r = Tokenizer::from_json_text(tiny().dump());
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const Tokenizer& t = r.value();
    EXPECT_EQ(t.vocab_size(), 260);
    auto ids = t.encode("hello  <sp>hel!");
    ASSERT_TRUE(ids.is_ok());
    // Byte tokens have id == byte; "hel" merges, "lo" does not; "!" is an added special token
    // that keeps its vocab id.
    EXPECT_EQ(*ids, (std::vector<int32_t>{257, 'l', 'o', ' ', ' ', 258, 257, '!'}));
    EXPECT_EQ(t.decode(*ids, false), "hello  <sp>hel!");
    EXPECT_EQ(t.decode(*ids, true), "hello  hel");
}

TEST(TokenizerJson, LstripRstripEatSurroundingWhitespace) {
    auto r = Tokenizer::from_json_text(tiny().dump());
    ASSERT_TRUE(r.is_ok());
    auto ids = r->encode("a  <x>  b");
    ASSERT_TRUE(ids.is_ok());
    EXPECT_EQ(*ids, (std::vector<int32_t>{'a', 259, 'b'}));
}

TEST(TokenizerJson, RejectsMalformedAndUnsupported) {
    expect_rejected(json::parse("[1]"), "top level");
    EXPECT_FALSE(Tokenizer::from_json_text("{not json").is_ok());
    EXPECT_FALSE(Tokenizer::from_json_text("").is_ok());
    {
        json j = tiny();
        j["model"]["type"] = "Unigram";
        expect_rejected(j, "model type Unigram");
    }
    {
        json j = tiny();
        j["model"]["merges"].push_back("q z zz");
        expect_rejected(j, "merges[2]");
    }
    {
        json j = tiny();
        j["model"]["merges"].push_back("he xyz");
        expect_rejected(j, "missing from the vocab");
    }
    {
        json j = tiny();
        j["model"]["byte_fallback"] = true;
        expect_rejected(j, "byte_fallback");
    }
    {
        json j = tiny();
        j["model"]["dropout"] = 0.1;
        expect_rejected(j, "dropout");
    }
    {
        json j = tiny();
        j["model"]["vocab"]["he"] = "x";
        expect_rejected(j, "integer id");
    }
    {
        json j = tiny();
        j["normalizer"] = {{"type", "NFKC"}};
        expect_rejected(j, "normalizer of type NFKC");
    }
    {
        json j = tiny();
        j["decoder"] = {{"type", "WordPiece"}};
        expect_rejected(j, "decoder of type WordPiece");
    }
    {
        json j = tiny();
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
        expect_rejected(j, "does not compile");
    }
    {
        json j = tiny();
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
        expect_rejected(j, "\\w");
    }
    {
        json j = tiny();
        j["pre_tokenizer"]["pretokenizers"].erase(1);
        expect_rejected(j, "ByteLevel");
    }
    {
        json j = tiny();
        j["added_tokens"][1]["id"] = 300;
        expect_rejected(j, "would assign id 258");
    }
    {
        json j = tiny();
        j["added_tokens"][1]["single_word"] = true;
        expect_rejected(j, "single_word");
    }
    {
        json j = tiny();
        j["truncation"] = {{"max_length", 5}};
        expect_rejected(j, "truncation");
    }
    {
        json j = tiny();
        j.erase("model");
        expect_rejected(j, "missing model");
    }
}

TEST(TokenizerJson, MissingFileIsNotFound) {
    auto r = Tokenizer::from_file("/nonexistent/tokenizer.json");
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace dsv4
