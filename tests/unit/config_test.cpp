// ModelConfig parsing in both namings, and validation errors that name the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "flash_config_json.h"

namespace dsv4 {
namespace {

using nlohmann::json;

TEST(ModelConfig, ParsesOfficialFlash) {
    auto r = ModelConfig::from_json(flash_config_json());
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const ModelConfig& c = *r;
    EXPECT_EQ(c.n_layers, 43);
    int n_csa = 0, n_hca = 0, n_sw = 0, n_hash = 0;
    for (int i = 0; i < 43; ++i) {
        (c.layer_types[i] == AttnType::kCSA ? n_csa : c.layer_types[i] == AttnType::kHCA ? n_hca : n_sw)++;
        n_hash += c.mlp_types[i] == MoeRouting::kHash;
    }
    EXPECT_EQ(n_sw, 2);
    EXPECT_EQ(n_csa, 21);
    EXPECT_EQ(n_hca, 20);
    EXPECT_EQ(n_hash, 3);
    EXPECT_EQ(c.layer_types[2], AttnType::kCSA);
    EXPECT_EQ(c.layer_types[3], AttnType::kHCA);
    EXPECT_EQ(c.compress_ratio(3), 128);
    EXPECT_TRUE(c.yarn.enabled);
    EXPECT_EQ(c.yarn.factor, 16.0);
    EXPECT_EQ(c.nope_dim(), 448);
    EXPECT_EQ(c.hc_mix_dim(), 24);
    EXPECT_EQ(c.expert_format, ExpertFormat::kFp4);
}

TEST(ModelConfig, ParsesTransformersNaming) {
    json j = {{"model_type", "deepseek_v4"},
              {"vocab_size", 512},
              {"hidden_size", 128},
              {"num_hidden_layers", 5},
              {"layer_types",
               {"sliding_attention", "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                "compressed_sparse_attention"}},
              {"mlp_layer_types", {"hash_moe", "hash_moe", "hash_moe", "moe", "moe"}},
              {"num_attention_heads", 8},
              {"num_key_value_heads", 1},
              {"head_dim", 64},
              {"partial_rotary_factor", 0.25},
              {"q_lora_rank", 64},
              {"o_groups", 4},
              {"o_lora_rank", 32},
              {"n_routed_experts", 16},
              {"num_experts_per_tok", 4},
              {"n_shared_experts", 1},
              {"moe_intermediate_size", 64},
              {"compress_rates", {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 16}}},
              {"sliding_window", 16},
              {"index_n_heads", 8},
              {"index_head_dim", 32},
              {"index_topk", 4},
              {"rope_parameters",
               {{"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                {"compress",
                 {{"rope_type", "yarn"},
                  {"factor", 16.0},
                  {"original_max_position_embeddings", 64},
                  {"beta_fast", 32},
                  {"beta_slow", 1},
                  {"rope_theta", 160000.0},
                  {"attention_factor", 1.0}}}}},
              {"max_position_embeddings", 1024},
              {"swiglu_limit", 10.0},
              {"routed_scaling_factor", 1.5},
              {"scoring_func", "sqrtsoftplus"}};
    auto r = ModelConfig::from_json(j);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->rope_dim, 16);
    EXPECT_EQ(r->compress_ratio(3), 16);
    EXPECT_EQ(r->layer_types[3], AttnType::kHCA);
    EXPECT_EQ(r->mlp_types[2], MoeRouting::kHash);
    EXPECT_EQ(r->mlp_types[3], MoeRouting::kLearned);
    EXPECT_EQ(r->compress_rope_theta, 160000.0);
    EXPECT_EQ(r->yarn.original_max_position, 64.0);
}

void expect_error(json j, const std::string& needle) {
    auto r = ModelConfig::from_json(j);
    ASSERT_FALSE(r.is_ok()) << "expected an error mentioning " << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(ModelConfig, ErrorsNameTheField) {
    json j = flash_config_json();
    j["model_type"] = "llama";
    expect_error(j, "unknown model_type 'llama'");
    j = flash_config_json();
    j.erase("hidden_size");
    expect_error(j, "missing required field 'hidden_size'");
    j = flash_config_json();
    j["compress_ratios"] = {0, 4, 128};
    expect_error(j, "compress_ratios has 3 entries");
    j = flash_config_json();
    j["o_groups"] = 7;
    expect_error(j, "o_groups");
    j = flash_config_json();
    j["qk_rope_head_dim"] = 1024;
    expect_error(j, "qk_rope_head_dim");
    j = flash_config_json();
    j["num_experts_per_tok"] = 300;
    expect_error(j, "num_experts_per_tok");
    j = flash_config_json();
    j["hidden_size"] = "big";
    expect_error(j, "'hidden_size' must be a number");
    expect_error(json::array(), "top level must be a JSON object");
    EXPECT_FALSE(ModelConfig::from_json_text("{not json").is_ok());
}

}  // namespace
}  // namespace dsv4
