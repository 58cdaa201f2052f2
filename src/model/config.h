// ModelConfig: the DeepSeek-V4 architecture, parsed and validated from a Hugging Face
// `config.json` (model_type "deepseek_v4"). Accepts both the official naming
// (`compress_ratios`, `num_hash_layers`, `rope_scaling`, ...) and the transformers naming
// (`layer_types`, `compress_rates`, `mlp_layer_types`, `rope_parameters`, ...). Spec §1.
// Immutable after parsing; derived sizes are methods.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace dsv4 {

enum class AttnType : uint8_t { kSliding = 0, kCSA = 4, kHCA = 128 };
enum class MoeRouting : uint8_t { kHash, kLearned };
enum class ExpertFormat : uint8_t { kFp4, kFp8, kBf16 };

const char* attn_type_name(AttnType t);

// YaRN parameters of the "compress" RoPE table (CSA/HCA layers). Spec §2.4.
struct YarnParams {
    bool enabled = true;
    double factor = 16.0;
    double original_max_position = 65536.0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
};

// Upper bounds an accepted config stays within (far above DeepSeek-V4-Pro's sizes), so that the
// sizes derived from it (products of two dimensions, a layer count times a state size) fit their
// integer types: config.json is input, and a huge value must be an error, not an overflow.
inline constexpr int64_t kMaxDim = int64_t(1) << 20;  // every width, head count, rank, window, ratio
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxVocab = (int64_t(1) << 31) - 1;  // token ids are int32
inline constexpr int64_t kMaxHcMult = 64;
inline constexpr int64_t kMaxPositions = int64_t(1) << 40;

struct ModelConfig {
    int64_t vocab_size = 0;
    int hidden_size = 0;  // d
    int n_layers = 0;     // decoder blocks (MTP not counted)
    int n_heads = 0;      // H query heads
    int n_kv_heads = 1;   // must be 1 (one shared K=V latent)
    int head_dim = 0;     // D
    int rope_dim = 0;     // R: trailing rotary dims of each head
    int q_lora_rank = 0;
    int o_lora_rank = 0;
    int o_groups = 0;
    int sliding_window = 0;             // W, includes the current token
    std::vector<AttnType> layer_types;  // [n_layers]
    std::vector<int> compress_ratios;   // [n_layers]: 0 sliding-only, else the layer's ratio r
    // The MTP blocks' entries of an official compress_ratios list ([num_nextn_predict_layers] or empty:
    // 0 when absent). dsv4 implements MTP blocks of ratio 0 (spec §2.11); others are not loaded.
    std::vector<int> mtp_compress_ratios;
    std::vector<MoeRouting> mlp_types;      // [n_layers]
    double rope_theta = 10000.0;            // main table (sliding-only layers)
    double compress_rope_theta = 160000.0;  // compress table (CSA/HCA layers)
    YarnParams yarn;
    int64_t max_position_embeddings = 0;
    int index_n_heads = 0;
    int index_head_dim = 0;
    int index_topk = 0;
    int hc_mult = 4;
    int hc_sinkhorn_iters = 20;
    double hc_eps = 1e-6;
    int n_routed_experts = 0;
    int n_shared_experts = 1;
    int n_experts_per_tok = 0;
    int moe_intermediate_size = 0;
    double routed_scaling_factor = 1.0;
    bool norm_topk_prob = true;
    double swiglu_limit = 0.0;  // 0 = no clamp
    double rms_norm_eps = 1e-6;
    int num_nextn_predict_layers = 0;
    int64_t bos_token_id = 0;
    int64_t eos_token_id = 1;
    ExpertFormat expert_format = ExpertFormat::kFp4;
    bool tie_word_embeddings = false;

    // Parses and validates. Errors name the field and the problem.
    static Result<ModelConfig> from_json(const nlohmann::json& j);
    static Result<ModelConfig> from_json_text(const std::string& text);
    static Result<ModelConfig> from_file(const std::string& path);

    // Checks internal consistency (dimensions, list lengths). Called by from_json.
    Status validate() const;
    std::string summary() const;

    // Derived sizes.
    int nope_dim() const { return head_dim - rope_dim; }
    int heads_per_group() const { return n_heads / o_groups; }
    int hc_dim() const { return hc_mult * hidden_size; }        // flattened mHC input
    int hc_mix_dim() const { return (2 + hc_mult) * hc_mult; }  // 24 for hc_mult 4
    int compress_ratio(int layer) const { return compress_ratios[layer]; }
    bool is_compressed(int layer) const { return layer_types[layer] != AttnType::kSliding; }
};

}  // namespace dsv4
