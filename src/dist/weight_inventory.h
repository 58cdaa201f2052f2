// WeightInventory: every weight tensor of a DeepSeek-V4 checkpoint (spec §4.1) with its storage
// format and byte size, derived from a ModelConfig, and how each is placed across ranks (issue 8:
// the per-rank memory plan). For the Flash config the total is the checkpoint's 159,609,485,896 B
// (spec REF-INDEX), checked in tests/dist.
//
// A weight and its block-scale sibling are one entry (`.weight`, bytes include `.scale`).
// Placement under parallelism:
//   kReplicated: on every rank (embeddings, head, norms, mHC, router, shared expert, compressors,
//                indexer, and all attention matrices under data-parallel attention);
//   kExpert:     on the rank that owns `expert` (ExpertPartition);
//   kHeadRows / kHeadCols: under tensor-parallel attention, rows / columns split evenly over the
//                ranks (wq_b, attn_sink, wo_a rows; wo_b columns); whole under data parallel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/attention_partition.h"
#include "dist/expert_partition.h"
#include "model/config.h"

namespace dsv4::dist {

enum class Storage : uint8_t {
    kBf16,      // 2 B per element
    kF32,       // 4 B
    kI64,       // 8 B (tid2eid)
    kFp8Block,  // 1 B e4m3 per element + one UE8M0 byte per 128x128 block (spec §4.2)
    kMxfp4,     // 0.5 B e2m1 per element + one UE8M0 byte per 1x32 group along columns (spec §4.2)
};

enum class Placement : uint8_t { kReplicated, kExpert, kHeadRows, kHeadCols };

struct TensorSpec {
    std::string name;  // official name, e.g. "layers.3.ffn.experts.17.w1.weight"
    int64_t rows = 0;  // shape [rows, cols]; 1-D tensors have cols = 1
    int64_t cols = 1;
    Storage storage = Storage::kBf16;
    Placement placement = Placement::kReplicated;
    int expert = -1;  // kExpert: global expert id
};

// Bytes of a [rows, cols] tensor in a storage format, scales included.
int64_t storage_bytes(Storage s, int64_t rows, int64_t cols);

struct InventoryOptions {
    // Storage of the dense matrices that Flash keeps in FP8 (wq_a, wq_b, wkv, wo_a, wo_b, shared
    // experts, indexer.wq_b, MTP e_proj/h_proj). false = BF16 (the tiny test checkpoints).
    bool dense_fp8 = true;
    bool include_mtp = true;  // the mtp.* block(s) of num_nextn_predict_layers
};

// Every tensor of the checkpoint in name order of spec §4.1. Experts use cfg.expert_format
// (kFp4 -> MXFP4, kFp8 -> FP8 block, kBf16 -> BF16).
std::vector<TensorSpec> weight_inventory(const ModelConfig& cfg, const InventoryOptions& opt = {});

struct RankWeightBytes {
    int64_t replicated = 0;       // identical on every rank
    int64_t experts = 0;          // this rank's routed experts
    int64_t attention_split = 0;  // this rank's share of head-split tensors (all of them under DP)
    int64_t total() const { return replicated + experts + attention_split; }
};

// Bytes one rank holds. Errors: partitions for different rank counts, or a head-split tensor
// whose split dimension is not divisible by the rank count.
Result<RankWeightBytes> rank_weight_bytes(const std::vector<TensorSpec>& inv, const ExpertPartition& ep,
                                          const AttentionShard& attn);

int64_t total_bytes(const std::vector<TensorSpec>& inv);

}  // namespace dsv4::dist
