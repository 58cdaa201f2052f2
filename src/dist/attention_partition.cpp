#include "dist/attention_partition.h"

#include <fmt/format.h>

namespace dsv4::dist {

const char* attn_scheme_name(AttnScheme s) { return s == AttnScheme::kTensorParallel ? "tp" : "dp"; }

Result<AttnScheme> parse_attn_scheme(const std::string& s) {
    if (s == "dp" || s == "data-parallel") return AttnScheme::kDataParallel;
    if (s == "tp" || s == "tensor-parallel") return AttnScheme::kTensorParallel;
    return invalid_argument("unknown attention scheme '{}' (use dp or tp)", s);
}

Result<AttentionShard> make_attention_shard(const ModelConfig& cfg, AttnScheme scheme, int rank, int n_ranks) {
    if (n_ranks < 1) return invalid_argument("attention needs at least one rank, got {}", n_ranks);
    if (rank < 0 || rank >= n_ranks) return invalid_argument("rank {} outside [0, {})", rank, n_ranks);
    AttentionShard s;
    s.scheme = scheme;
    s.rank = rank;
    s.n_ranks = n_ranks;
    s.n_heads = cfg.n_heads;
    s.o_groups = cfg.o_groups;
    if (scheme == AttnScheme::kDataParallel) return s;
    if (cfg.n_heads % n_ranks != 0)
        return invalid_argument("tensor-parallel attention over {} ranks: {} query heads are not divisible by {}",
                                n_ranks, cfg.n_heads, n_ranks);
    if (cfg.o_groups % n_ranks != 0)
        return invalid_argument(
            "tensor-parallel attention over {} ranks: {} output groups are not divisible by {} (a wo_a group "
            "must stay on one rank)",
            n_ranks, cfg.o_groups, n_ranks);
    s.n_heads = cfg.n_heads / n_ranks;
    s.first_head = rank * s.n_heads;
    s.o_groups = cfg.o_groups / n_ranks;
    s.first_group = rank * s.o_groups;
    s.kv_replicated = n_ranks > 1;
    s.output_all_reduce = n_ranks > 1;
    return s;
}

std::string describe_attention_shard(const ModelConfig& cfg, const AttentionShard& s) {
    const int64_t D = cfg.head_dim, qr = cfg.q_lora_rank, orank = cfg.o_lora_rank, d = cfg.hidden_size;
    const int64_t hpg = cfg.heads_per_group();
    return fmt::format(
        "{} rank {}/{}: heads {}..{} ({}), o_groups {}..{} ({}); wq_b [{}, {}], attn_sink [{}], "
        "wo_a [{}, {}], wo_b [{}, {}]; replicated: wq_a [{}, {}], wkv [{}, {}], compressors, indexer; "
        "KV cache: {}; attention output: {}",
        attn_scheme_name(s.scheme), s.rank, s.n_ranks, s.first_head, s.first_head + s.n_heads - 1, s.n_heads,
        s.first_group, s.first_group + s.o_groups - 1, s.o_groups, s.n_heads * D, qr, s.n_heads, s.o_groups * orank,
        hpg * D, d, s.o_groups * orank, qr, d, D, d,
        s.scheme == AttnScheme::kDataParallel
            ? "this rank's sequences only"
            : (s.kv_replicated ? "every sequence (replicated, MQA latent)" : "every sequence"),
        s.output_all_reduce ? "partial sum, all-reduce [T, d] per layer" : "complete");
}

}  // namespace dsv4::dist
