// Storage formats of cached K=V rows (window ring rows and main compressed rows) and indexer rows
// (spec §3.2, §2.12, §7.2 gotcha 10). One format per pool, chosen by the runner:
//   * kF32:  dim f32 values (exact; the CPU reference and the exactness tests);
//   * kBf16: dim bf16 values (RNE);
//   * kFp8:  the DeepSeek reference FP8 layout, for head dim D and RoPE dim R (nope N = D - R):
//            [0, N) e4m3 codes of dims 0..N-1 | [N, N + 2R) bf16 of dims N..D-1 |
//            ceil(N/64) UE8M0 scale bytes, one per 64 nope dims | zero pad to a multiple of 8 B.
//            D = 512, R = 64 gives the 584-byte row of FlashMLA/SGLang/vLLM (448 + 128 + 7 + 1).
//            Scale of block b: 2^ceil(log2(max(amax_b, 1e-4) / 448)) (ue8m0_ceil); codes are
//            round-to-nearest-even e4m3 of x / scale, saturating at 448. Decoding gives exactly
//            ref::kv_cache_qdq (FP8 QDQ of the nope dims, BF16 rounding of the RoPE dims).
// Indexer rows are never FP8: kFp8 pools keep them in bf16 (the reference caches BF16 indexer
// keys, spec §3.2). Rows are stored in 4-byte words (the unit of KvLayout offsets).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace dsv4 {

enum class KvRowFormat : int32_t { kF32 = 0, kBf16 = 1, kFp8 = 2 };

// "f32" | "bf16" | "fp8" -> format; anything else is an error naming the choices.
Result<KvRowFormat> parse_kv_row_format(const std::string& s);
const char* kv_row_format_name(KvRowFormat f);

// Geometry of one stored row.
struct KvRowSpec {
    KvRowFormat fmt = KvRowFormat::kF32;
    int32_t dim = 0;       // values per row
    int32_t rope_dim = 0;  // trailing RoPE dims (kFp8 keeps them bf16)

    int32_t nope() const { return dim - rope_dim; }
    int32_t n_scales() const { return (nope() + 63) / 64; }
    int32_t scale_offset() const { return nope() + 2 * rope_dim; }  // bytes (kFp8)
    // Bytes of one row (a multiple of 8 for kBf16 / kFp8 when dim % 4 == 0).
    int64_t bytes() const {
        switch (fmt) {
            case KvRowFormat::kF32:
                return int64_t(dim) * 4;
            case KvRowFormat::kBf16:
                return (int64_t(dim) * 2 + 7) / 8 * 8;
            case KvRowFormat::kFp8:
                return (int64_t(scale_offset()) + n_scales() + 7) / 8 * 8;
        }
        return 0;
    }
    int64_t words() const { return bytes() / 4; }
};

// The spec of the main K=V rows and of the indexer rows of a pool in format f.
KvRowSpec kv_main_row_spec(KvRowFormat f, int head_dim, int rope_dim);
KvRowSpec kv_index_row_spec(KvRowFormat f, int index_head_dim);

// CPU codec (tests, tools): x[dim] -> out[spec.bytes()] and back. Encoding matches the CUDA
// writer (cuda::write_kv_rows) byte for byte.
void encode_kv_row(const float* x, const KvRowSpec& spec, uint8_t* out);
void decode_kv_row(const uint8_t* row, const KvRowSpec& spec, float* x);

}  // namespace dsv4
