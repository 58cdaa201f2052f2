// Element types of checkpoints and activations, and bit-exact scalar codecs.
// Formats: bf16 (IEEE binary32 top half), f16 (IEEE binary16), fp8 e4m3fn (OCP, no inf, NaN=0x7f/0xff,
// max 448), fp4 e2m1 (OCP MX, values {0,.5,1,1.5,2,3,4,6} and negatives, bit 3 = sign), ue8m0
// (unsigned power-of-two exponent, value 2^(b-127), 255 = NaN). Spec §4.2.
// Encoders round to nearest, ties to even, and saturate to the largest finite value (fp8, fp4).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class DType : uint8_t {
    kF32,
    kF16,
    kBF16,
    kF64,
    kI8,
    kU8,
    kI16,
    kI32,
    kI64,
    kF8E4M3,  // fp8 e4m3fn
    kF8E8M0,  // ue8m0 scales
    kBool,
};

// Size of one element in bytes.
size_t dtype_size(DType t);
// Safetensors tag ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_safetensors(std::string_view tag);

inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float f32_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// bf16 <-> f32. Encoding rounds to nearest even; NaN stays NaN (quiet).
inline float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }
inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
// Round an f32 to the nearest bf16 value, returned as f32.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// fp8 e4m3fn: bias 7, no infinities, 0x7f/0xff NaN, max finite 448.
float fp8e4m3_to_f32(uint8_t b);
uint8_t f32_to_fp8e4m3(float f);  // saturating, RNE; NaN -> 0x7f

// fp4 e2m1: 4-bit code (low nibble used).
float fp4e2m1_to_f32(uint8_t code);
uint8_t f32_to_fp4e2m1(float f);  // saturating to +-6, RNE

// ue8m0: 2^(b-127); 255 is NaN.
float ue8m0_to_f32(uint8_t b);
// Smallest power-of-two exponent byte e with 2^(e-127) >= x (x > 0); clamps to [0, 254].
uint8_t ue8m0_ceil(float x);

}  // namespace dsv4
