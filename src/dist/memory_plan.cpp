#include "dist/memory_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "dist/expert_partition.h"

namespace dsv4::dist {

bool MemoryPlan::fits() const {
    for (const RankPlan& r : ranks)
        if (r.free_bytes < 0) return false;
    return !ranks.empty();
}

Result<MemoryPlan> make_memory_plan(const ModelConfig& cfg, const PlanOptions& opt) {
    if (opt.gpu_bytes <= 0) return invalid_argument("GPU memory must be positive, got {} bytes", opt.gpu_bytes);
    if (opt.context < 1) return invalid_argument("context must be at least 1 token, got {}", opt.context);
    if (opt.batch < 0) return invalid_argument("batch must not be negative, got {}", opt.batch);
    DSV4_ASSIGN_OR_RETURN(ExpertPartition ep, ExpertPartition::make(cfg.n_routed_experts, opt.n_ranks));
    MemoryPlan p;
    p.opt = opt;
    const std::vector<TensorSpec> inv = weight_inventory(cfg, opt.inventory);
    p.model_bytes = total_bytes(inv);
    p.kv = kv_bytes(cfg, opt.kv_rows);
    p.seq_bytes = p.kv.for_tokens(cfg, opt.context);
    const bool dp = opt.attn == AttnScheme::kDataParallel;
    p.max_seqs = dp ? 0 : INT64_MAX;
    for (int r = 0; r < opt.n_ranks; ++r) {
        RankPlan rp;
        rp.rank = r;
        DSV4_ASSIGN_OR_RETURN(rp.attn, make_attention_shard(cfg, opt.attn, r, opt.n_ranks));
        DSV4_ASSIGN_OR_RETURN(rp.weights, rank_weight_bytes(inv, ep, rp.attn));
        rp.first_expert = ep.first(r);
        rp.n_experts = ep.n_local();
        // DP: sequences dealt round-robin, so rank r gets ceil or floor of batch/N.
        rp.seqs = dp ? opt.batch / opt.n_ranks + (r < opt.batch % opt.n_ranks ? 1 : 0) : opt.batch;
        rp.kv_bytes = rp.seqs * p.seq_bytes;
        const double for_kv = opt.gpu_bytes - opt.reserve_bytes - double(rp.weights.total());
        rp.free_bytes = for_kv - double(rp.kv_bytes);
        rp.max_seqs = for_kv > 0 ? int64_t(for_kv / double(p.seq_bytes)) : 0;
        p.max_seqs = dp ? p.max_seqs + rp.max_seqs : std::min(p.max_seqs, rp.max_seqs);
        p.ranks.push_back(rp);
    }
    return p;
}

namespace {
std::string gib(double b) { return fmt::format("{:.2f} GiB", b / double(1ull << 30)); }
std::string mib(double b) { return fmt::format("{:.2f} MiB", b / double(1ull << 20)); }
}  // namespace

std::string format_memory_plan(const ModelConfig& cfg, const MemoryPlan& p) {
    const PlanOptions& o = p.opt;
    std::string s;
    s += fmt::format("model: {} layers, {} routed experts (top-{}), {} heads x {}, checkpoint {} ({} B)\n",
                     cfg.n_layers, cfg.n_routed_experts, cfg.n_experts_per_tok, cfg.n_heads, cfg.head_dim,
                     gib(double(p.model_bytes)), p.model_bytes);
    s += fmt::format("ranks: {}; MoE: expert parallel, {} experts per rank; attention: {}\n", o.n_ranks,
                     cfg.n_routed_experts / o.n_ranks,
                     o.attn == AttnScheme::kDataParallel ? "data parallel (replicated, own sequences)"
                                                         : "tensor parallel (heads split)");
    s += fmt::format("GPU: {} each, reserve {} (context, activations, workspaces, NCCL)\n", gib(o.gpu_bytes),
                     gib(o.reserve_bytes));
    s += fmt::format(
        "KV ({} rows): {} B/token average, fixed {} per sequence (window {} + compressor state {}); one "
        "sequence at {} tokens: {}\n",
        kv_row_format_name(o.kv_rows), fmt::format("{:.2f}", p.kv.per_token), mib(double(p.kv.fixed())),
        mib(double(p.kv.window)), mib(double(p.kv.compressor_state)), o.context, mib(double(p.seq_bytes)));
    s += fmt::format("{:>4} {:>10} {:>12} {:>12} {:>12} {:>12} {:>6} {:>12} {:>12} {:>9}\n", "rank", "experts",
                     "replicated", "experts", "attn-split", "weights", "seqs", "KV", "free", "max seqs");
    for (const RankPlan& r : p.ranks)
        s += fmt::format("{:>4} {:>10} {:>12} {:>12} {:>12} {:>12} {:>6} {:>12} {:>12} {:>9}\n", r.rank,
                         fmt::format("{}..{}", r.first_expert, r.first_expert + r.n_experts - 1),
                         gib(double(r.weights.replicated)), gib(double(r.weights.experts)),
                         gib(double(r.weights.attention_split)), gib(double(r.weights.total())), r.seqs,
                         gib(double(r.kv_bytes)), gib(r.free_bytes), r.max_seqs);
    for (const RankPlan& r : p.ranks)
        if (o.attn == AttnScheme::kTensorParallel) s += "  " + describe_attention_shard(cfg, r.attn) + "\n";
    s += fmt::format("capacity: {} sequences of {} tokens at once over the {} GPU(s){}\n", p.max_seqs, o.context,
                     o.n_ranks, p.fits() ? "" : "; DOES NOT FIT with the requested batch");
    return s;
}

}  // namespace dsv4::dist
