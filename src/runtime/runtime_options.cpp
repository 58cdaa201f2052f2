#include "runtime/runtime_options.h"

#include <charconv>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

namespace dsv4 {

namespace {

using Setter = Status (*)(RuntimeOptions&, std::string_view key, std::string_view value);
using Getter = std::string (*)(const RuntimeOptions&);

struct OptionDef {
    OptionInfo info;
    Setter set;
    Getter get;
};

Result<bool> parse_bool(std::string_view key, std::string_view v) {
    if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
    if (v == "0" || v == "false" || v == "off" || v == "no") return false;
    return invalid_argument("option {}: '{}' is not a boolean (1/0, true/false, on/off, yes/no)", key, v);
}

Result<int> parse_count(std::string_view key, std::string_view v) {
    int x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || p != v.data() + v.size() || x < 0)
        return invalid_argument("option {}: '{}' is not a non-negative integer", key, v);
    return x;
}

Status one_of(std::string_view key, std::string_view v, std::initializer_list<std::string_view> allowed) {
    for (std::string_view a : allowed)
        if (v == a) return Status::ok();
    std::string list;
    for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    return invalid_argument("option {}: '{}' is not one of {}", key, v, list);
}

#define DSV4_BOOL_OPTION(field)                                               \
    [](RuntimeOptions& o, std::string_view k, std::string_view v) -> Status { \
        DSV4_ASSIGN_OR_RETURN(o.field, parse_bool(k, v));                     \
        return Status::ok();                                                  \
    },                                                                        \
        [](const RuntimeOptions& o) -> std::string { return o.field ? "1" : "0"; }
#define DSV4_COUNT_OPTION(field)                                              \
    [](RuntimeOptions& o, std::string_view k, std::string_view v) -> Status { \
        DSV4_ASSIGN_OR_RETURN(o.field, parse_count(k, v));                    \
        return Status::ok();                                                  \
    },                                                                        \
        [](const RuntimeOptions& o) -> std::string { return std::to_string(o.field); }
#define DSV4_NAME_OPTION(field)                                             \
    [](RuntimeOptions& o, std::string_view, std::string_view v) -> Status { \
        o.field = std::string(v);                                           \
        return Status::ok();                                                \
    },                                                                      \
        [](const RuntimeOptions& o) -> std::string { return o.field; }

const std::vector<OptionDef>& option_defs() {
    static const std::vector<OptionDef> defs = {
        {{"kv_rows", "DSV4_KV_ROWS", "K=V row storage on the GPU: fp8 | bf16 | f32 (exact)"},
         [](RuntimeOptions& o, std::string_view k, std::string_view v) -> Status {
             DSV4_RETURN_IF_ERROR(one_of(k, v, {"fp8", "bf16", "f32"}));
             o.kv_rows = std::string(v);
             return Status::ok();
         },
         [](const RuntimeOptions& o) { return o.kv_rows; }},
        {{"fast_kernels", "DSV4_FAST_KERNELS",
          "FP8/BF16 linears and MXFP4 MoE on the fast decode kernels (0: correct-first f32 kernels; the "
          "variable also sets fast_attention)"},
         DSV4_BOOL_OPTION(fast_kernels)},
        {{"fast_attention", "DSV4_FAST_ATTENTION", "decode attention on sparse_decode (0: CUDA-core attn_decode)"},
         DSV4_BOOL_OPTION(fast_attention)},
        {{"cuda_graphs", "DSV4_CUDA_GRAPHS", "replay decode steps as CUDA graphs"}, DSV4_BOOL_OPTION(cuda_graphs)},
        {{"fine_graph_buckets", "DSV4_FINE_GRAPH_BUCKETS",
          "decode graph buckets 1-16 as powers of two, then steps of 16 to 128, 32 to 256, 64 above (0: powers of "
          "two)"},
         DSV4_BOOL_OPTION(fine_graph_buckets)},
        {{"verify_graphs", "DSV4_VERIFY_GRAPHS",
          "steps of 2-4 tokens in every sequence (speculative verify steps) replayed as CUDA graphs"},
         DSV4_BOOL_OPTION(verify_graphs)},
        {{"spec_graphs", "DSV4_SPEC_GRAPHS",
          "speculative decoding's draft work (MTP catch-up and draft passes) replayed as CUDA graphs in graphed "
          "steps"},
         DSV4_BOOL_OPTION(spec_graphs)},
        {{"graph_pdl", "DSV4_GRAPH_PDL",
          "captured graphs launch each dsv4 kernel while its predecessor runs (programmatic dependent launch)"},
         DSV4_BOOL_OPTION(graph_pdl)},
        {{"graph_pdl_clusters", "DSV4_GRAPH_PDL_CLUSTERS",
          "with graph_pdl: also the edges from or to thread-block-cluster launches"},
         DSV4_BOOL_OPTION(graph_pdl_clusters)},
        {{"graph_pdl_max_batch", "DSV4_GRAPH_PDL_MAX_BATCH",
          "with graph_pdl: only decode graphs of batch buckets up to this size, verify graphs up to this many tokens "
          "(0: every graph)"},
         DSV4_COUNT_OPTION(graph_pdl_max_batch)},
        {{"split_argmax", "DSV4_SPLIT_ARGMAX",
          "greedy picks split over many CTAs per vocabulary row (0: one CTA per row)"},
         DSV4_BOOL_OPTION(split_argmax)},
        {{"capture_graphs_at_start", "DSV4_CAPTURE_GRAPHS_AT_START",
          "capture every batch bucket's decode graph at start-up (0: on first use)"},
         DSV4_BOOL_OPTION(capture_graphs_at_start)},
        {{"side_streams", "DSV4_SIDE_STREAMS", "independent projections and the shared expert on forked streams"},
         DSV4_BOOL_OPTION(side_streams)},
        {{"fuse_mhc", "DSV4_FUSE_MHC", "mHC expand fused with the next site's mixing dots at <= 8 tokens"},
         DSV4_BOOL_OPTION(fuse_mhc)},
        {{"x_bf16_min_tokens", "DSV4_X_BF16",
          "from this many tokens the large projections read a bf16 copy of their input (0: off)"},
         DSV4_COUNT_OPTION(x_bf16_min_tokens)},
        {{"moe_layout", "DSV4_MOE_LAYOUT", "routed experts' MXFP4 layout: pair-rotated | checkpoint"},
         [](RuntimeOptions& o, std::string_view k, std::string_view v) -> Status {
             DSV4_RETURN_IF_ERROR(one_of(k, v, {"pair-rotated", "checkpoint"}));
             o.moe_layout = std::string(v);
             return Status::ok();
         },
         [](const RuntimeOptions& o) { return o.moe_layout; }},
        {{"attn_variant", "DSV4_ATTN_VARIANT", "forced decode attention variant (CUDA-core or sparse_decode name)"},
         DSV4_NAME_OPTION(attn_variant)},
        {{"gemv_variant", "DSV4_GEMV_VARIANT", "forced dense GEMV/GEMM variant (where legal for the shape)"},
         DSV4_NAME_OPTION(gemv_variant)},
        {{"moe_variant", "DSV4_MOE_VARIANT", "forced MXFP4 expert variant (where legal)"},
         DSV4_NAME_OPTION(moe_variant)},
        {{"moe_gemm_variant", "DSV4_MOE_GEMM_VARIANT", "forced grouped MXFP4 expert GEMM variant (where legal)"},
         DSV4_NAME_OPTION(moe_gemm_variant)},
        {{"split_kv_target_ctas", "DSV4_SPLIT_KV_TARGET", "sparse_decode split-KV target CTAs (0: 2 x the SM count)"},
         DSV4_COUNT_OPTION(split_kv_target_ctas)},
        {{"batched_prefill", "DSV4_BATCHED_PREFILL",
          "prefill attention for all query tokens of a step at once (0: token by token; same bits with sparse_decode)"},
         DSV4_BOOL_OPTION(batched_prefill)},
        {{"prefill_x_bf16", "DSV4_PREFILL_X_BF16",
          "prefill steps: xn and q_lat rounded to bf16 once for all their projections (0: each GEMM rounds its own "
          "copy)"},
         DSV4_BOOL_OPTION(prefill_x_bf16)},
        {{"prefill_q_bf16", "DSV4_PREFILL_Q_BF16",
          "prefill steps' q projection written as bf16 by the GEMM, normed in place (0: f32, normed, then rounded)"},
         DSV4_BOOL_OPTION(prefill_q_bf16)},
        {{"decode_q_bf16", "DSV4_DECODE_Q_BF16",
          "decode steps: q's norm and RoPE write sparse_decode's bf16 q rows directly (0: f32 q, then q_rows_bf16; "
          "same "
          "bits)"},
         DSV4_BOOL_OPTION(decode_q_bf16)},
        {{"prefill_query_block", "DSV4_PREFILL_QUERY_BLOCK",
          "batched prefill: query tokens per attention launch (>= 1; workspaces sized for it)"},
         DSV4_COUNT_OPTION(prefill_query_block)},
        {{"prefill_gemm_min_tokens", "DSV4_PREFILL_GEMM",
          "from this many tokens per step the dense FP8/BF16 linears run as cuBLAS GEMMs (0: never)"},
         DSV4_COUNT_OPTION(prefill_gemm_min_tokens)},
        {{"moe_gemm_min_tokens", "DSV4_MOE_GEMM",
          "from this many tokens per step the routed experts run as the grouped MXFP4 GEMM (0: never)"},
         DSV4_COUNT_OPTION(moe_gemm_min_tokens)},
        {{"moe_gemm_wgmma", "DSV4_MOE_GEMM_WGMMA",
          "grouped expert GEMM on the warpgroup (wgmma) kernel (0: the mma.sync kernel, bitwise the GEMV's)"},
         DSV4_BOOL_OPTION(moe_gemm_wgmma)},
        {{"prefill_attn_wgmma", "DSV4_PREFILL_ATTN_WGMMA",
          "batched prefill attention on the wgmma kernel (FP8 rows; 0: sparse_decode, bitwise the token loop's)"},
         DSV4_BOOL_OPTION(prefill_attn_wgmma)},
        {{"indexer_filter_min_rows", "DSV4_INDEXER_FILTER",
          "batched prefill: from this many indexer rows per query, exact scores only for the rows a bf16 pass "
          "cannot rule out of the top-k (same selection; 0: every row scored exactly)"},
         DSV4_COUNT_OPTION(indexer_filter_min_rows)},
        {{"decode_gemm_min_tokens", "DSV4_DECODE_GEMM",
          "prefill_gemm_min_tokens and moe_gemm_min_tokens for decode-only steps (one token per sequence; 0: never)"},
         DSV4_COUNT_OPTION(decode_gemm_min_tokens)},
        {{"decode_moe_gemm_min_tokens", "DSV4_DECODE_MOE_GEMM",
          "moe_gemm_min_tokens alone for decode-only steps and steps of <= 4 tokens per sequence (0: "
          "decode_gemm_min_tokens)"},
         DSV4_COUNT_OPTION(decode_moe_gemm_min_tokens)},
        {{"op_profile", "DSV4_OP_PROFILE", "proxy-bench: per-op table of the captured step after each point"},
         DSV4_BOOL_OPTION(op_profile)},
        {{"fault_inject_step", nullptr,
          "test hook: the N-th step launched fails with a sticky device error (0: off; --option only)"},
         DSV4_COUNT_OPTION(fault_inject_step)},
    };
    return defs;
}

#undef DSV4_BOOL_OPTION
#undef DSV4_COUNT_OPTION
#undef DSV4_NAME_OPTION

int find_option(std::string_view key) {
    const auto& defs = option_defs();
    for (size_t i = 0; i < defs.size(); ++i)
        if (key == defs[i].info.key) return int(i);
    return -1;
}

void note(OptionOrigins* origins, int i, OptionSource s, std::string detail) {
    if (!origins) return;
    origins->source[size_t(i)] = s;
    origins->detail[size_t(i)] = std::move(detail);
}

}  // namespace

const char* option_source_name(OptionSource s) {
    switch (s) {
        case OptionSource::kDefault:
            return "default";
        case OptionSource::kTuningFile:
            return "tuning file";
        case OptionSource::kEnvironment:
            return "environment";
        case OptionSource::kCommandLine:
            return "command line";
    }
    return "?";
}

const std::vector<OptionInfo>& runtime_option_infos() {
    static const std::vector<OptionInfo> infos = [] {
        std::vector<OptionInfo> v;
        for (const OptionDef& d : option_defs()) v.push_back(d.info);
        return v;
    }();
    return infos;
}

OptionOrigins::OptionOrigins() : source(option_defs().size(), OptionSource::kDefault), detail(option_defs().size()) {}

Status set_runtime_option(RuntimeOptions& o, std::string_view key, std::string_view value) {
    const int i = find_option(key);
    if (i < 0) {
        std::string keys;
        for (const OptionDef& d : option_defs()) keys += (keys.empty() ? "" : ", ") + std::string(d.info.key);
        return invalid_argument("unknown option '{}' (known: {})", key, keys);
    }
    return option_defs()[size_t(i)].set(o, key, value);
}

std::string runtime_option_value(const RuntimeOptions& o, std::string_view key) {
    const int i = find_option(key);
    return i < 0 ? std::string() : option_defs()[size_t(i)].get(o);
}

Status apply_runtime_env(RuntimeOptions& o, OptionOrigins* origins,
                         const std::function<const char*(const char*)>& lookup) {
    const auto& defs = option_defs();
    for (size_t i = 0; i < defs.size(); ++i) {
        if (!defs[i].info.env) continue;  // --option only
        const char* v = lookup(defs[i].info.env);
        if (!v || !*v) continue;
        const Status s = defs[i].set(o, defs[i].info.key, v);
        if (!s.is_ok()) return invalid_argument("{}={}: {}", defs[i].info.env, v, s.message());
        note(origins, int(i), OptionSource::kEnvironment, defs[i].info.env);
        // Historical meaning of DSV4_FAST_KERNELS=0: every op on the correct-first kernels, attention too.
        if (std::string_view(defs[i].info.key) == "fast_kernels" && !o.fast_kernels &&
            !(lookup("DSV4_FAST_ATTENTION") && *lookup("DSV4_FAST_ATTENTION"))) {
            o.fast_attention = false;
            note(origins, find_option("fast_attention"), OptionSource::kEnvironment, "DSV4_FAST_KERNELS");
        }
    }
    return Status::ok();
}

Status apply_runtime_settings(RuntimeOptions& o, OptionOrigins* origins, const std::vector<std::string>& settings) {
    for (const std::string& kv : settings) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) return invalid_argument("--option '{}': expected KEY=VALUE", kv);
        const std::string_view key(kv.data(), eq), value(kv.data() + eq + 1, kv.size() - eq - 1);
        DSV4_RETURN_IF_ERROR(set_runtime_option(o, key, value));
        note(origins, find_option(key), OptionSource::kCommandLine, "--option");
    }
    return Status::ok();
}

Status apply_tuning_file(RuntimeOptions& o, OptionOrigins* origins, const TuningFile& f) {
    for (const auto& [k, v] : f.options) {
        const Status s = set_runtime_option(o, k, v);
        if (!s.is_ok()) return invalid_argument("tuning file {}: options: {}", f.path, s.message());
        note(origins, find_option(k), OptionSource::kTuningFile, f.path);
    }
    o.tuning_rules = f.rules;
    o.tuning_file = f.path;
    return Status::ok();
}

std::vector<std::string> drop_overridden_tuning(RuntimeOptions& o, const OptionOrigins& origins) {
    auto above_file = [&](const char* key) {
        const int i = find_option(key);
        return i >= 0 && (origins.source[size_t(i)] == OptionSource::kEnvironment ||
                          origins.source[size_t(i)] == OptionSource::kCommandLine);
    };
    auto forced_key = [](TunedOp op) {
        switch (op) {
            case TunedOp::kSparseDecode:
                return "attn_variant";
            case TunedOp::kDenseGemv:
                return "gemv_variant";
            case TunedOp::kMoeExpert:
                return "moe_variant";
            case TunedOp::kMoeGrouped:
                return "moe_gemm_variant";
        }
        return "";
    };
    std::vector<std::string> notes;
    std::vector<TuningRule> kept;
    for (TuningRule r : o.tuning_rules) {
        const std::string before = r.describe();
        if (!r.variant.empty() && above_file(forced_key(r.op))) r.variant.clear();
        if (r.split_kv_target_ctas > 0 && above_file("split_kv_target_ctas")) r.split_kv_target_ctas = 0;
        const bool empty = r.variant.empty() && r.split_kv_target_ctas == 0;
        if (before != r.describe())
            notes.push_back(fmt::format("tuning rule {}: {} by the environment or command line", before,
                                        empty ? "dropped" : "narrowed to " + r.describe()));
        if (!empty) kept.push_back(std::move(r));
    }
    o.tuning_rules = std::move(kept);
    return notes;
}

Result<RuntimeOptions> load_runtime_options(const std::vector<std::string>& cli_settings, OptionOrigins* origins,
                                            const TuningFile* tuning, std::vector<std::string>* tuning_notes) {
    RuntimeOptions o;
    OptionOrigins local;
    if (!origins) origins = &local;  // drop_overridden_tuning needs them
    if (tuning) DSV4_RETURN_IF_ERROR(apply_tuning_file(o, origins, *tuning));
    // The one read of the process environment for run-time switches.
    DSV4_RETURN_IF_ERROR(apply_runtime_env(o, origins, [](const char* k) -> const char* { return std::getenv(k); }));
    DSV4_RETURN_IF_ERROR(apply_runtime_settings(o, origins, cli_settings));
    std::vector<std::string> notes = drop_overridden_tuning(o, *origins);
    if (tuning_notes) *tuning_notes = std::move(notes);
    return o;
}

std::string runtime_options_table(const RuntimeOptions& o, const OptionOrigins& origins) {
    std::string out = "run-time options (--option KEY=VALUE > environment > tuning file > defaults):\n";
    const auto& defs = option_defs();
    for (size_t i = 0; i < defs.size(); ++i) {
        std::string v = defs[i].get(o);
        if (v.empty()) v = "(heuristic)";
        std::string src = option_source_name(origins.source[i]);
        if (!origins.detail[i].empty() &&
            (origins.source[i] == OptionSource::kEnvironment || origins.source[i] == OptionSource::kTuningFile))
            src += " " + origins.detail[i];
        out += fmt::format("  {:<22} {:<28} {}\n", defs[i].info.key, v, src);
    }
    if (!o.tuning_file.empty()) {
        out += fmt::format("per-shape kernel rules from {} ({}):\n", o.tuning_file,
                           o.tuning_rules.empty() ? "none left" : std::to_string(o.tuning_rules.size()));
        for (const TuningRule& r : o.tuning_rules) out += "  " + r.describe() + "\n";
    }
    return out;
}

StepGemmThresholds step_gemm_thresholds(const RuntimeOptions& rt, int max_t) {
    StepGemmThresholds t;
    const bool decode_only = max_t <= 1;
    const int decode_moe =
        rt.decode_moe_gemm_min_tokens > 0 ? rt.decode_moe_gemm_min_tokens : rt.decode_gemm_min_tokens;
    t.dense_min_tokens = decode_only ? rt.decode_gemm_min_tokens : rt.prefill_gemm_min_tokens;
    t.moe_min_tokens = max_t <= StepGemmThresholds::kVerifyShapedMaxTokens ? decode_moe : rt.moe_gemm_min_tokens;
    t.decode_step = decode_only;
    return t;
}

}  // namespace dsv4
