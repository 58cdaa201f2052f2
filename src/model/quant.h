// Block quantisation codecs of the checkpoint formats (spec §4.2), on plain host arrays.
//  * FP8 block: weight [N, K] as e4m3fn codes, one scale per block x block tile (grid
//    [ceil(N/block), ceil(K/block)], edge tiles cropped), W = fp8(q) * scale.
//  * MXFP4: weight [N, K] as e2m1 codes packed two per byte along K (low nibble = even k), one
//    UE8M0 scale per 32 consecutive k in a row (grid [N, ceil(K/32)]), W = e2m1(code) * scale.
// Quantisers pick the scale first and then divide by exactly that scale (B14): the scale is the
// smallest power of two with amax / scale <= max code (448 for e4m3, 6 for e2m1), i.e.
// 2^ceil(log2(amax / max)); all-zero blocks get scale 1. Dividing by a power of two is exact, so
// dequantise(quantise(w)) only carries the element codec's own rounding.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4 {

inline constexpr int kFp8Block = 128;
inline constexpr int kMxfp4Group = 32;

struct Fp8BlockQuant {
    std::vector<uint8_t> q;            // [N, K] e4m3fn codes
    std::vector<uint8_t> scale_ue8m0;  // [ceil(N/block), ceil(K/block)] UE8M0 bytes
};

struct Mxfp4Quant {
    std::vector<uint8_t> packed;  // [N, ceil(K/2)] two e2m1 codes per byte, low nibble = even k
    std::vector<uint8_t> scales;  // [N, ceil(K/32)] UE8M0 bytes
};

// UE8M0 byte of the smallest power of two s with amax / s <= max_code (amax >= 0; 127 for 0;
// saturates to 254 for Inf/huge). Exposed for tests.
uint8_t ue8m0_scale_for(float amax, float max_code);

// w: row-major [N, K] f32. Non-finite inputs: NaN stays NaN (e4m3 0x7f), Inf saturates.
Fp8BlockQuant quantize_fp8_block(const float* w, int64_t N, int64_t K, int block = kFp8Block);
// out[n*K + k] = fp8e4m3_to_f32(q[n*K + k]) * ue8m0_to_f32(scale[(n/block) * ceil(K/block) + k/block]).
void dequantize_fp8_block(const uint8_t* q, const uint8_t* scale_ue8m0, int64_t N, int64_t K, float* out,
                          int block = kFp8Block);
// As above with f32 scales (Flash-Base checkpoints); out = fp8(q) * scale, one f32 multiply.
void dequantize_fp8_block_f32scale(const uint8_t* q, const float* scale, int64_t N, int64_t K, float* out,
                                   int block = kFp8Block);

// w: row-major [N, K] f32 (K even).
Mxfp4Quant quantize_mxfp4(const float* w, int64_t N, int64_t K);
void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t N, int64_t K, float* out);

}  // namespace dsv4
