// The head_dim-512 test model shared by the CUDA tests of the fast attention path
// (cuda_kv_fp8_test, cuda_batched_prefill_test).
#pragma once

#include "model/config.h"
#include "model/weights.h"

namespace dsv4 {

// head_dim 512 (the fast kernel's), small everything else: 16 heads, window 32, CSA r4 (top-8),
// HCA r16, vocab 1024.
inline ModelConfig small512_config() {
    ModelConfig c = tiny_model_config();
    c.vocab_size = 1024;
    c.hidden_size = 64;
    c.n_layers = 4;
    c.n_heads = 16;
    c.head_dim = 512;
    c.rope_dim = 64;
    c.q_lora_rank = 64;
    c.o_lora_rank = 32;
    c.o_groups = 2;
    c.sliding_window = 32;
    c.compress_ratios = {0, 4, 16, 4};
    c.layer_types = {AttnType::kSliding, AttnType::kCSA, AttnType::kHCA, AttnType::kCSA};
    c.mlp_types = {MoeRouting::kHash, MoeRouting::kLearned, MoeRouting::kLearned, MoeRouting::kLearned};
    c.index_n_heads = 4;
    c.index_head_dim = 64;
    c.index_topk = 8;
    c.n_routed_experts = 8;
    c.n_experts_per_tok = 2;
    c.moe_intermediate_size = 32;
    return c;
}

// DeepSeek-V4-Flash's attention geometry at small width: 64 heads x 512, window 128, CSA r4 with
// the top-512 indexer (64 heads x 128), HCA r128.
inline ModelConfig flash_geometry_config() {
    ModelConfig c = small512_config();
    c.n_layers = 3;
    c.n_heads = 64;
    c.o_groups = 8;
    c.sliding_window = 128;
    c.compress_ratios = {0, 4, 128};
    c.layer_types = {AttnType::kSliding, AttnType::kCSA, AttnType::kHCA};
    c.mlp_types = {MoeRouting::kHash, MoeRouting::kLearned, MoeRouting::kLearned};
    c.index_n_heads = 64;
    c.index_head_dim = 128;
    c.index_topk = 512;
    return c;
}

}  // namespace dsv4
