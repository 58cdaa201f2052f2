// config.json inputs found by tests/fuzz/config_fuzz.cpp (issue 21): each was a crash, undefined
// behaviour, a huge allocation or a silently wrong config before the parser checked it, and must be
// an error that names the field.
#include <climits>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "flash_config_json.h"
#include "model/config.h"

namespace dsv4 {
namespace {

using nlohmann::json;

void expect_error(const json& j, const std::string& needle) {
    auto r = ModelConfig::from_json(j);
    ASSERT_FALSE(r.is_ok()) << "expected an error mentioning " << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

// A double outside the field's integer type was converted to it (undefined behaviour).
TEST(ModelConfigBounds, IntegerFieldOutOfItsTypeIsAnError) {
    json j = flash_config_json();
    j["num_hidden_layers"] = 1e30;
    expect_error(j, "field 'num_hidden_layers' = 1e+30 is out of range");
    j = flash_config_json();
    j["hidden_size"] = int64_t(1) << 32;  // wrapped to 0 through the double
    expect_error(j, "field 'hidden_size' = 4294967296 is out of range");
    j = flash_config_json();
    j["vocab_size"] = uint64_t(1) << 63;
    expect_error(j, "field 'vocab_size' = 9223372036854775808 is out of range");
}

// The layer count sized the per-layer lists before it was checked: INT_MAX hash-routing entries
// (gigabytes) were built for a five-entry layer_types list.
TEST(ModelConfigBounds, LayerCountIsCheckedBeforeTheListsAreBuilt) {
    json j = flash_config_json();
    j.erase("compress_ratios");
    j["layer_types"] = {"sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"};
    j["num_hidden_layers"] = INT_MAX;
    expect_error(j, "field 'num_hidden_layers' = 2147483647 must be in [1, 1024]");
    j["num_hidden_layers"] = 0;
    expect_error(j, "field 'num_hidden_layers' = 0 must be in [1, 1024]");
}

// num_hidden_layers + num_nextn_predict_layers was computed in size_t: -1 MTP layers let a list one
// entry short through, the missing layer silently made sliding-only.
TEST(ModelConfigBounds, NegativeMtpLayerCountIsAnError) {
    json j = flash_config_json();
    j["compress_ratios"].erase(j["compress_ratios"].size() - 1);
    j["compress_ratios"].erase(j["compress_ratios"].size() - 1);
    ASSERT_EQ(j["compress_ratios"].size(), 42u);
    j["num_nextn_predict_layers"] = -1;
    expect_error(j, "field 'num_nextn_predict_layers' = -1 must be in [0, 1024]");
}

// A ratio above INT_MAX was truncated by get<int>() (2^32 became 0: a sliding-only layer).
TEST(ModelConfigBounds, CompressRatioOutOfRangeIsAnError) {
    json j = flash_config_json();
    j["compress_ratios"][3] = int64_t(1) << 32;
    expect_error(j, "compress_ratios[3] must be an integer in [0, 1048576]");
}

// Sizes whose products (hc_mult * hidden_size, window rows in a page) overflowed int further on
// were accepted.
TEST(ModelConfigBounds, SizesAboveTheBoundsAreErrors) {
    json j = flash_config_json();
    j["hc_mult"] = 1 << 30;
    expect_error(j, "field 'hc_mult' = 1073741824 is larger than 64");
    j = flash_config_json();
    j["sliding_window"] = INT_MAX;
    expect_error(j, "field 'sliding_window' = 2147483647 is larger than 1048576");
    j = flash_config_json();
    j["head_dim"] = 1 << 22;
    expect_error(j, "field 'head_dim' = 4194304 is larger than 1048576");
}

// A partial_rotary_factor above 1 was reported as a bad qk_rope_head_dim, a field the file does not
// have.
TEST(ModelConfigBounds, PartialRotaryFactorAboveOneNamesItself) {
    json j = flash_config_json();
    j.erase("qk_rope_head_dim");
    j["partial_rotary_factor"] = 1e300;
    expect_error(j, "field 'partial_rotary_factor' = 1e+300 must be in (0, 1]");
}

// RoPE bases and YaRN parameters that make the frequency tables NaN (log(1) = 0 divides, logs of
// non-positive ratios) were accepted.
TEST(ModelConfigBounds, RopeParametersThatGiveNanTablesAreErrors) {
    json j = flash_config_json();
    j["rope_theta"] = 1;
    expect_error(j, "field 'rope_theta' = 1 must be finite and greater than 1");
    j = flash_config_json();
    j["compress_rope_theta"] = -5;
    expect_error(j, "field 'compress_rope_theta' = -5 must be finite and greater than 1");
    j = flash_config_json();
    j["rope_scaling"]["factor"] = 0;
    expect_error(j, "YaRN field 'factor' = 0 must be finite and positive");
    j = flash_config_json();
    j["rope_scaling"]["beta_slow"] = -1;
    expect_error(j, "YaRN field 'beta_slow' = -1 must be finite and positive");
}

// validate() read compress_ratios[i] for every layer without checking that list's length (a read
// past its end for a config built in code with a short list, and the config passed).
TEST(ModelConfigBounds, ValidateChecksTheCompressRatioListLength) {
    auto r = ModelConfig::from_json(flash_config_json());
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ModelConfig c = *r;
    c.compress_ratios.resize(10);
    const Status st = c.validate();
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("compress_ratios' has 10 entries but layer_types has 43"), std::string::npos)
        << st.message();
}

}  // namespace
}  // namespace dsv4
