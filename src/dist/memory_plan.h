// MemoryPlan: what each of N GPUs holds for a model under expert parallel MoE plus data- or
// tensor-parallel attention (issue 8): weight bytes per rank, KV per sequence, and how many
// sequences of a given context fit in what is left. Printed by `dsv4 plan`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/attention_partition.h"
#include "dist/kv_bytes.h"
#include "dist/weight_inventory.h"

namespace dsv4::dist {

struct PlanOptions {
    int n_ranks = 1;
    AttnScheme attn = AttnScheme::kDataParallel;
    int64_t context = 8192;  // tokens per sequence the capacity is computed for
    int64_t batch = 0;       // sequences in flight over all ranks (0: report capacity only)
    KvRowFormat kv_rows = KvRowFormat::kBf16;
    double gpu_bytes = 0;      // memory of one GPU
    double reserve_bytes = 0;  // per GPU: CUDA context, activations, workspaces, NCCL buffers
    InventoryOptions inventory;
};

struct RankPlan {
    int rank = 0;
    RankWeightBytes weights;
    int first_expert = 0, n_experts = 0;
    AttentionShard attn;
    int64_t seqs = 0;       // of opt.batch, the sequences whose KV this rank holds
    int64_t kv_bytes = 0;   // those sequences at opt.context
    double free_bytes = 0;  // gpu - reserve - weights - kv (negative: does not fit)
    int64_t max_seqs = 0;   // sequences of opt.context this rank's KV memory can hold
};

struct MemoryPlan {
    PlanOptions opt;
    int64_t model_bytes = 0;  // whole checkpoint
    KvBytes kv;
    int64_t seq_bytes = 0;  // one sequence at opt.context
    std::vector<RankPlan> ranks;
    // Sequences of opt.context the whole group serves at once: sum over ranks for DP, the
    // per-rank minimum for TP (every rank holds every sequence).
    int64_t max_seqs = 0;
    bool fits() const;
};

// Errors: the partitions' errors (ranks not dividing experts / heads / groups), gpu_bytes <= 0.
Result<MemoryPlan> make_memory_plan(const ModelConfig& cfg, const PlanOptions& opt);

// A table for the terminal.
std::string format_memory_plan(const ModelConfig& cfg, const MemoryPlan& plan);

}  // namespace dsv4::dist
