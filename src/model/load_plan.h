// LoadPlan: every tensor of an official-layout checkpoint (spec §4.1) mapped to the weight it
// becomes on the GPU, validated (dtype, shape, block scales, tid2eid values) on the host before
// anything is allocated on a device. The GPU loader (runtime/checkpoint_loader.h) only copies
// what a plan lists, so every bad-checkpoint case is decided here and CPU tests can reach it.
//
// Completeness: each tensor of the checkpoint is either consumed by the plan (a weight, its block
// scale, or a routed expert held by another expert-parallel rank) or skipped with a stated reason
// (`mtp.*` unless the MTP blocks are asked for: the draft model of speculative decoding); any other
// tensor is an error naming
// it and its file, since an unused tensor usually means a mis-mapped name (and a mis-mapped name
// silently leaves a weight unloaded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/checkpoint.h"
#include "model/config.h"

namespace dsv4 {

// How a matrix is held on the device: the checkpoint bytes unchanged (kF16 is widened to f32 on
// the host, one tensor at a time, and held as kF32).
enum class PlanFormat { kF32, kBF16, kF16, kFp8E8M0, kFp8F32, kMxfp4 };
const char* plan_format_name(PlanFormat f);

enum class PlanKind {
    kMatrix,   // a [N, K] projection in its checkpoint format (+ scale)
    kVector,   // a small float tensor, held as f32 on the device (norms, mHC, sinks, ape, bias)
    kTid2eid,  // hash routing table [vocab, n_experts_per_tok], held as int32
};

struct PlanTensor {
    std::string name;  // checkpoint name of the weight
    PlanKind kind = PlanKind::kMatrix;
    std::vector<int64_t> shape;  // logical shape ([N, K] for matrices)
    PlanFormat fmt = PlanFormat::kF32;
    TensorView weight;  // bytes in the checkpoint mapping
    TensorView scale;   // block / group scale (FP8, MXFP4), else empty (nbytes 0)
    // Routed experts: the projection's group ("layers.L.ffn.experts.w1") and the local index.
    std::string expert_group;
    int expert_local = -1;
};

struct PlanSkip {
    std::string name, file, reason;
};

struct LoadPlan {
    std::vector<PlanTensor> tensors;         // in model order (embed, head, ..., layers)
    std::vector<PlanSkip> skipped;           // present in the checkpoint, deliberately not loaded
    bool head_tied = false;                  // no head.weight: the LM head is embed.weight (tie_word_embeddings)
    int expert_first = 0, expert_count = 0;  // routed experts this plan holds
    int mtp_blocks = 0;                      // MTP blocks planned ("mtp.M." tensors, M < mtp_blocks)
    uint64_t checkpoint_bytes = 0;           // bytes of every tensor read from the checkpoint (weights + scales)
    uint64_t device_bytes = 0;               // bytes the device copies take (vectors as f32, tid2eid as int32)
    const PlanTensor* find(std::string_view name) const;
};

// Builds and validates the plan for `cfg` over `ckpt`. Expert parallelism: only routed experts
// [expert_first, expert_first + expert_count) are planned (expert_count 0: all); the other
// experts' tensors are validated by name only and counted as held elsewhere.
// Errors (each names the tensor and its file): NotFound (a missing weight or scale),
// InvalidArgument (wrong dtype or shape, a config disagreeing with the tensors, an unconsumed
// tensor, experts of one projection in different formats), DataLoss (UE8M0 scale 255, tid2eid
// entries out of range or repeated in a row). mtp_blocks: also plan MTP blocks 0..mtp_blocks-1
// (spec §2.11; at most num_nextn_predict_layers), each a decoder block of ratio 0 with learned routing
// plus e_proj, h_proj, enorm, hnorm, norm and hc_head (missing ones: NotFound as above).
Result<LoadPlan> make_load_plan(const ModelConfig& cfg, const Checkpoint& ckpt, int expert_first = 0,
                                int expert_count = 0, int mtp_blocks = 0);

}  // namespace dsv4
