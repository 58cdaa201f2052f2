// Arguments of the sparse decode attention (see sparse_decode.h), free of Status so that nvcc
// translation units can include it.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

// FP8 KV row, 584 bytes: [0, 448) e4m3 codes of dims 0..447; [448, 576) bf16 dims 448..511;
// [576, 583) UE8M0 scales, one per 64 nope dims; byte 583 pad. Rows must start 8-byte aligned.
inline constexpr int kKvFp8RowBytes = 584;
inline constexpr int kKvFp8NopeDims = 448;
inline constexpr int kKvHeadDim = 512;

enum class KvFormat { kBf16, kFp8 };

struct SparseDecodeArgs {
    const void* q = nullptr;               // [batch, n_heads, 512] bf16
    const void* kv_pool = nullptr;         // paged pool: bf16 rows [512] or fp8 rows [584 B]
    const int64_t* row_offsets = nullptr;  // [row_start[batch]] i64 element offsets of each row
    const int32_t* row_start = nullptr;    // [batch + 1] i32 CSR bounds into row_offsets
    const float* sink = nullptr;           // [n_heads] f32 (may be -inf)
    void* out = nullptr;                   // [batch, n_heads, 512] bf16
    float* workspace = nullptr;            // f32, >= sparse_decode_workspace_floats(...)
    KvFormat format = KvFormat::kBf16;
    int batch = 0;
    int n_heads = 64;     // multiple of the variant's block_h
    int max_rows = 0;     // upper bound of rows per sequence (fixes the split)
    float scale = 0.0f;   // softmax scale, 1/sqrt(512)
    int target_ctas = 0;  // split-KV target; 0 = 2 x SM count
    int n_splits = 0;     // 0 = heuristic; > 0 forces
    int variant = -1;     // registry index (RuntimeOptions::attn_variant); -1 = heuristic
};

}  // namespace dsv4::cuda
