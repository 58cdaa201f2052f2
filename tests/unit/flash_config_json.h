// The official DeepSeek-V4-Flash config.json (spec §1.1), shared by the config tests.
#pragma once

#include <nlohmann/json.hpp>

namespace dsv4 {

inline nlohmann::json flash_config_json() {
    nlohmann::json ratios = nlohmann::json::array({0, 0});
    for (int i = 0; i < 20; ++i) {
        ratios.push_back(4);
        ratios.push_back(128);
    }
    ratios.push_back(4);
    ratios.push_back(0);
    return nlohmann::json{
        {"model_type", "deepseek_v4"},
        {"vocab_size", 129280},
        {"hidden_size", 4096},
        {"num_hidden_layers", 43},
        {"num_attention_heads", 64},
        {"num_key_value_heads", 1},
        {"head_dim", 512},
        {"qk_rope_head_dim", 64},
        {"q_lora_rank", 1024},
        {"o_lora_rank", 1024},
        {"o_groups", 8},
        {"sliding_window", 128},
        {"compress_ratios", ratios},
        {"compress_rope_theta", 160000},
        {"rope_theta", 10000},
        {"rope_scaling",
         {{"type", "yarn"},
          {"factor", 16},
          {"original_max_position_embeddings", 65536},
          {"beta_fast", 32},
          {"beta_slow", 1}}},
        {"max_position_embeddings", 1048576},
        {"index_n_heads", 64},
        {"index_head_dim", 128},
        {"index_topk", 512},
        {"hc_mult", 4},
        {"hc_sinkhorn_iters", 20},
        {"hc_eps", 1e-6},
        {"n_routed_experts", 256},
        {"n_shared_experts", 1},
        {"num_experts_per_tok", 6},
        {"moe_intermediate_size", 2048},
        {"scoring_func", "sqrtsoftplus"},
        {"topk_method", "noaux_tc"},
        {"norm_topk_prob", true},
        {"routed_scaling_factor", 1.5},
        {"num_hash_layers", 3},
        {"swiglu_limit", 10.0},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-6},
        {"num_nextn_predict_layers", 1},
        {"tie_word_embeddings", false},
        {"bos_token_id", 0},
        {"eos_token_id", 1},
        {"expert_dtype", "fp4"},
        {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}}}};
}

}  // namespace dsv4
