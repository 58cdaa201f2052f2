// Arguments of the decode MoE ops (spec §2.9): routing, token permutation, the MXFP4 grouped
// expert GEMV (w1/w3 fused with the SwiGLU clamp and routing weight; w2), and the combine.
// Status-free so nvcc translation units can include it.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

struct MoeRouteArgs {
    const float* logits = nullptr;       // [n_tokens, n_experts] f32 router logits
    const float* bias = nullptr;         // [n_experts] f32 selection bias (score layers)
    const int32_t* tid2eid = nullptr;    // [vocab, top_k] i32: hash layers when non-null
    const int32_t* token_ids = nullptr;  // [n_tokens] i32 (hash layers)
    int32_t* topk_ids = nullptr;         // [n_tokens, top_k] i32 out
    float* topk_w = nullptr;             // [n_tokens, top_k] f32 out
    int n_tokens = 0;
    int n_experts = 256;  // <= 1024 (any count; lanes past it hold no expert)
    int top_k = 6;        // <= 8
    float route_scale = 1.5f;
    bool norm_topk = true;
};

struct MoePermuteArgs {
    const int32_t* topk_ids = nullptr;  // [n_tokens, top_k]
    const float* topk_w = nullptr;      // [n_tokens, top_k]
    int32_t* expert_count = nullptr;    // [n_experts] out
    int32_t* expert_offset = nullptr;   // [n_experts + 1] out, exclusive prefix sum
    int32_t* perm_token = nullptr;      // [n_tokens * top_k] out: token of permuted row p
    int32_t* perm_dst = nullptr;        // [n_tokens * top_k] out: t * top_k + k of row p
    float* perm_w = nullptr;            // [n_tokens * top_k] out: routing weight of row p
    int32_t* active_experts = nullptr;  // [n_experts] out (optional): ids with rows, ascending
    int32_t* n_active = nullptr;        // [1] out (optional): how many entries of active_experts
    int n_tokens = 0;
    int n_experts = 256;  // <= 1024
    int top_k = 6;
};

enum class MoeExpertMode { kGateUp, kDown };

// Bit layout of the packed e2m1 expert codes. kCheckpoint: as stored in the checkpoint (spec
// §2.9). kPairRotated: the bits inside every 32-bit word permuted once at load time
// (core/mxfp4_pair_rotated.h, moe_weight_repack_launch); only the "bitdqpk" expert variants read it,
// and moe_expert_launch refuses any variant whose layout differs from the args'.
enum class MoeWeightLayout { kCheckpoint, kPairRotated };

// Grouped MXFP4 GEMV over the active experts. Weights stacked per layer:
//   w [n_experts, N, K/2] packed e2m1 (low nibble = even k), scale [n_experts, N, K/32] UE8M0.
// kGateUp: h[p, n] = bf16(silu(min(x w1^T, lim)) * clip(x w3^T, -lim, lim) * perm_w[p]) with
//   x = tokens[perm_token[p]]; out = h [n_tokens * top_k, N] bf16 in permuted order.
// kDown:   y[perm_dst[p], n] = h[p] w2^T; out = y [n_tokens * top_k, N] f32.
struct MoeExpertArgs {
    MoeExpertMode mode = MoeExpertMode::kGateUp;
    const void* x = nullptr;      // kGateUp: [n_tokens, K] bf16 (f32 when x_f32); kDown: [rows, K] bf16
    bool x_f32 = false;           // kGateUp only: f32 x, rounded to bf16 while staged (16-B aligned)
    const uint8_t* w1 = nullptr;  // kGateUp: w1; kDown: w2
    const uint8_t* w1_scale = nullptr;
    const uint8_t* w3 = nullptr;  // kGateUp only
    const uint8_t* w3_scale = nullptr;
    MoeWeightLayout layout = MoeWeightLayout::kCheckpoint;  // of w1 and w3 (same for both)
    const int32_t* expert_count = nullptr;
    const int32_t* expert_offset = nullptr;
    const int32_t* perm_token = nullptr;
    const int32_t* perm_dst = nullptr;
    const float* perm_w = nullptr;
    // Optional compact grid: CTAs walk active_experts[0 .. *n_active) instead of all n_experts;
    // max_active (fixed per batch size, e.g. min(n_experts, n_tokens * top_k)) sizes the grid.
    const int32_t* active_experts = nullptr;
    const int32_t* n_active = nullptr;
    int max_active = 0;
    void* out = nullptr;
    int n_experts = 256;
    int N = 0;                   // output features (2048 gate-up, 4096 down)
    int K = 0;                   // reduction length, multiple of 1024
    float swiglu_limit = 10.0f;  // <= 0: no clamp
    int n_rows = 0;              // n_tokens * top_k: variant-selection hint only
    // Grouped GEMM (moe_grouped_launch) only: its work list of (expert, token tile) entries, written
    // by the launch itself. tile_list [moe_grouped_max_tiles(n_rows, n_experts)] and n_tiles [2]:
    // int32 workspace.
    int32_t* tile_list = nullptr;
    int32_t* n_tiles = nullptr;
    int variant = -1;  // forced variant (the runner passes option moe_variant); -1: heuristic
    // Grouped GEMM only: x (kGateUp: bf16 tokens; kDown: h) is in the k-permuted layout of
    // moe_kperm.h, which only the wgmma variants read; their gate-up writes h in it too.
    bool x_kperm = false;
    // Grouped GEMM only: a decode-only step (one token per sequence). The heuristic takes the
    // persistent wgmma rows there (moe_grouped_select_variant); prefill steps of as few rows per
    // expert measured slower on them (ledger E56).
    bool decode_step = false;
};

struct MoeCombineArgs {
    const float* y = nullptr;      // [n_tokens, top_k, d] f32 expert outputs (weighted)
    const void* shared = nullptr;  // [n_tokens, d] bf16 shared-expert output, or null
    void* out = nullptr;           // [n_tokens, d] bf16
    bool f32 = false;              // shared and out are f32 instead (the f32 CUDA runner)
    int n_tokens = 0;
    int top_k = 6;
    int d = 4096;  // multiple of 4
};

}  // namespace dsv4::cuda
