// model.safetensors.index.json parsing (model/safetensors_index.h): what an accepted index gives,
// and the shard names refused because they would name another file than the index does.
#include <string>

#include <gtest/gtest.h>

#include "model/safetensors_index.h"

namespace dsv4 {
namespace {

const std::string kWhere = "/ckpt/model.safetensors.index.json";

TEST(SafetensorsIndex, GroupsSortedTensorsByShardAndKeepsMetadata) {
    auto r = parse_safetensors_index(
        R"({"metadata":{"total_size":24,"format":"pt"},"weight_map":{"z":"s1","b":"s2","a":"s1"}})", kWhere);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->shards.size(), 2u);
    EXPECT_EQ(r->shards.at("s1"), (std::vector<std::string>{"a", "z"}));
    EXPECT_EQ(r->shards.at("s2"), (std::vector<std::string>{"b"}));
    ASSERT_TRUE(r->metadata.has_value());
    EXPECT_EQ(r->metadata->at("total_size"), "24");  // non-strings as their JSON text
    EXPECT_EQ(r->metadata->at("format"), "pt");
    auto no_md = parse_safetensors_index(R"({"weight_map":{}})", kWhere);
    ASSERT_TRUE(no_md.is_ok());
    EXPECT_FALSE(no_md->metadata.has_value());
}

void expect_refused(const std::string& text, const std::string& needle) {
    auto r = parse_safetensors_index(text, kWhere);
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(r.status().message().rfind(kWhere + ": ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(SafetensorsIndex, RefusesShardNamesOutsideTheDirectory) {
    expect_refused(R"({"weight_map":{"a":"../s1"}})", R"(tensor 'a': shard "../s1")");
    expect_refused(R"({"weight_map":{"a":"/etc/passwd"}})", R"(shard "/etc/passwd")");
    expect_refused(R"({"weight_map":{"a":""}})", R"(shard "")");
    // Names of the directory itself.
    expect_refused(R"({"weight_map":{"a":"."}})", R"(shard ".")");
    expect_refused(R"({"weight_map":{"a":"sub/"}})", R"(shard "sub/")");
    expect_refused(R"({"weight_map":{"a":"sub/."}})", R"(shard "sub/.")");
    // A NUL byte: the C string would name "s1", and the message shows it escaped.
    expect_refused(R"({"weight_map":{"a":"s1\u0000x"}})", R"(shard "s1\u0000x")");
}

TEST(SafetensorsIndex, MalformedIndexErrorsSayWhatIsWrong) {
    expect_refused("", "not a valid JSON object");
    expect_refused("[]", "not a valid JSON object");
    expect_refused(R"({"metadata":{}})", "missing 'weight_map' object");
    expect_refused(R"({"weight_map":[]})", "missing 'weight_map' object");
    expect_refused(R"({"weight_map":{"a":3}})", "tensor 'a': shard is not a string");
}

}  // namespace
}  // namespace dsv4
