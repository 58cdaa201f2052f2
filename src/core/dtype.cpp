#include "core/dtype.h"

#include <cmath>
#include <limits>

namespace dsv4 {

size_t dtype_size(DType t) {
    switch (t) {
        case DType::kF64:
        case DType::kI64:
            return 8;
        case DType::kF32:
        case DType::kI32:
            return 4;
        case DType::kF16:
        case DType::kBF16:
        case DType::kI16:
            return 2;
        case DType::kI8:
        case DType::kU8:
        case DType::kF8E4M3:
        case DType::kF8E8M0:
        case DType::kBool:
            return 1;
    }
    return 0;
}

std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::kF32:
            return "F32";
        case DType::kF16:
            return "F16";
        case DType::kBF16:
            return "BF16";
        case DType::kF64:
            return "F64";
        case DType::kI8:
            return "I8";
        case DType::kU8:
            return "U8";
        case DType::kI16:
            return "I16";
        case DType::kI32:
            return "I32";
        case DType::kI64:
            return "I64";
        case DType::kF8E4M3:
            return "F8_E4M3";
        case DType::kF8E8M0:
            return "F8_E8M0";
        case DType::kBool:
            return "BOOL";
    }
    return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view tag) {
    static constexpr DType kAll[] = {DType::kF32, DType::kF16,    DType::kBF16,   DType::kF64,
                                     DType::kI8,  DType::kU8,     DType::kI16,    DType::kI32,
                                     DType::kI64, DType::kF8E4M3, DType::kF8E8M0, DType::kBool};
    for (DType t : kAll)
        if (dtype_name(t) == tag) return t;
    return std::nullopt;
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t man = h & 0x3ff;
    if (exp == 0) {
        // zero or subnormal: man * 2^-24
        float v = std::ldexp(float(man), -24);
        return (h & 0x8000u) ? -v : v;
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (man << 13));
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    if (std::isnan(f)) return sign | 0x7e00;
    float a = std::fabs(f);
    if (a >= 65520.0f) return sign | 0x7c00;  // rounds to inf
    if (a < std::ldexp(1.0f, -14)) {
        // subnormal range: quantum 2^-24, RNE via nearbyint (default rounding mode is RNE)
        float q = std::nearbyint(a * 16777216.0f);
        return sign | uint16_t(q);
    }
    uint32_t au = f32_bits(a);
    au += 0xfffu + ((au >> 13) & 1u);  // RNE at bit 13
    uint32_t exp = (au >> 23) - 112;
    return sign | uint16_t((exp << 10) | ((au >> 13) & 0x3ff));
}

float fp8e4m3_to_f32(uint8_t b) {
    const bool neg = b & 0x80;
    const int exp = (b >> 3) & 0xf;
    const int man = b & 0x7;
    float v;
    if (exp == 0xf && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
    if (exp == 0)
        v = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
    else
        v = std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
    return neg ? -v : v;
}

uint8_t f32_to_fp8e4m3(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
    float a = std::fabs(f);
    if (a >= 448.0f) return sign | 0x7e;  // saturate to 448
    if (a < std::ldexp(1.0f, -6)) {
        // subnormal: quantum 2^-9
        float q = std::nearbyint(a * 512.0f);  // 0..8; 8 == smallest normal 2^-6 (code 0x08)
        return sign | uint8_t(q);
    }
    int e;
    float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    // a = (1 + k/8) * 2^(e-1); k = round((2m - 1) * 8)
    float k = std::nearbyint((2.0f * m - 1.0f) * 8.0f);
    int exp = e - 1 + 7;
    if (k >= 8.0f) {
        k = 0.0f;
        ++exp;
    }
    if (exp > 15 || (exp == 15 && k > 6.0f)) return sign | 0x7e;
    return sign | uint8_t((exp << 3) | int(k));
}

float fp4e2m1_to_f32(uint8_t code) {
    static constexpr float kVals[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = kVals[code & 0x7];
    return (code & 0x8) ? -v : v;
}

uint8_t f32_to_fp4e2m1(float f) {
    if (std::isnan(f)) return 0x7;  // no NaN in e2m1: saturate (documented)
    const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
    const float a = std::fabs(f);
    // Midpoints between grid values; ties go to the even code (lower mantissa bit 0).
    // grid: 0 .5 1 1.5 2 3 4 6 ; codes 0..7 ; even codes: 0,1(.5)? -> use code parity.
    static constexpr float kVals[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    uint8_t best = 7;
    for (uint8_t c = 0; c < 7; ++c) {
        const float mid = 0.5f * (kVals[c] + kVals[c + 1]);
        if (a < mid) {
            best = c;
            break;
        }
        if (a == mid) {
            best = (c % 2 == 0) ? c : uint8_t(c + 1);
            break;
        }
    }
    return sign | best;
}

float ue8m0_to_f32(uint8_t b) {
    if (b == 255) return std::numeric_limits<float>::quiet_NaN();
    return std::ldexp(1.0f, int(b) - 127);
}

uint8_t ue8m0_ceil(float x) {
    if (!(x > 0.0f)) return 0;
    int e;
    float m = std::frexp(x, &e);      // x = m * 2^e, m in [0.5,1)
    int p = (m == 0.5f) ? e - 1 : e;  // smallest p with 2^p >= x
    int b = p + 127;
    if (b < 0) b = 0;
    if (b > 254) b = 254;
    return uint8_t(b);
}

}  // namespace dsv4
