// "Pair-rotated" layout of MXFP4 expert codes (docs/perf/ledger.md E17): a fixed permutation
// of the 32 bits inside every 32-bit little-endian word of packed e2m1 codes, applied once at
// load time, so that the tensor-core expert GEMV (kernels/cuda/moe/moe_expert_mma.cuh, DQ = 4)
// builds its bf16x2 operand words with 9 integer ops per code word instead of ~16.
//
// Checkpoint word (spec §2.9 packing, low nibble = even k): nibble i (bits 4i..4i+3) = e2m1 code
//   of physical k 8c + i; code bits: 0 mantissa m, 1 exponent e0, 2 exponent e1, 3 sign.
// Output of the dequant, as in dequant16_bits (DQ = 1..3): word j (j = 0..3) is the bf16x2 pair
//   (k 8c + j, k 8c + j + 4) = e2m1 x 2^-126, i.e. for the low half m -> bit 6, e0 -> 7, e1 -> 8,
//   sign -> 15, and the same +16 for the high half (mask 0x81C081C0); the UE8M0 scale is applied
//   afterwards by a bf16x2 multiply (unchanged).
// Pair-rotated word: pair_words() below makes word j from the repacked word p as
//   j = 0: p & M;  j = 1: rotl(p, 4) & M;  j = 2: rotl(p, 10) & M;
//   j = 3: (rotl(p, 6) & 0x80C080C0) | (rotl(p, 14) & 0x01000100)   (M = 0x81C081C0),
// so repack_word() stores code bit f of pair j / half v at bit (o - d) mod 32, with o the target
// bit above and d the rotation that reads it. These 32 positions are all distinct (a bijection;
// tests/unit/mxfp4_pair_rotated_test.cpp checks it and the bit-exactness against the checkpoint
// dequant). The scale bytes and the word positions are unchanged; only the bits inside a word move.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace dsv4::mxfp4_pk {

constexpr uint32_t kPairMask = 0x81C081C0u;  // sign, e1, e0, m of both bf16 halves at 2^-126 scale

// Target bf16x2 bit of code bit f (0 m, 1 e0, 2 e1, 3 sign) of half v (0 low, 1 high).
DSV4_HD constexpr int target_bit(int f, int v) { return (f == 3 ? 15 : 6 + f) + 16 * v; }
// Left rotation with which pair j reads code bit f.
DSV4_HD constexpr int rotation(int j, int f) { return j == 0 ? 0 : j == 1 ? 4 : j == 2 ? 10 : (f == 2 ? 14 : 6); }
// Bit of the repacked word that holds code bit f of nibble j + 4v of the checkpoint word.
DSV4_HD constexpr int packed_bit(int j, int f, int v) { return (target_bit(f, v) - rotation(j, f)) & 31; }

DSV4_HD inline uint32_t rotl(uint32_t w, int d) {
#ifdef __CUDA_ARCH__
    return __funnelshift_l(w, w, d);
#else
    return d == 0 ? w : (w << d) | (w >> (32 - d));
#endif
}

// Checkpoint word -> pair-rotated word (the load-time repack).
DSV4_HD constexpr uint32_t repack_word(uint32_t w) {
    uint32_t out = 0;
    for (int j = 0; j < 4; ++j)
        for (int v = 0; v < 2; ++v)
            for (int f = 0; f < 4; ++f) out |= ((w >> (4 * (j + 4 * v) + f)) & 1u) << packed_bit(j, f, v);
    return out;
}

// Inverse of repack_word (tests, debugging).
DSV4_HD constexpr uint32_t unpack_word(uint32_t p) {
    uint32_t out = 0;
    for (int j = 0; j < 4; ++j)
        for (int v = 0; v < 2; ++v)
            for (int f = 0; f < 4; ++f) out |= ((p >> packed_bit(j, f, v)) & 1u) << (4 * (j + 4 * v) + f);
    return out;
}

// Integer part of the DQ = 4 dequant: pair-rotated word -> the four bf16x2 words (k j, k j + 4)
// x 2^-126, j = 0..3, before the scale multiply.
DSV4_HD inline void pair_words(uint32_t p, uint32_t (&o)[4]) {
    o[0] = p & kPairMask;
    o[1] = rotl(p, 4) & kPairMask;
    o[2] = rotl(p, 10) & kPairMask;
    o[3] = (rotl(p, 6) & 0x80C080C0u) | (rotl(p, 14) & 0x01000100u);
}

// The same four words from a checkpoint word, as dequant16_bits (DQ = 1..3) builds them.
DSV4_HD inline void checkpoint_pair_words(uint32_t w, uint32_t (&o)[4]) {
    for (int j = 0; j < 4; ++j) {
        const uint32_t q = w << (4 * (3 - j));
        o[j] = (q & 0x80008000u) | ((q & 0x70007000u) >> 6);
    }
}

}  // namespace dsv4::mxfp4_pk
