// Attention parallel schemes over N ranks (issue 8) and the slice of the attention weights each
// rank holds. Spec §2.4: 64 query heads of 512, one shared K=V latent (MQA), grouped output
// projection over 8 groups of 8 heads.
//
// kDataParallel: every rank holds the whole attention block and runs its own sequences; no
//   communication inside attention; a rank's KV holds only its own sequences.
// kTensorParallel: heads are split, rank r holding heads [r*H/N, (r+1)*H/N) and output groups
//   [r*G/N, (r+1)*G/N). Needs N | H and N | G so that each wo_a group (block-diagonal over its
//   8 heads) stays on one rank. Per rank: wq_b rows, attn_sink, wo_a rows and wo_b columns are
//   split; wq_a, q_norm, wkv, kv_norm, the compressors and the indexer are replicated (the K=V
//   latent is shared by all heads, so it and the KV cache are not sharded: spec §3.2). After
//   wo_b each rank holds a partial sum of the attention output: one all-reduce of [T, d] per
//   layer.
#pragma once

#include <string>

#include "core/status.h"
#include "model/config.h"

namespace dsv4::dist {

enum class AttnScheme { kDataParallel, kTensorParallel };

const char* attn_scheme_name(AttnScheme s);  // "dp" / "tp"
Result<AttnScheme> parse_attn_scheme(const std::string& s);

struct AttentionShard {
    AttnScheme scheme = AttnScheme::kDataParallel;
    int rank = 0, n_ranks = 1;
    int n_heads = 0, first_head = 0;    // query heads held (all for DP)
    int o_groups = 0, first_group = 0;  // output groups held (all for DP)
    bool kv_replicated = false;         // TP: every rank caches the KV of every sequence
    bool output_all_reduce = false;     // TP: attention output is a partial sum -> all-reduce [T, d]
};

// Errors: rank outside [0, n_ranks), n_ranks < 1, and for TP: N not dividing n_heads or o_groups.
Result<AttentionShard> make_attention_shard(const ModelConfig& cfg, AttnScheme scheme, int rank, int n_ranks);

// "tp rank 1/2: heads 32..63 (32), o_groups 4..7 (4), wq_b [16384, 1024], ..." for `dsv4 plan`.
std::string describe_attention_shard(const ModelConfig& cfg, const AttentionShard& s);

}  // namespace dsv4::dist
