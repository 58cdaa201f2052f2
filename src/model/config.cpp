#include "model/config.h"

#include <cmath>
#include <limits>
#include <utility>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace dsv4 {

using nlohmann::json;

const char* attn_type_name(AttnType t) {
    switch (t) {
        case AttnType::kSliding:
            return "sliding";
        case AttnType::kCSA:
            return "csa";
        case AttnType::kHCA:
            return "hca";
    }
    return "?";
}

namespace {

// Field readers: every error names the field.
Status missing(const char* field) {
    return error(StatusCode::kInvalidArgument, "config.json: missing required field '{}'", field);
}

template <typename T>
Status read_number(const json& j, const char* field, T& out, bool required) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) return required ? missing(field) : Status::ok();
    if (!it->is_number())
        return error(StatusCode::kInvalidArgument, "config.json: field '{}' must be a number, got {}", field,
                     it->type_name());
    if constexpr (std::is_integral_v<T>) {
        if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()))
            return error(StatusCode::kInvalidArgument, "config.json: field '{}' must be an integer, got {}", field,
                         it->dump());
        // Range-checked before the conversion: an out-of-range value is an error, not UB.
        using L = std::numeric_limits<T>;
        bool fits = false;
        if (it->is_number_unsigned()) {
            fits = it->get<uint64_t>() <= uint64_t(L::max());
        } else if (it->is_number_integer()) {
            const int64_t v = it->get<int64_t>();
            fits = v >= int64_t(L::min()) && v <= int64_t(L::max());
        } else {
            const double d = it->get<double>();
            fits = d >= double(L::min()) && d < double(L::max()) + 1.0;  // L::max() + 1 is a power of two
        }
        if (!fits)
            return error(StatusCode::kInvalidArgument, "config.json: field '{}' = {} is out of range", field,
                         it->dump());
        out = it->is_number_float()      ? T(it->get<double>())
              : it->is_number_unsigned() ? T(it->get<uint64_t>())
                                         : T(it->get<int64_t>());
    } else {
        out = it->get<T>();
    }
    return Status::ok();
}

Status read_bool(const json& j, const char* field, bool& out) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) return Status::ok();
    if (!it->is_boolean())
        return error(StatusCode::kInvalidArgument, "config.json: field '{}' must be a boolean", field);
    out = it->get<bool>();
    return Status::ok();
}

Status read_string(const json& j, const char* field, std::string& out) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) return Status::ok();
    if (!it->is_string()) return error(StatusCode::kInvalidArgument, "config.json: field '{}' must be a string", field);
    out = it->get<std::string>();
    return Status::ok();
}

Status read_yarn(const json& r, const char* field, YarnParams& yarn, double* theta) {
    if (!r.is_object()) return error(StatusCode::kInvalidArgument, "config.json: field '{}' must be an object", field);
    std::string type;
    if (r.contains("rope_type") && r["rope_type"].is_string())
        type = r["rope_type"];
    else if (r.contains("type") && r["type"].is_string())
        type = r["type"];
    if (theta) DSV4_RETURN_IF_ERROR(read_number(r, "rope_theta", *theta, false));
    if (type.empty() || type == "default") {
        yarn.enabled = false;
        return Status::ok();
    }
    if (type != "yarn")
        return error(StatusCode::kInvalidArgument,
                     "config.json: {}.rope_type '{}' is not supported (expected 'yarn' or 'default')", field, type);
    yarn.enabled = true;
    DSV4_RETURN_IF_ERROR(read_number(r, "factor", yarn.factor, true).with_context(field));
    DSV4_RETURN_IF_ERROR(
        read_number(r, "original_max_position_embeddings", yarn.original_max_position, true).with_context(field));
    DSV4_RETURN_IF_ERROR(read_number(r, "beta_fast", yarn.beta_fast, false));
    DSV4_RETURN_IF_ERROR(read_number(r, "beta_slow", yarn.beta_slow, false));
    if (r.contains("attention_factor") && r["attention_factor"].is_number() &&
        r["attention_factor"].get<double>() != 1.0)
        return error(StatusCode::kInvalidArgument,
                     "config.json: {}.attention_factor must be 1.0 for DeepSeek-V4 (no YaRN mscale)", field);
    return Status::ok();
}

}  // namespace

Result<ModelConfig> ModelConfig::from_json(const json& j) {
    if (!j.is_object()) return invalid_argument("config.json: top level must be a JSON object, got {}", j.type_name());
    ModelConfig c;
    std::string model_type;
    DSV4_RETURN_IF_ERROR(read_string(j, "model_type", model_type));
    if (model_type.empty()) return missing("model_type");
    if (model_type != "deepseek_v4")
        return invalid_argument("config.json: unknown model_type '{}' (expected 'deepseek_v4')", model_type);

    DSV4_RETURN_IF_ERROR(read_number(j, "vocab_size", c.vocab_size, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "hidden_size", c.hidden_size, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "num_hidden_layers", c.n_layers, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "num_attention_heads", c.n_heads, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "num_key_value_heads", c.n_kv_heads, false));
    DSV4_RETURN_IF_ERROR(read_number(j, "head_dim", c.head_dim, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "qk_rope_head_dim", c.rope_dim, false));
    if (c.rope_dim == 0) {
        double prf = 0;
        DSV4_RETURN_IF_ERROR(read_number(j, "partial_rotary_factor", prf, false));
        if (prf <= 0) return missing("qk_rope_head_dim");
        if (prf > 1) return invalid_argument("config.json: field 'partial_rotary_factor' = {} must be in (0, 1]", prf);
        c.rope_dim = int(std::lround(prf * c.head_dim));
    }
    DSV4_RETURN_IF_ERROR(read_number(j, "q_lora_rank", c.q_lora_rank, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "o_lora_rank", c.o_lora_rank, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "o_groups", c.o_groups, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "sliding_window", c.sliding_window, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "num_nextn_predict_layers", c.num_nextn_predict_layers, false));
    // The layer count sizes the per-layer lists below: check it before they are built.
    if (c.n_layers <= 0 || c.n_layers > kMaxLayers)
        return invalid_argument("config.json: field 'num_hidden_layers' = {} must be in [1, {}]", c.n_layers,
                                kMaxLayers);
    if (c.num_nextn_predict_layers < 0 || c.num_nextn_predict_layers > kMaxLayers)
        return invalid_argument("config.json: field 'num_nextn_predict_layers' = {} must be in [0, {}]",
                                c.num_nextn_predict_layers, kMaxLayers);

    // Layer schedule: official `compress_ratios` (may carry extra MTP entries) or transformers
    // `layer_types` + `compress_rates`.
    if (j.contains("layer_types") && !j["layer_types"].is_null()) {
        const json& lt = j["layer_types"];
        if (!lt.is_array()) return invalid_argument("config.json: field 'layer_types' must be a list");
        int csa_rate = 4, hca_rate = 128;
        if (j.contains("compress_rates") && j["compress_rates"].is_object()) {
            const json& cr = j["compress_rates"];
            DSV4_RETURN_IF_ERROR(
                read_number(cr, "compressed_sparse_attention", csa_rate, false).with_context("compress_rates"));
            DSV4_RETURN_IF_ERROR(
                read_number(cr, "heavily_compressed_attention", hca_rate, false).with_context("compress_rates"));
        }
        for (size_t i = 0; i < lt.size(); ++i) {
            if (!lt[i].is_string()) return invalid_argument("config.json: layer_types[{}] must be a string", i);
            const std::string s = lt[i];
            if (s == "sliding_attention") {
                c.layer_types.push_back(AttnType::kSliding);
                c.compress_ratios.push_back(0);
            } else if (s == "compressed_sparse_attention") {
                c.layer_types.push_back(AttnType::kCSA);
                c.compress_ratios.push_back(csa_rate);
            } else if (s == "heavily_compressed_attention") {
                c.layer_types.push_back(AttnType::kHCA);
                c.compress_ratios.push_back(hca_rate);
            } else {
                return invalid_argument("config.json: layer_types[{}] = '{}' is not a known layer type", i, s);
            }
        }
    } else if (j.contains("compress_ratios") && !j["compress_ratios"].is_null()) {
        const json& cr = j["compress_ratios"];
        if (!cr.is_array()) return invalid_argument("config.json: field 'compress_ratios' must be a list");
        for (size_t i = 0; i < cr.size(); ++i) {
            const json& v = cr[i];
            const bool ok = v.is_number_unsigned()
                                ? v.get<uint64_t>() <= uint64_t(kMaxDim)
                                : v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxDim;
            if (!ok)
                return invalid_argument("config.json: compress_ratios[{}] must be an integer in [0, {}]", i, kMaxDim);
            const int r = cr[i].get<int>();
            c.compress_ratios.push_back(r);
            // The reference gives ratio 4 the overlapping compressor and the indexer (CSA).
            c.layer_types.push_back(r == 0 ? AttnType::kSliding : r == 4 ? AttnType::kCSA : AttnType::kHCA);
        }
        const size_t n = size_t(c.n_layers);
        if (c.compress_ratios.size() != n && c.compress_ratios.size() != n + size_t(c.num_nextn_predict_layers))
            return invalid_argument(
                "config.json: compress_ratios has {} entries but num_hidden_layers is {} "
                "(and num_nextn_predict_layers {})",
                c.compress_ratios.size(), n, c.num_nextn_predict_layers);
        c.mtp_compress_ratios.assign(c.compress_ratios.begin() + std::min(n, c.compress_ratios.size()),
                                     c.compress_ratios.end());
        c.compress_ratios.resize(n);
        c.layer_types.resize(n);
    } else {
        return missing("compress_ratios (or layer_types)");
    }

    if (j.contains("mlp_layer_types") && !j["mlp_layer_types"].is_null()) {
        const json& mt = j["mlp_layer_types"];
        if (!mt.is_array()) return invalid_argument("config.json: field 'mlp_layer_types' must be a list");
        for (size_t i = 0; i < mt.size(); ++i) {
            const std::string s = mt[i].is_string() ? mt[i].get<std::string>() : std::string();
            if (s == "hash_moe")
                c.mlp_types.push_back(MoeRouting::kHash);
            else if (s == "moe")
                c.mlp_types.push_back(MoeRouting::kLearned);
            else
                return invalid_argument("config.json: mlp_layer_types[{}] must be 'hash_moe' or 'moe'", i);
        }
    } else {
        int n_hash = 0;
        DSV4_RETURN_IF_ERROR(read_number(j, "num_hash_layers", n_hash, false));
        if (n_hash < 0 || n_hash > c.n_layers)
            return invalid_argument("config.json: num_hash_layers = {} outside [0, num_hidden_layers = {}]", n_hash,
                                    c.n_layers);
        for (int i = 0; i < c.n_layers; ++i)
            c.mlp_types.push_back(i < n_hash ? MoeRouting::kHash : MoeRouting::kLearned);
    }

    // RoPE. Official: rope_theta, compress_rope_theta, rope_scaling (yarn). Transformers:
    // rope_parameters either nested {main, compress} or flat (the compress table's yarn).
    DSV4_RETURN_IF_ERROR(read_number(j, "rope_theta", c.rope_theta, false));
    DSV4_RETURN_IF_ERROR(read_number(j, "compress_rope_theta", c.compress_rope_theta, false));
    c.yarn.enabled = false;
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
        const json& rp = j["rope_parameters"];
        if (rp.contains("compress") || rp.contains("main")) {
            if (rp.contains("main")) {
                YarnParams main_yarn;  // the main table never uses YaRN in DeepSeek-V4
                DSV4_RETURN_IF_ERROR(read_yarn(rp["main"], "rope_parameters.main", main_yarn, &c.rope_theta));
                if (main_yarn.enabled) return invalid_argument("config.json: rope_parameters.main must not use YaRN");
            }
            if (rp.contains("compress"))
                DSV4_RETURN_IF_ERROR(
                    read_yarn(rp["compress"], "rope_parameters.compress", c.yarn, &c.compress_rope_theta));
        } else {
            DSV4_RETURN_IF_ERROR(read_yarn(rp, "rope_parameters", c.yarn, nullptr));
        }
    } else if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
        DSV4_RETURN_IF_ERROR(read_yarn(j["rope_scaling"], "rope_scaling", c.yarn, nullptr));
    }
    DSV4_RETURN_IF_ERROR(read_number(j, "max_position_embeddings", c.max_position_embeddings, true));

    DSV4_RETURN_IF_ERROR(read_number(j, "index_n_heads", c.index_n_heads, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "index_head_dim", c.index_head_dim, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "index_topk", c.index_topk, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "hc_mult", c.hc_mult, false));
    DSV4_RETURN_IF_ERROR(read_number(j, "hc_sinkhorn_iters", c.hc_sinkhorn_iters, false));
    DSV4_RETURN_IF_ERROR(read_number(j, "hc_eps", c.hc_eps, false));
    DSV4_RETURN_IF_ERROR(read_number(j, "n_routed_experts", c.n_routed_experts, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "n_shared_experts", c.n_shared_experts, false));
    DSV4_RETURN_IF_ERROR(read_number(j, "num_experts_per_tok", c.n_experts_per_tok, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "moe_intermediate_size", c.moe_intermediate_size, true));
    DSV4_RETURN_IF_ERROR(read_number(j, "routed_scaling_factor", c.routed_scaling_factor, false));
    DSV4_RETURN_IF_ERROR(read_bool(j, "norm_topk_prob", c.norm_topk_prob));
    DSV4_RETURN_IF_ERROR(read_number(j, "swiglu_limit", c.swiglu_limit, false));
    DSV4_RETURN_IF_ERROR(read_number(j, "rms_norm_eps", c.rms_norm_eps, false));
    DSV4_RETURN_IF_ERROR(read_number(j, "bos_token_id", c.bos_token_id, false));
    DSV4_RETURN_IF_ERROR(read_number(j, "eos_token_id", c.eos_token_id, false));
    DSV4_RETURN_IF_ERROR(read_bool(j, "tie_word_embeddings", c.tie_word_embeddings));

    std::string s;
    DSV4_RETURN_IF_ERROR(read_string(j, "scoring_func", s));
    if (!s.empty() && s != "sqrtsoftplus")
        return invalid_argument("config.json: scoring_func '{}' is not supported (expected 'sqrtsoftplus')", s);
    s.clear();
    DSV4_RETURN_IF_ERROR(read_string(j, "hidden_act", s));
    if (!s.empty() && s != "silu")
        return invalid_argument("config.json: hidden_act '{}' is not supported (expected 'silu')", s);
    s.clear();
    DSV4_RETURN_IF_ERROR(read_string(j, "topk_method", s));
    if (!s.empty() && s != "noaux_tc")
        return invalid_argument("config.json: topk_method '{}' is not supported (expected 'noaux_tc')", s);
    s.clear();
    DSV4_RETURN_IF_ERROR(read_string(j, "expert_dtype", s));
    if (s == "fp8")
        c.expert_format = ExpertFormat::kFp8;
    else if (s == "fp4")
        c.expert_format = ExpertFormat::kFp4;
    else if (s.empty())
        c.expert_format = j.contains("quantization_config") ? ExpertFormat::kFp4 : ExpertFormat::kBf16;
    else
        return invalid_argument("config.json: expert_dtype '{}' must be 'fp4' or 'fp8'", s);

    DSV4_RETURN_IF_ERROR(c.validate());
    return c;
}

Status ModelConfig::validate() const {
    auto bad = [](const char* field, const std::string& why) {
        return error(StatusCode::kInvalidArgument, "config.json: field '{}' {}", field, why);
    };
    // Upper bounds first, so that no product of two sizes (or a layer count and a size) can
    // overflow in the code that uses them; the checks below may then multiply freely.
    const std::pair<const char*, int64_t> dims[] = {{"hidden_size", hidden_size},
                                                    {"num_attention_heads", n_heads},
                                                    {"head_dim", head_dim},
                                                    {"qk_rope_head_dim", rope_dim},
                                                    {"q_lora_rank", q_lora_rank},
                                                    {"o_lora_rank", o_lora_rank},
                                                    {"o_groups", o_groups},
                                                    {"sliding_window", sliding_window},
                                                    {"index_n_heads", index_n_heads},
                                                    {"index_head_dim", index_head_dim},
                                                    {"index_topk", index_topk},
                                                    {"n_routed_experts", n_routed_experts},
                                                    {"num_experts_per_tok", n_experts_per_tok},
                                                    {"moe_intermediate_size", moe_intermediate_size},
                                                    {"hc_sinkhorn_iters", hc_sinkhorn_iters}};
    for (const auto& [field, v] : dims)
        if (v > kMaxDim) return bad(field, fmt::format("= {} is larger than {}", v, kMaxDim));
    if (n_layers > kMaxLayers)
        return bad("num_hidden_layers", fmt::format("= {} is larger than {}", n_layers, kMaxLayers));
    if (vocab_size > kMaxVocab) return bad("vocab_size", fmt::format("= {} is larger than {}", vocab_size, kMaxVocab));
    if (hc_mult > kMaxHcMult) return bad("hc_mult", fmt::format("= {} is larger than {}", hc_mult, kMaxHcMult));
    if (max_position_embeddings > kMaxPositions)
        return bad("max_position_embeddings",
                   fmt::format("= {} is larger than {}", max_position_embeddings, kMaxPositions));
    for (int r : compress_ratios)
        if (r > kMaxDim) return bad("compress_ratios", fmt::format("ratio {} is larger than {}", r, kMaxDim));
    if (vocab_size <= 0) return bad("vocab_size", "must be positive");
    if (hidden_size <= 0) return bad("hidden_size", "must be positive");
    if (n_layers <= 0) return bad("num_hidden_layers", "must be positive");
    if (n_heads <= 0) return bad("num_attention_heads", "must be positive");
    if (n_kv_heads != 1) return bad("num_key_value_heads", "must be 1 (one shared K=V latent)");
    if (head_dim <= 0 || head_dim % 2) return bad("head_dim", "must be positive and even");
    if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2)
        return bad("qk_rope_head_dim", fmt::format("= {} must be even and in (0, head_dim = {}]", rope_dim, head_dim));
    if (q_lora_rank <= 0) return bad("q_lora_rank", "must be positive");
    if (o_lora_rank <= 0) return bad("o_lora_rank", "must be positive");
    if (o_groups <= 0 || n_heads % o_groups)
        return bad("o_groups", fmt::format("= {} must divide num_attention_heads = {}", o_groups, n_heads));
    if (sliding_window <= 0) return bad("sliding_window", "must be positive");
    if (int(layer_types.size()) != n_layers)
        return bad("layer_types",
                   fmt::format("has {} entries but num_hidden_layers is {}", layer_types.size(), n_layers));
    if (int(mlp_types.size()) != n_layers)
        return bad("mlp_layer_types",
                   fmt::format("has {} entries but num_hidden_layers is {}", mlp_types.size(), n_layers));
    // from_json keeps the two lists in step; a config built in code may not, and the loop below
    // reads both.
    if (compress_ratios.size() != layer_types.size())
        return bad("compress_ratios",
                   fmt::format("has {} entries but layer_types has {}", compress_ratios.size(), layer_types.size()));
    for (int i = 0; i < n_layers; ++i) {
        const int r = compress_ratios[i];
        if (layer_types[i] == AttnType::kCSA && r <= 0) return bad("compress_rates", "CSA ratio must be positive");
        if (layer_types[i] == AttnType::kHCA && r <= 0) return bad("compress_rates", "HCA ratio must be positive");
    }
    bool any_csa = false;
    for (auto t : layer_types) any_csa |= t == AttnType::kCSA;
    if (any_csa) {
        if (index_n_heads <= 0) return bad("index_n_heads", "must be positive");
        if (index_head_dim <= 0 || index_head_dim < rope_dim || index_head_dim % 2)
            return bad("index_head_dim", fmt::format("= {} must be even and >= qk_rope_head_dim", index_head_dim));
        if (index_topk <= 0) return bad("index_topk", "must be positive");
    }
    if (hc_mult <= 0) return bad("hc_mult", "must be positive");
    if (hc_sinkhorn_iters <= 0) return bad("hc_sinkhorn_iters", "must be positive");
    if (n_routed_experts <= 0) return bad("n_routed_experts", "must be positive");
    if (n_experts_per_tok <= 0 || n_experts_per_tok > n_routed_experts)
        return bad("num_experts_per_tok",
                   fmt::format("= {} must be in [1, n_routed_experts = {}]", n_experts_per_tok, n_routed_experts));
    if (n_shared_experts != 1) return bad("n_shared_experts", "must be 1 (the reference asserts exactly one)");
    if (moe_intermediate_size <= 0) return bad("moe_intermediate_size", "must be positive");
    if (rms_norm_eps <= 0) return bad("rms_norm_eps", "must be positive");
    if (max_position_embeddings <= 0) return bad("max_position_embeddings", "must be positive");
    // The RoPE tables divide by log(theta) and take logs of the YaRN ratios: values outside these
    // ranges give NaN frequencies, not an error, further on.
    if (!(std::isfinite(rope_theta) && rope_theta > 1))
        return bad("rope_theta", fmt::format("= {} must be finite and greater than 1", rope_theta));
    if (!(std::isfinite(compress_rope_theta) && compress_rope_theta > 1))
        return bad("compress_rope_theta", fmt::format("= {} must be finite and greater than 1", compress_rope_theta));
    if (yarn.enabled) {
        const std::pair<const char*, double> yarn_fields[] = {
            {"factor", yarn.factor},
            {"original_max_position_embeddings", yarn.original_max_position},
            {"beta_fast", yarn.beta_fast},
            {"beta_slow", yarn.beta_slow}};
        for (const auto& [field, v] : yarn_fields)
            if (!(std::isfinite(v) && v > 0))
                return error(StatusCode::kInvalidArgument,
                             "config.json: YaRN field '{}' = {} must be finite and positive", field, v);
    }
    return Status::ok();
}

Result<ModelConfig> ModelConfig::from_json_text(const std::string& text) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument("config.json: not valid JSON");
    return from_json(j);
}

Result<ModelConfig> ModelConfig::from_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) return error(StatusCode::kNotFound, "cannot open model config '{}'", path);
    std::stringstream ss;
    ss << f.rdbuf();
    auto r = from_json_text(ss.str());
    if (!r) return r.status().with_context(path);
    return r;
}

std::string ModelConfig::summary() const {
    int n_sw = 0, n_csa = 0, n_hca = 0, n_hash = 0;
    for (auto t : layer_types) (t == AttnType::kSliding ? n_sw : t == AttnType::kCSA ? n_csa : n_hca)++;
    for (auto m : mlp_types) n_hash += m == MoeRouting::kHash;
    return fmt::format(
        "deepseek_v4: {} layers ({} sliding, {} CSA, {} HCA; {} hash-routed), hidden {}, {} heads x {}, "
        "vocab {}, {} experts top-{}, window {}, index top-{}",
        n_layers, n_sw, n_csa, n_hca, n_hash, hidden_size, n_heads, head_dim, vocab_size, n_routed_experts,
        n_experts_per_tok, sliding_window, index_topk);
}

}  // namespace dsv4
