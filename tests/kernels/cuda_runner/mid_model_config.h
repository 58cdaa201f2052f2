// The mid-size test model of the fast-path tests (cuda_fast_e2e_test, multi_gpu_test): the
// tiny_quant golden's config widened so that every op class takes the fast kernels (d and the
// MoE width multiples of 512, head_dim 512, 16 heads).
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsv4 {

// flip_free: all layers hash-routed and top-32 indexer (no discrete choice a bf16 rounding can
// flip); otherwise layers 1-2 score-routed with top-4. Errors when the golden config is missing.
inline Result<nlohmann::json> mid_model_config(const std::string& golden_dir, bool flip_free) {
    std::ifstream in(golden_dir + "/tiny_quant/config.json");
    if (!in) return invalid_argument("no tiny_quant config under {}", golden_dir);
    nlohmann::json j = nlohmann::json::parse(in);
    j["hidden_size"] = 1024;
    j["q_lora_rank"] = 1024;
    j["num_attention_heads"] = 16;
    j["head_dim"] = 512;
    j["qk_rope_head_dim"] = 64;
    j["o_groups"] = 8;
    j["o_lora_rank"] = 512;
    j["n_routed_experts"] = 16;
    j["num_experts_per_tok"] = 4;
    j["moe_intermediate_size"] = 1024;
    j["num_hidden_layers"] = 3;
    j["layer_types"] = {"sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"};
    j["compress_ratios"] = {0, 4, 16};
    if (flip_free)
        j["mlp_layer_types"] = {"hash_moe", "hash_moe", "hash_moe"};
    else
        j["mlp_layer_types"] = {"hash_moe", "moe", "moe"};
    j["num_hash_layers"] = flip_free ? 3 : 1;
    j["index_n_heads"] = 16;
    j["index_head_dim"] = 128;
    j["index_topk"] = flip_free ? 32 : 4;
    j["sliding_window"] = 16;
    j["vocab_size"] = 512;
    return j;
}

}  // namespace dsv4
