// libFuzzer target for config.json (src/model/config.h), issue 21 item 2. The first byte picks the
// mode:
//  - even: the rest is the file's text;
//  - odd: the rest edits a valid config (the DeepSeek-V4-Flash one, official or transformers
//    naming): up to 8 fields set, replaced or removed, with values of any JSON type, extremes
//    included, so the checks behind the parse are reached, not only the JSON reader.
// Invariants (a violation traps):
//  - parsing returns a config or an error status with a message naming config.json, never throws;
//  - an accepted config passes validate(); its per-layer lists have num_hidden_layers entries; a
//    layer's compress ratio is 0 exactly when it is sliding-only; the derived sizes (hc_dim,
//    hc_mix_dim, nope_dim, heads_per_group) are exact (UBSan reports an overflow);
//  - the KV page layout built from it (what every runner does first, model/kv_layout.h) is an
//    error or a layout whose offsets lie inside its areas, in f32 and fp8 rows;
//  - the same JSON value written out and parsed again gives the same config.
// Built only with -DDSV4_FUZZ=ON and clang.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <fuzzer/FuzzedDataProvider.h>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/kv_layout.h"

namespace {

using dsv4::ModelConfig;
using nlohmann::json;

void check(bool ok) {
    if (!ok) __builtin_trap();
}

bool same(const ModelConfig& a, const ModelConfig& b) {
    return a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size && a.n_layers == b.n_layers &&
           a.n_heads == b.n_heads && a.n_kv_heads == b.n_kv_heads && a.head_dim == b.head_dim &&
           a.rope_dim == b.rope_dim && a.q_lora_rank == b.q_lora_rank && a.o_lora_rank == b.o_lora_rank &&
           a.o_groups == b.o_groups && a.sliding_window == b.sliding_window && a.layer_types == b.layer_types &&
           a.compress_ratios == b.compress_ratios && a.mlp_types == b.mlp_types && a.rope_theta == b.rope_theta &&
           a.compress_rope_theta == b.compress_rope_theta && a.yarn.enabled == b.yarn.enabled &&
           a.yarn.factor == b.yarn.factor && a.yarn.original_max_position == b.yarn.original_max_position &&
           a.yarn.beta_fast == b.yarn.beta_fast && a.yarn.beta_slow == b.yarn.beta_slow &&
           a.max_position_embeddings == b.max_position_embeddings && a.index_n_heads == b.index_n_heads &&
           a.index_head_dim == b.index_head_dim && a.index_topk == b.index_topk && a.hc_mult == b.hc_mult &&
           a.hc_sinkhorn_iters == b.hc_sinkhorn_iters && a.hc_eps == b.hc_eps &&
           a.n_routed_experts == b.n_routed_experts && a.n_shared_experts == b.n_shared_experts &&
           a.n_experts_per_tok == b.n_experts_per_tok && a.moe_intermediate_size == b.moe_intermediate_size &&
           a.routed_scaling_factor == b.routed_scaling_factor && a.norm_topk_prob == b.norm_topk_prob &&
           a.swiglu_limit == b.swiglu_limit && a.rms_norm_eps == b.rms_norm_eps &&
           a.num_nextn_predict_layers == b.num_nextn_predict_layers && a.bos_token_id == b.bos_token_id &&
           a.eos_token_id == b.eos_token_id && a.expert_format == b.expert_format &&
           a.tie_word_embeddings == b.tie_word_embeddings;
}

void check_layout(const ModelConfig& c, int64_t page_tokens, dsv4::KvRowFormat rows) {
    auto r = dsv4::KvLayout::make(c, page_tokens, 4, rows);
    if (!r.is_ok()) {
        check(!r.status().message().empty());
        return;
    }
    const dsv4::KvLayout& L = *r;
    check(L.page_elems > 0 && L.page_bytes == L.page_elems * 4 && L.n_state_pages >= 0);
    check(L.state_elems <= L.n_state_pages * L.page_elems);
    check(int(L.layers.size()) == c.n_layers);
    for (const auto& s : L.layers) {
        check(s.ring_offset >= 0 && s.ring_offset < L.state_elems);
        if (s.ratio > 0) {
            check(s.comp_gate_offset > s.comp_kv_offset && s.comp_gate_offset < L.state_elems);
            check(s.row_offset >= 0 && s.row_offset + s.rows_per_page * L.row_words_main <= L.page_elems);
        }
    }
}

// Checks an accepted config's invariants.
void check_accepted(const ModelConfig& c) {
    check(c.validate().is_ok());
    check(c.n_layers > 0 && int(c.layer_types.size()) == c.n_layers && int(c.compress_ratios.size()) == c.n_layers &&
          int(c.mlp_types.size()) == c.n_layers);
    for (int l = 0; l < c.n_layers; ++l)
        check((c.compress_ratio(l) == 0) == !c.is_compressed(l) && c.compress_ratio(l) >= 0);
    check(int64_t(c.hc_dim()) == int64_t(c.hc_mult) * c.hidden_size);
    check(int64_t(c.hc_mix_dim()) == (2 + int64_t(c.hc_mult)) * c.hc_mult);
    check(c.nope_dim() >= 0 && c.heads_per_group() * c.o_groups == c.n_heads);
    check(!c.summary().empty());
    check_layout(c, 64, dsv4::KvRowFormat::kF32);
    check_layout(c, 128, dsv4::KvRowFormat::kFp8);
}

void run(const std::string& text) {
    auto r = ModelConfig::from_json_text(text);
    if (!r.is_ok()) {
        check(r.status().message().find("config.json") != std::string::npos);
        return;
    }
    check_accepted(*r);
    auto again = ModelConfig::from_json(json::parse(json::parse(text).dump()));
    check(again.is_ok() && same(*r, *again));
}

// DeepSeek-V4-Flash's config.json (official naming), with the transformers-naming fields too so
// that an edit can remove either set.
const json& base() {
    static const json j = json::parse(R"({
      "model_type": "deepseek_v4", "vocab_size": 129280, "hidden_size": 4096, "num_hidden_layers": 43,
      "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
      "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8, "sliding_window": 128,
      "num_nextn_predict_layers": 1,
      "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4,
                          128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0],
      "num_hash_layers": 3, "rope_theta": 10000, "compress_rope_theta": 160000,
      "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                       "beta_fast": 32, "beta_slow": 1},
      "max_position_embeddings": 1048576, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
      "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "n_routed_experts": 256, "n_shared_experts": 1,
      "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "routed_scaling_factor": 1.5,
      "norm_topk_prob": true, "swiglu_limit": 10.0, "rms_norm_eps": 1e-6, "bos_token_id": 0, "eos_token_id": 1,
      "scoring_func": "sqrtsoftplus", "hidden_act": "silu", "topk_method": "noaux_tc", "expert_dtype": "fp4",
      "tie_word_embeddings": false
    })");
    return j;
}

const char* const kFields[] = {"model_type",
                               "vocab_size",
                               "hidden_size",
                               "num_hidden_layers",
                               "num_attention_heads",
                               "num_key_value_heads",
                               "head_dim",
                               "qk_rope_head_dim",
                               "partial_rotary_factor",
                               "q_lora_rank",
                               "o_lora_rank",
                               "o_groups",
                               "sliding_window",
                               "num_nextn_predict_layers",
                               "compress_ratios",
                               "layer_types",
                               "compress_rates",
                               "mlp_layer_types",
                               "num_hash_layers",
                               "rope_theta",
                               "compress_rope_theta",
                               "rope_scaling",
                               "rope_parameters",
                               "max_position_embeddings",
                               "index_n_heads",
                               "index_head_dim",
                               "index_topk",
                               "hc_mult",
                               "hc_sinkhorn_iters",
                               "hc_eps",
                               "n_routed_experts",
                               "n_shared_experts",
                               "num_experts_per_tok",
                               "moe_intermediate_size",
                               "routed_scaling_factor",
                               "norm_topk_prob",
                               "swiglu_limit",
                               "rms_norm_eps",
                               "bos_token_id",
                               "eos_token_id",
                               "scoring_func",
                               "hidden_act",
                               "topk_method",
                               "expert_dtype",
                               "tie_word_embeddings",
                               "quantization_config",
                               "type",
                               "rope_type",
                               "factor",
                               "original_max_position_embeddings",
                               "beta_fast",
                               "beta_slow",
                               "attention_factor",
                               "main",
                               "compress",
                               "compressed_sparse_attention",
                               "heavily_compressed_attention"};
const char* const kWords[] = {"deepseek_v4",
                              "yarn",
                              "default",
                              "sliding_attention",
                              "compressed_sparse_attention",
                              "heavily_compressed_attention",
                              "hash_moe",
                              "moe",
                              "fp4",
                              "fp8",
                              "silu",
                              "sqrtsoftplus",
                              "noaux_tc",
                              ""};

json fuzz_value(FuzzedDataProvider& fdp, int depth) {
    switch (fdp.ConsumeIntegralInRange<int>(0, depth > 0 ? 9 : 7)) {
        case 0:
            return fdp.ConsumeIntegralInRange<int64_t>(-2, 300);
        case 1:
            return fdp.ConsumeIntegral<int64_t>();
        case 2:
            return fdp.ConsumeIntegral<uint64_t>();
        case 3:
            return fdp.ConsumeFloatingPoint<double>();  // non-finite values are written as null
        case 4:
            return fdp.PickValueInArray(kWords);
        case 5:
            return fdp.ConsumeBool();
        case 6:
            return nullptr;
        case 7:
            return fdp.ConsumeRandomLengthString(16);
        case 8: {
            json a = json::array();
            const int n = fdp.ConsumeIntegralInRange<int>(0, 64);
            const json v = fuzz_value(fdp, depth - 1);
            for (int i = 0; i < n; ++i) a.push_back(fdp.ConsumeBool() ? v : fuzz_value(fdp, depth - 1));
            return a;
        }
        default: {
            json o = json::object();
            for (int n = fdp.ConsumeIntegralInRange<int>(0, 5); n > 0; --n)
                o[fdp.PickValueInArray(kFields)] = fuzz_value(fdp, depth - 1);
            return o;
        }
    }
}

std::string edited(FuzzedDataProvider& fdp) {
    json j = base();
    if (fdp.ConsumeBool()) {  // transformers naming
        j.erase("compress_ratios");
        j.erase("num_hash_layers");
        j["layer_types"] = json::array();
        j["mlp_layer_types"] = json::array();
        for (int l = 0; l < 43; ++l) {
            j["layer_types"].push_back(l < 2   ? "sliding_attention"
                                       : l % 2 ? "heavily_compressed_attention"
                                               : "compressed_sparse_attention");
            j["mlp_layer_types"].push_back(l < 3 ? "hash_moe" : "moe");
        }
        j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
    }
    for (int n = fdp.ConsumeIntegralInRange<int>(1, 8); n > 0; --n) {
        const char* field = fdp.PickValueInArray(kFields);
        if (fdp.ConsumeIntegralInRange<int>(0, 5) == 0)
            j.erase(field);
        else
            j[field] = fuzz_value(fdp, 2);
    }
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    if (data[0] % 2 == 0) {
        run(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
    } else {
        FuzzedDataProvider fdp(data + 1, size - 1);
        run(edited(fdp));
    }
    return 0;
}
