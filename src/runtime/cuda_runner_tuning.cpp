// CudaRunner: the tuning file's per-shape rules (runtime/tuning_file.h) resolved against the build's
// kernel registries and checked against the shapes this model produces, once at init, so that a
// file that names a variant this build lacks, or one that cannot run a shape it covers, stops the
// start-up with an error naming the file and the rule instead of failing (or silently falling back)
// in a served step.
#include <cstdint>

#include "runtime/cuda_runner_impl.h"

namespace dsv4::cuda_runner_detail {

namespace {

// Token counts to check a rule at: its bounds within [1, max_step_tokens] and the powers of two between
// (the registries' legality depends on N, K, layout and shared memory, not on the token count; the
// samples guard against a future predicate that does).
std::vector<int> token_samples(const ShapeRange& r, int max_step_tokens) {
    std::vector<int> out;
    const int64_t lo = std::max<int64_t>(r.lo, 1), hi = std::min<int64_t>(r.hi, max_step_tokens);
    if (lo > hi) return out;
    out.push_back(int(lo));
    for (int64_t t = 1; t < hi; t *= 2)
        if (t > lo) out.push_back(int(t));
    if (hi != lo) out.push_back(int(hi));
    return out;
}

template <typename NameAt>
Result<int> resolve_name(const TuningRule& r, const std::string& file, int count, NameAt name_at) {
    if (r.variant.empty()) return -1;
    const int v = cuda::variant_by_name(r.variant, count, name_at);
    if (v >= 0) return v;
    std::string known;
    for (int i = 0; i < count; ++i) known += (known.empty() ? "" : ", ") + name_at(i);
    return invalid_argument("tuning file {}: rule '{}': this build has no {} variant '{}' (known: {})", file,
                            r.describe(), tuned_op_name(r.op), r.variant, known);
}

cuda::ShapeVariant shape_variant_of(const TuningRule& r, int v) {
    cuda::ShapeVariant s;
    s.tokens_lo = r.tokens.lo;
    s.tokens_hi = r.tokens.hi;
    s.rows_lo = r.rows_per_expert.lo;
    s.rows_hi = r.rows_per_expert.hi;
    s.variant = v;
    return s;
}

}  // namespace

int CudaRunner::sparse_decode_rule_for(int batch, int64_t context) const {
    for (size_t i = 0; i < sd_rules_.size(); ++i) {
        const SparseDecodeRule& r = sd_rules_[i];
        if ((r.tokens.any() || r.tokens.contains(batch)) && (r.context.any() || r.context.contains(context)))
            return int(i);
    }
    return -1;
}

Status CudaRunner::apply_tuning_rules() {
    const RuntimeOptions& rt = opt_.rt;
    const std::string& file = rt.tuning_file;
    const int H = cfg_.n_heads, D = cfg_.head_dim, G = cfg_.o_groups, orank = cfg_.o_lora_rank;
    const int d = cfg_.hidden_size, I = cfg_.moe_intermediate_size, qr = cfg_.q_lora_rank;
    // Built aside and installed at the end: a refused set leaves the rules in force unchanged.
    std::vector<SparseDecodeRule> sd;
    std::vector<cuda::ShapeVariant> gemv, moe, grouped_v;
    const int64_t max_target = fast_attn_ && ws_.sd_seq_splits > 0 ? ws_.sd_seq_splits : INT64_MAX;
    // Every refusal ends with what to do: the file may have been made with other options.
    const char* hint = " (made with other options? run with --tuning none, or tune again with these)";
    auto refused = [&](const TuningRule& r, const std::string& why, int T) {
        return invalid_argument("tuning file {}: rule '{}': {} at {} tokens: {}{}", file, r.describe(), r.variant, T,
                                why, hint);
    };
    for (const TuningRule& r : rt.tuning_rules) {
        switch (r.op) {
            case TunedOp::kSparseDecode: {
                DSV4_ASSIGN_OR_RETURN(const int v,
                                      resolve_name(r, file, cuda::sparse_decode_variant_count(),
                                                   [](int i) { return cuda::sparse_decode_variant_name(i); }));
                if (!fast_attn_)
                    return invalid_argument(
                        "tuning file {}: rule '{}': decode attention is not on sparse_decode here "
                        "(fast_attention off, or f32 rows){}",
                        file, r.describe(), hint);
                const cuda::KvFormat fmt =
                    pool_.main.fmt == int32_t(KvRowFormat::kFp8) ? cuda::KvFormat::kFp8 : cuda::KvFormat::kBf16;
                if (v >= 0 && !cuda::sparse_decode_variant_legal(v, fmt, H))
                    return invalid_argument("tuning file {}: rule '{}': {} is not legal for {} heads on {} rows{}",
                                            file, r.describe(), r.variant, H,
                                            fmt == cuda::KvFormat::kFp8 ? "fp8" : "bf16", hint);
                if (sd.size() == 63) return invalid_argument("tuning file {}: more than 63 sparse_decode rules", file);
                if (r.split_kv_target_ctas > max_target)
                    return invalid_argument(
                        "tuning file {}: rule '{}': split-KV target {} beyond the workspace sized at "
                        "start-up ({})",
                        file, r.describe(), r.split_kv_target_ctas, max_target);
                sd.push_back({r.tokens, r.context, v, r.split_kv_target_ctas});
                break;
            }
            case TunedOp::kDenseGemv: {
                DSV4_ASSIGN_OR_RETURN(const int v, resolve_name(r, file, cuda::dense_gemv_variant_count(), [](int i) {
                                          return cuda::dense_gemv_variant_name(i);
                                      }));
                // Every dense weight of every layer as the layer blocks call it (cuda_runner_layers.cpp).
                for (const DevLayer* Lp : all_blocks())
                    for (const DevLayer& L = *Lp; int T : token_samples(r.tokens, opt_.max_step_tokens)) {
                        const struct {
                            const cuda::WeightDesc* w;
                            int n_per_group;
                            int64_t group_in, ldx;
                        } calls[] = {{&L.wq_a, 0, 0, d},
                                     {&L.wq_b, 0, 0, qr},
                                     {&L.idx_wq_b, 0, 0, qr},
                                     {&L.wkv, 0, 0, d},
                                     {&L.comp.wkv, 0, 0, d},
                                     {&L.comp.wgate, 0, 0, d},
                                     {&L.idx_comp.wkv, 0, 0, d},
                                     {&L.idx_comp.wgate, 0, 0, d},
                                     {&L.idx_wproj, 0, 0, d},
                                     {&L.wo_a, orank, int64_t(H / G) * D, int64_t(H) * D},
                                     {&L.wo_b, 0, 0, int64_t(G) * orank},
                                     {&L.sh_w1, 0, 0, d},
                                     {&L.sh_w3, 0, 0, d},
                                     {&L.sh_w2, 0, 0, I},
                                     {&L.gate, 0, 0, d}};
                        for (const auto& c : calls) {
                            if (!c.w->data) continue;
                            const std::string why =
                                cuda::linear_variant_refusal(*c.w, c.n_per_group, c.group_in, c.ldx, T, v);
                            if (!why.empty()) return refused(r, why, T);
                        }
                    }
                // The LM head (CudaRunner::lm_head), over the step's logit rows.
                for (int T : token_samples(r.tokens, opt_.max_step_tokens))
                    if (w_.head.data)
                        if (const std::string why = cuda::linear_variant_refusal(w_.head, 0, 0, d, T, v); !why.empty())
                            return refused(r, "LM head: " + why, T);
                gemv.push_back(shape_variant_of(r, v));
                break;
            }
            case TunedOp::kMoeExpert:
            case TunedOp::kMoeGrouped: {
                const bool grouped = r.op == TunedOp::kMoeGrouped;
                DSV4_ASSIGN_OR_RETURN(const int v,
                                      grouped ? resolve_name(r, file, cuda::moe_grouped_variant_count(),
                                                             [](int i) { return cuda::moe_grouped_variant_name(i); })
                                              : resolve_name(r, file, cuda::moe_expert_variant_count(),
                                                             [](int i) { return cuda::moe_expert_variant_name(i); }));
                if (!w_.layers.empty() && w_.layers[0].ex_w1.data)
                    for (int T : token_samples(r.tokens, opt_.max_step_tokens)) {
                        // Every layer's experts have one shape and layout. Hash routing is left out: its
                        // token ids are not allocated yet, and the routing does not decide the variant.
                        cuda::MoeArgs a = moe_step_args(moe_block_args(0), T);
                        a.tid2eid = nullptr;
                        const std::string why = cuda::moe_variant_refusal(a, v, grouped);
                        if (!why.empty()) return refused(r, why, T);
                    }
                (grouped ? grouped_v : moe).push_back(shape_variant_of(r, v));
                break;
            }
        }
    }
    sd_rules_ = std::move(sd);
    gemv_rules_ = std::move(gemv);
    moe_rules_ = std::move(moe);
    grouped_rules_ = std::move(grouped_v);
    return Status::ok();
}

Status CudaRunner::set_test_delay_ns(int64_t ns) {
    if (ns < 0) return invalid_argument("set_test_delay_ns: {} ns", ns);
    DSV4_CU(cudaStreamSynchronize(stream_));
    drop_graphs(false);
    test_delay_ns_ = ns;
    return Status::ok();
}

Status CudaRunner::set_tuning_rules(const std::vector<TuningRule>& rules) {
    if (ep_) return error(StatusCode::kUnimplemented, "set_tuning_rules: not supported under expert parallelism");
    // The graphs captured the previous choices (the head's too: the LM head is a dense linear) and are
    // keyed by rule index: drop them first, whatever follows (they are recaptured on use).
    DSV4_CU(cudaStreamSynchronize(stream_));
    drop_graphs(true);
    sd_rule_ = -1;
    std::vector<TuningRule> before = std::move(opt_.rt.tuning_rules);
    opt_.rt.tuning_rules = rules;
    if (opt_.rt.tuning_file.empty()) opt_.rt.tuning_file = "(set_tuning_rules)";
    if (Status s = apply_tuning_rules(); !s.is_ok()) {
        opt_.rt.tuning_rules = std::move(before);
        return s;
    }
    return Status::ok();
}

}  // namespace dsv4::cuda_runner_detail
