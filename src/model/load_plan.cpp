// make_load_plan (see load_plan.h): the checkpoint names of spec §4.1 (the same ones
// ModelWeights::load reads), validated without dequantising anything.
#include "model/load_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "model/quant.h"
#include "model/safetensors.h"

namespace dsv4 {

const char* plan_format_name(PlanFormat f) {
    switch (f) {
        case PlanFormat::kF32:
            return "f32";
        case PlanFormat::kBF16:
            return "bf16";
        case PlanFormat::kF16:
            return "f16";
        case PlanFormat::kFp8E8M0:
            return "fp8(ue8m0 scales)";
        case PlanFormat::kFp8F32:
            return "fp8(f32 scales)";
        case PlanFormat::kMxfp4:
            return "mxfp4";
    }
    return "?";
}

const PlanTensor* LoadPlan::find(std::string_view name) const {
    for (const auto& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool same_shape(std::span<const int64_t> a, std::span<const int64_t> b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

Status bad_shape(const TensorView& t, std::span<const int64_t> want, std::string_view what) {
    return invalid_argument("{}: tensor '{}': expected {}shape {}, got {} {} (does config.json match the checkpoint?)",
                            t.file, t.name, what, shape_to_string(want), dtype_name(t.dtype), shape_to_string(t.shape));
}

Status check_ue8m0(const TensorView& s) {
    const uint8_t* nan = std::find(s.data, s.data + s.nbytes, uint8_t(255));
    if (nan != s.data + s.nbytes)
        return error(StatusCode::kDataLoss, "{}: tensor '{}': UE8M0 scale byte 255 (NaN) at element {}", s.file, s.name,
                     nan - s.data);
    return Status::ok();
}

struct Planner {
    const ModelConfig& cfg;
    const Checkpoint& ckpt;
    LoadPlan plan;
    std::set<std::string, std::less<>> consumed;

    Result<TensorView> get(const std::string& name) {
        auto t = ckpt.get(name);
        if (!t) return t.status().with_context(fmt::format("weight '{}' of the model", name));
        consumed.insert(name);
        return t;
    }

    Status add(PlanTensor t) {
        plan.checkpoint_bytes += t.weight.nbytes + t.scale.nbytes;
        if (t.kind == PlanKind::kMatrix)
            plan.device_bytes += (t.fmt == PlanFormat::kF16 ? t.weight.nbytes * 2 : t.weight.nbytes) + t.scale.nbytes;
        else
            plan.device_bytes += uint64_t(t.weight.numel()) * 4;
        plan.tensors.push_back(std::move(t));
        return Status::ok();
    }

    // The block scale of an FP8 weight: exactly one of the known spellings (B14).
    Result<TensorView> fp8_scale(const TensorView& w) {
        const std::string base = w.name.substr(0, w.name.size() - 7);
        std::vector<std::string> found;
        for (const char* suffix : {".scale", ".weight_scale_inv", ".weight_scale"})
            if (ckpt.has(base + suffix)) found.push_back(base + suffix);
        if (found.empty())
            return error(StatusCode::kNotFound, "{}: tensor '{}': F8_E4M3 weight has no block scale ('{}.scale')",
                         w.file, w.name, base);
        if (found.size() > 1)
            return invalid_argument("{}: tensor '{}': ambiguous block scales '{}' and '{}'", w.file, w.name, found[0],
                                    found[1]);
        return get(found[0]);
    }

    Result<PlanTensor> matrix(const std::string& name, int64_t N, int64_t K) {
        DSV4_ASSIGN_OR_RETURN(TensorView w, get(name));
        PlanTensor t;
        t.name = name;
        t.kind = PlanKind::kMatrix;
        t.shape = {N, K};
        t.weight = w;
        switch (w.dtype) {
            case DType::kF32:
            case DType::kBF16:
            case DType::kF16:
                if (!same_shape(w.shape, t.shape)) return bad_shape(w, t.shape, "");
                t.fmt = w.dtype == DType::kF32    ? PlanFormat::kF32
                        : w.dtype == DType::kBF16 ? PlanFormat::kBF16
                                                  : PlanFormat::kF16;
                return t;
            case DType::kF8E4M3: {
                if (!same_shape(w.shape, t.shape)) return bad_shape(w, t.shape, "");
                DSV4_ASSIGN_OR_RETURN(t.scale, fp8_scale(w));
                const int64_t grid[2] = {ceil_div(N, kFp8Block), ceil_div(K, kFp8Block)};
                if (!same_shape(t.scale.shape, grid)) return bad_shape(t.scale, grid, "block-scale ");
                if (t.scale.dtype == DType::kF8E8M0) {
                    DSV4_RETURN_IF_ERROR(check_ue8m0(t.scale));
                    t.fmt = PlanFormat::kFp8E8M0;
                } else if (t.scale.dtype == DType::kF32) {
                    t.fmt = PlanFormat::kFp8F32;
                } else {
                    return invalid_argument("{}: tensor '{}': block scale dtype {} is not F8_E8M0 or F32", t.scale.file,
                                            t.scale.name, dtype_name(t.scale.dtype));
                }
                return t;
            }
            case DType::kI8: {
                const int64_t stored[2] = {N, K / 2};
                if (K % 2 != 0 || !same_shape(w.shape, stored)) return bad_shape(w, stored, "packed MXFP4 ");
                const std::string sname = name.substr(0, name.size() - 7) + ".scale";
                if (!ckpt.has(sname))
                    return error(StatusCode::kNotFound, "{}: tensor '{}': MXFP4 weight has no group scale '{}'", w.file,
                                 w.name, sname);
                DSV4_ASSIGN_OR_RETURN(t.scale, get(sname));
                const int64_t grid[2] = {N, ceil_div(K, kMxfp4Group)};
                if (t.scale.dtype != DType::kF8E8M0)
                    return invalid_argument("{}: tensor '{}': MXFP4 group scale must be F8_E8M0, got {}", t.scale.file,
                                            t.scale.name, dtype_name(t.scale.dtype));
                if (!same_shape(t.scale.shape, grid)) return bad_shape(t.scale, grid, "group-scale ");
                DSV4_RETURN_IF_ERROR(check_ue8m0(t.scale));
                t.fmt = PlanFormat::kMxfp4;
                return t;
            }
            default:
                return invalid_argument(
                    "{}: tensor '{}': dtype {} is not a weight format (F32, BF16, F16, F8_E4M3, "
                    "I8)",
                    w.file, w.name, dtype_name(w.dtype));
        }
    }

    Status mat(const std::string& name, int64_t N, int64_t K) {
        DSV4_ASSIGN_OR_RETURN(PlanTensor t, matrix(name, N, K));
        return add(std::move(t));
    }

    Status vec(const std::string& name, std::vector<int64_t> shape) {
        DSV4_ASSIGN_OR_RETURN(TensorView w, get(name));
        if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && w.dtype != DType::kF16)
            return invalid_argument("{}: tensor '{}': expected F32, BF16 or F16, got {}", w.file, w.name,
                                    dtype_name(w.dtype));
        if (!same_shape(w.shape, shape)) return bad_shape(w, shape, "");
        PlanTensor t;
        t.name = name;
        t.kind = PlanKind::kVector;
        t.shape = std::move(shape);
        t.weight = w;
        t.fmt = w.dtype == DType::kF32    ? PlanFormat::kF32
                : w.dtype == DType::kBF16 ? PlanFormat::kBF16
                                          : PlanFormat::kF16;
        return add(std::move(t));
    }

    Status tid2eid(const std::string& name) {
        const int64_t V = cfg.vocab_size, K = cfg.n_experts_per_tok;
        DSV4_ASSIGN_OR_RETURN(TensorView w, get(name));
        const int64_t shape[2] = {V, K};
        // Reads the table (vocab x k ints, a few MB) to check it: tid2eid rows route to distinct
        // experts in [0, E) (B11).
        DSV4_ASSIGN_OR_RETURN(std::vector<int32_t> ids, load_i32(ckpt, name, shape));
        const std::string what = fmt::format("{}: tensor '{}'", w.file, w.name);
        if (Status s = check_int_range(ids, 0, cfg.n_routed_experts, what); !s.is_ok())
            return Status(StatusCode::kDataLoss, s.message());
        DSV4_RETURN_IF_ERROR(check_rows_distinct(ids, K, what));
        PlanTensor t;
        t.name = name;
        t.kind = PlanKind::kTid2eid;
        t.shape = {V, K};
        t.weight = w;
        return add(std::move(t));
    }

    Status mhc(const std::string& p, int64_t rows, int64_t nscale) {
        const int64_t n = cfg.hc_mult, d = cfg.hidden_size;
        DSV4_RETURN_IF_ERROR(vec(p + "_fn", {rows, n * d}));
        DSV4_RETURN_IF_ERROR(vec(p + "_base", {rows}));
        return vec(p + "_scale", {nscale});
    }

    Status compressor(const std::string& p, int ratio, int64_t dim, bool overlap) {
        const int64_t w = (overlap ? 2 : 1) * dim, d = cfg.hidden_size;
        DSV4_RETURN_IF_ERROR(mat(p + "wkv.weight", w, d));
        DSV4_RETURN_IF_ERROR(mat(p + "wgate.weight", w, d));
        DSV4_RETURN_IF_ERROR(vec(p + "ape", {ratio, w}));
        return vec(p + "norm.weight", {dim});
    }

    // One projection of the local routed experts; all in one format and size (they are packed
    // with a fixed stride on the device).
    Status experts(const std::string& p, const char* proj, int64_t N, int64_t K) {
        const std::string group = p + "ffn.experts." + proj;
        const size_t first_index = plan.tensors.size();
        for (int e = plan.expert_first; e < plan.expert_first + plan.expert_count; ++e) {
            DSV4_ASSIGN_OR_RETURN(PlanTensor t,
                                  matrix(p + "ffn.experts." + std::to_string(e) + "." + proj + ".weight", N, K));
            t.expert_group = group;
            t.expert_local = e - plan.expert_first;
            if (e != plan.expert_first) {
                const PlanTensor& f = plan.tensors[first_index];
                if (t.fmt != f.fmt || t.weight.nbytes != f.weight.nbytes || t.scale.nbytes != f.scale.nbytes)
                    return invalid_argument(
                        "{}: tensor '{}' is {} but '{}' is {}: experts of one layer must share a "
                        "format",
                        t.weight.file, t.name, plan_format_name(t.fmt), f.name, plan_format_name(f.fmt));
            }
            DSV4_RETURN_IF_ERROR(add(std::move(t)));
        }
        return Status::ok();
    }

    Status layer(int l) {
        return block("layers." + std::to_string(l) + ".", cfg.compress_ratio(l), cfg.layer_types[l] == AttnType::kCSA,
                     cfg.mlp_types[l] == MoeRouting::kHash);
    }

    // MTP block m (spec §2.11): a decoder block of ratio 0 with learned routing, its input
    // projections and norms, and its own head mixing.
    Status mtp(int m) {
        const int64_t d = cfg.hidden_size, n = cfg.hc_mult;
        const std::string p = "mtp." + std::to_string(m) + ".";
        DSV4_RETURN_IF_ERROR(block(p, 0, false, false));
        DSV4_RETURN_IF_ERROR(mat(p + "e_proj.weight", d, d));
        DSV4_RETURN_IF_ERROR(mat(p + "h_proj.weight", d, d));
        DSV4_RETURN_IF_ERROR(vec(p + "enorm.weight", {d}));
        DSV4_RETURN_IF_ERROR(vec(p + "hnorm.weight", {d}));
        DSV4_RETURN_IF_ERROR(vec(p + "norm.weight", {d}));
        return mhc(p + "hc_head", n, 1);
    }

    // One decoder block under prefix p ("layers.3." or "mtp.0."): compress ratio r (0: window only),
    // CSA (the indexer), hash routing (tid2eid) or learned (gate bias).
    Status block(const std::string& p, int r, bool csa, bool hash) {
        const int64_t d = cfg.hidden_size, H = cfg.n_heads, D = cfg.head_dim, qr = cfg.q_lora_rank;
        const int64_t G = cfg.o_groups, orank = cfg.o_lora_rank, E = cfg.n_routed_experts,
                      I = cfg.moe_intermediate_size;
        DSV4_RETURN_IF_ERROR(mhc(p + "hc_attn", cfg.hc_mix_dim(), 3));
        DSV4_RETURN_IF_ERROR(mhc(p + "hc_ffn", cfg.hc_mix_dim(), 3));
        DSV4_RETURN_IF_ERROR(vec(p + "attn_norm.weight", {d}));
        DSV4_RETURN_IF_ERROR(vec(p + "ffn_norm.weight", {d}));
        DSV4_RETURN_IF_ERROR(vec(p + "attn.attn_sink", {H}));
        DSV4_RETURN_IF_ERROR(vec(p + "attn.q_norm.weight", {qr}));
        DSV4_RETURN_IF_ERROR(vec(p + "attn.kv_norm.weight", {D}));
        DSV4_RETURN_IF_ERROR(mat(p + "attn.wq_a.weight", qr, d));
        DSV4_RETURN_IF_ERROR(mat(p + "attn.wq_b.weight", H * D, qr));
        DSV4_RETURN_IF_ERROR(mat(p + "attn.wkv.weight", D, d));
        DSV4_RETURN_IF_ERROR(mat(p + "attn.wo_a.weight", G * orank, (H / G) * D));
        DSV4_RETURN_IF_ERROR(mat(p + "attn.wo_b.weight", d, G * orank));
        if (r > 0) DSV4_RETURN_IF_ERROR(compressor(p + "attn.compressor.", r, D, csa));
        if (csa) {
            const int64_t IH = cfg.index_n_heads, ID = cfg.index_head_dim;
            DSV4_RETURN_IF_ERROR(compressor(p + "attn.indexer.compressor.", r, ID, true));
            DSV4_RETURN_IF_ERROR(mat(p + "attn.indexer.wq_b.weight", IH * ID, qr));
            DSV4_RETURN_IF_ERROR(mat(p + "attn.indexer.weights_proj.weight", IH, d));
        }
        DSV4_RETURN_IF_ERROR(mat(p + "ffn.gate.weight", E, d));
        if (hash) {
            DSV4_RETURN_IF_ERROR(tid2eid(p + "ffn.gate.tid2eid"));
        } else {
            DSV4_RETURN_IF_ERROR(vec(p + "ffn.gate.bias", {E}));
        }
        DSV4_RETURN_IF_ERROR(mat(p + "ffn.shared_experts.w1.weight", I, d));
        DSV4_RETURN_IF_ERROR(mat(p + "ffn.shared_experts.w3.weight", I, d));
        DSV4_RETURN_IF_ERROR(mat(p + "ffn.shared_experts.w2.weight", d, I));
        DSV4_RETURN_IF_ERROR(experts(p, "w1", I, d));
        DSV4_RETURN_IF_ERROR(experts(p, "w3", I, d));
        return experts(p, "w2", d, I);
    }

    // A routed-expert tensor of a layer of this model held by another rank (not read here).
    bool other_rank_expert(std::string_view name) const {
        int l = -1, e = -1;
        char proj[3] = {}, suffix[16] = {};
        const std::string s(name);
        // Decoder layers and the planned MTP blocks ("mtp.M.ffn.experts...").
        const bool is_mtp = s.starts_with("mtp.");
        const char* pattern = is_mtp ? "mtp.%d.ffn.experts.%d.%2[w123].%15s" : "layers.%d.ffn.experts.%d.%2[w123].%15s";
        if (std::sscanf(s.c_str(), pattern, &l, &e, proj, suffix) != 4) return false;
        const std::string canon =
            fmt::format("{}.{}.ffn.experts.{}.{}.{}", is_mtp ? "mtp" : "layers", l, e, proj, suffix);
        const std::string_view sf(suffix);
        return canon == s && l >= 0 && l < (is_mtp ? plan.mtp_blocks : cfg.n_layers) && e >= 0 &&
               e < cfg.n_routed_experts && (e < plan.expert_first || e >= plan.expert_first + plan.expert_count) &&
               (std::string_view(proj) == "w1" || std::string_view(proj) == "w2" || std::string_view(proj) == "w3") &&
               (sf == "weight" || sf == "scale" || sf == "weight_scale_inv" || sf == "weight_scale");
    }

    Status completeness() {
        for (const std::string& name : ckpt.names()) {
            if (consumed.contains(name) || other_rank_expert(name)) continue;
            DSV4_ASSIGN_OR_RETURN(TensorView t, ckpt.get(name));
            int m = -1;
            if (name.starts_with("mtp.") && (std::sscanf(name.c_str(), "mtp.%d.", &m) != 1 || m >= plan.mtp_blocks)) {
                plan.skipped.push_back(
                    {name, t.file, "MTP block: loaded only for speculative decoding with MTP drafts"});
                continue;
            }
            int l = -1;
            if (std::sscanf(name.c_str(), "layers.%d.", &l) == 1 && l >= cfg.n_layers)
                return invalid_argument(
                    "{}: tensor '{}' belongs to layer {}, but config.json has num_hidden_layers = "
                    "{}",
                    t.file, name, l, cfg.n_layers);
            return invalid_argument(
                "{}: tensor '{}' ({} {}) is not used by any weight of the model (a mis-mapped "
                "name?)",
                t.file, name, dtype_name(t.dtype), shape_to_string(t.shape));
        }
        return Status::ok();
    }
};

}  // namespace

Result<LoadPlan> make_load_plan(const ModelConfig& cfg, const Checkpoint& ckpt, int expert_first, int expert_count,
                                int mtp_blocks) {
    DSV4_RETURN_IF_ERROR(cfg.validate());
    if (mtp_blocks < 0 || mtp_blocks > cfg.num_nextn_predict_layers)
        return invalid_argument("{} MTP blocks asked; config.json has num_nextn_predict_layers = {}", mtp_blocks,
                                cfg.num_nextn_predict_layers);
    for (int m = 0; m < mtp_blocks && m < int(cfg.mtp_compress_ratios.size()); ++m)
        if (cfg.mtp_compress_ratios[size_t(m)] != 0)
            return error(StatusCode::kUnimplemented,
                         "MTP block {} has compress ratio {} in config.json; dsv4 runs window-only MTP blocks (spec "
                         "§2.11: ratio 0)",
                         m, cfg.mtp_compress_ratios[size_t(m)]);
    const int E = cfg.n_routed_experts;
    if (expert_count == 0) expert_first = 0, expert_count = E;
    if (expert_first < 0 || expert_count < 0 || expert_first + expert_count > E)
        return invalid_argument("routed experts [{}, {}) outside [0, {})", expert_first, expert_first + expert_count,
                                E);
    Planner P{cfg, ckpt, {}, {}};
    P.plan.expert_first = expert_first;
    P.plan.expert_count = expert_count;
    const int64_t d = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult;
    DSV4_RETURN_IF_ERROR(P.mat("embed.weight", V, d));
    P.plan.head_tied = !ckpt.has("head.weight") && cfg.tie_word_embeddings;
    if (!P.plan.head_tied) DSV4_RETURN_IF_ERROR(P.mat("head.weight", V, d));
    DSV4_RETURN_IF_ERROR(P.vec("norm.weight", {d}));
    DSV4_RETURN_IF_ERROR(P.mhc("hc_head", n, 1));
    for (int l = 0; l < cfg.n_layers; ++l) DSV4_RETURN_IF_ERROR(P.layer(l));
    P.plan.mtp_blocks = mtp_blocks;
    for (int m = 0; m < mtp_blocks; ++m) DSV4_RETURN_IF_ERROR(P.mtp(m));
    DSV4_RETURN_IF_ERROR(P.completeness());
    return std::move(P.plan);
}

}  // namespace dsv4
