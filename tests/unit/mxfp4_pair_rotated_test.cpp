// The pair-rotated MXFP4 code layout (core/mxfp4_pair_rotated.h): the repack is a bijection on
// the 32 bits of a word, and the DQ = 4 dequant of a repacked word equals the checkpoint dequant
// (DQ = 1..3, dequant16_bits) bit for bit, and both equal e2m1 x 2^(s-127) after the scale step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"
#include "core/mxfp4_pair_rotated.h"
#include "kernels/cuda/moe/moe_kperm.h"

namespace dsv4 {
namespace {

using namespace mxfp4_pk;

TEST(Mxfp4PairRotated, RepackIsABitPermutation) {
    // Every checkpoint bit lands on its own bit: the 32 single-bit words map to 32 distinct
    // single-bit words.
    uint32_t covered = 0;
    for (int b = 0; b < 32; ++b) {
        const uint32_t p = repack_word(1u << b);
        ASSERT_EQ(__builtin_popcount(p), 1) << "bit " << b;
        ASSERT_EQ(covered & p, 0u) << "bit " << b << " collides";
        covered |= p;
        EXPECT_EQ(unpack_word(p), 1u << b);
    }
    EXPECT_EQ(covered, 0xffffffffu);
    std::mt19937 g(7);
    for (int i = 0; i < 100000; ++i) {
        const uint32_t w = g();
        ASSERT_EQ(unpack_word(repack_word(w)), w);
        ASSERT_EQ(repack_word(unpack_word(w)), w);
    }
}

TEST(Mxfp4PairRotated, PairWordsMatchCheckpointDequantBitForBit) {
    // Both dequants move bits without combining them (masks, shifts, rotations, ORs of disjoint
    // fields), so they are linear over GF(2): agreeing on 0 and on the 32 single-bit words proves
    // agreement on all 2^32 words. The random words check the same claim directly.
    auto check = [](uint32_t w) {
        uint32_t a[4], b[4];
        checkpoint_pair_words(w, a);
        pair_words(repack_word(w), b);
        for (int j = 0; j < 4; ++j)
            if (a[j] != b[j]) return false;
        return true;
    };
    ASSERT_TRUE(check(0));
    for (int b = 0; b < 32; ++b) ASSERT_TRUE(check(1u << b)) << "bit " << b;
    std::mt19937 g(11);
    for (int i = 0; i < 2000000; ++i) {
        const uint32_t w = g();
        ASSERT_TRUE(check(w)) << std::hex << w;
    }
}

// bf16 bits -> f32 (exact, subnormals kept).
float bf16_bits(uint32_t h) {
    const uint32_t u = h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

TEST(Mxfp4PairRotated, ScaledValuesEqualE2m1TimesUe8m0ForAllScaleBytes) {
    // The kernel's scale step (moe_expert_mma.cuh scale16): x 2^(min(s,128)-1), then x 2^(s-128)
    // when s > 128 (NaN for 255), each product exact in bf16; emulated here in f32, where the
    // products are exact too. Every code pair of every word position, every UE8M0 byte.
    for (int s = 0; s < 256; ++s)
        for (int lo = 0; lo < 16; ++lo)
            for (int hi = 0; hi < 16; ++hi)
                for (int j = 0; j < 4; ++j) {
                    const uint32_t w = (uint32_t(lo) << (4 * j)) | (uint32_t(hi) << (4 * (j + 4)));
                    uint32_t o[4];
                    pair_words(repack_word(w), o);
                    for (int half = 0; half < 2; ++half) {
                        float v = bf16_bits((o[j] >> (16 * half)) & 0xffffu) * std::ldexp(1.0f, std::min(s, 128) - 1);
                        if (s > 128) v *= s == 255 ? NAN : std::ldexp(1.0f, s - 128);
                        const float ref = fp4e2m1_to_f32(uint8_t(half ? hi : lo)) * ue8m0_to_f32(uint8_t(s));
                        if (std::isnan(ref)) {
                            ASSERT_TRUE(std::isnan(v)) << "s " << s;
                        } else {
                            ASSERT_EQ(v, ref) << "s " << s << " code " << (half ? hi : lo) << " j " << j;
                        }
                    }
                }
}

// The wgmma expert GEMM's k-permuted activation layout (kernels/cuda/moe/moe_kperm.h): a bijection
// on each 64-k block, pos_of its inverse, and the position the dequant gives each operand word:
// lane t, k16 step s, word w = s >> 1 of its row's pair (physical k 16t + 8w .. + 7), pair word
// j = 2 (s & 1) (+1 for the upper 8 positions) holds (k j, k j + 4), which must sit at positions
// 2t, 2t + 1 (and 2t + 8, 2t + 9) of step s in the mma A-fragment layout.
TEST(MoeKperm, BijectionMatchingTheDequantWords) {
    bool seen[64] = {};
    for (int L = 0; L < 64; ++L) {
        const int k = moe_kperm::phys_of(L);
        ASSERT_GE(k, 0);
        ASSERT_LT(k, 64);
        EXPECT_FALSE(seen[k]) << "physical k " << k << " twice";
        seen[k] = true;
        EXPECT_EQ(moe_kperm::pos_of(k), L);
    }
    for (int t = 0; t < 4; ++t)
        for (int s = 0; s < 4; ++s)
            for (int upper = 0; upper < 2; ++upper) {
                const int j = 2 * (s & 1) + upper, base = 16 * t + 8 * (s >> 1);
                EXPECT_EQ(moe_kperm::phys_of(16 * s + 2 * t + 8 * upper), base + j);
                EXPECT_EQ(moe_kperm::phys_of(16 * s + 2 * t + 8 * upper + 1), base + j + 4);
            }
    EXPECT_EQ(moe_kperm::position(64 * 3 + 5), 64 * 3 + moe_kperm::pos_of(5));
}

}  // namespace
}  // namespace dsv4
