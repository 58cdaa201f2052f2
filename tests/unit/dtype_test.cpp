// Bit-exact codec tests over every code (spec §4.2), and encoder rounding against brute force.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"

namespace dsv4 {
namespace {

// Nearest code by exhaustive search over finite codes; ties -> even mantissa (code bit 0 clear).
template <typename Decode>
int brute_nearest(float x, int n_codes, Decode decode) {
    int best = -1;
    double best_d = 1e300;
    for (int c = 0; c < n_codes; ++c) {
        float v = decode(uint8_t(c));
        if (std::isnan(v)) continue;
        if (std::signbit(v) != std::signbit(x) && v != 0.0f) continue;
        if ((v == 0.0f) && std::signbit(v) != std::signbit(x)) continue;
        double d = std::fabs(double(v) - double(x));
        if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
            best = c;
            best_d = d;
        }
    }
    return best;
}

TEST(DType, Fp8E4M3EveryCodeRoundTrips) {
    for (int c = 0; c < 256; ++c) {
        float v = fp8e4m3_to_f32(uint8_t(c));
        if ((c & 0x7f) == 0x7f) {
            EXPECT_TRUE(std::isnan(v)) << c;
            continue;
        }
        EXPECT_EQ(f32_to_fp8e4m3(v), uint8_t(c)) << "code " << c << " value " << v;
    }
    EXPECT_EQ(fp8e4m3_to_f32(0x7e), 448.0f);
    EXPECT_EQ(fp8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    EXPECT_EQ(fp8e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
}

TEST(DType, Fp8E4M3RoundingMatchesBruteForce) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> exp_d(-12.0f, 9.5f);
    for (int i = 0; i < 20000; ++i) {
        float x = std::exp2(exp_d(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
        if (std::fabs(x) > 448.0f) continue;
        int want = brute_nearest(x, 256, fp8e4m3_to_f32);
        EXPECT_EQ(int(f32_to_fp8e4m3(x)), want) << x;
    }
    // Exact midpoints between neighbouring codes go to the even code.
    for (int c = 0; c < 0x7d; ++c) {
        float lo = fp8e4m3_to_f32(uint8_t(c)), hi = fp8e4m3_to_f32(uint8_t(c + 1));
        float mid = 0.5f * (lo + hi);
        EXPECT_EQ(int(f32_to_fp8e4m3(mid)), (c % 2 == 0) ? c : c + 1) << mid;
    }
    EXPECT_EQ(f32_to_fp8e4m3(1e9f), 0x7e);  // saturates
    EXPECT_EQ(f32_to_fp8e4m3(-1e9f), 0xfe);
    EXPECT_EQ(f32_to_fp8e4m3(NAN), 0x7f);
}

TEST(DType, Fp4E2M1EveryCode) {
    const float want[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int c = 0; c < 16; ++c) {
        float v = fp4e2m1_to_f32(uint8_t(c));
        EXPECT_EQ(std::fabs(v), want[c & 7]);
        EXPECT_EQ(std::signbit(v), (c & 8) != 0);
        EXPECT_EQ(f32_to_fp4e2m1(v), uint8_t(c));
    }
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> d(-7.0f, 7.0f);
    for (int i = 0; i < 20000; ++i) {
        float x = d(rng);
        if (std::fabs(x) > 6.0f) continue;
        EXPECT_EQ(int(f32_to_fp4e2m1(x)), brute_nearest(x, 16, fp4e2m1_to_f32)) << x;
    }
    EXPECT_EQ(f32_to_fp4e2m1(0.25f), 0);  // tie 0 | 0.5 -> even code 0
    EXPECT_EQ(f32_to_fp4e2m1(0.75f), 2);  // tie 0.5 | 1 -> code 2 (1.0)
    EXPECT_EQ(f32_to_fp4e2m1(2.5f), 4);   // tie 2 | 3 -> code 4 (2.0)
    EXPECT_EQ(f32_to_fp4e2m1(5.0f), 6);   // tie 4 | 6 -> code 6 (4.0)
    EXPECT_EQ(f32_to_fp4e2m1(100.0f), 7);
}

TEST(DType, Ue8m0EveryCode) {
    for (int b = 0; b < 255; ++b) {
        float v = ue8m0_to_f32(uint8_t(b));
        EXPECT_EQ(v, std::ldexp(1.0f, b - 127));
        EXPECT_EQ(ue8m0_ceil(v), uint8_t(b));
        if (b > 0 && b < 254) {
            EXPECT_EQ(ue8m0_ceil(v * 1.0001f), uint8_t(b + 1));
        }
    }
    EXPECT_TRUE(std::isnan(ue8m0_to_f32(255)));
}

TEST(DType, Bf16EveryCodeRoundTrips) {
    for (uint32_t c = 0; c < 65536; ++c) {
        float v = bf16_to_f32(uint16_t(c));
        if (std::isnan(v)) continue;
        EXPECT_EQ(f32_to_bf16(v), uint16_t(c));
    }
    // RNE: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1.
    EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
    EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
}

TEST(DType, F16EveryCodeRoundTrips) {
    for (uint32_t c = 0; c < 65536; ++c) {
        float v = f16_to_f32(uint16_t(c));
        if (std::isnan(v)) continue;
        EXPECT_EQ(f32_to_f16(v), uint16_t(c)) << c;
    }
}

TEST(DType, SafetensorsTags) {
    EXPECT_EQ(dtype_from_safetensors("F8_E4M3"), DType::kF8E4M3);
    EXPECT_EQ(dtype_from_safetensors("F8_E8M0"), DType::kF8E8M0);
    EXPECT_EQ(dtype_from_safetensors("I64"), DType::kI64);
    EXPECT_FALSE(dtype_from_safetensors("F4").has_value());
}

}  // namespace
}  // namespace dsv4
