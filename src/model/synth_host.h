// Host ports of the seeded GPU fills of kernels/cuda/synth/synth.h: the same splitmix64 of
// (seed, element index), so for one seed every element has the bits the GPU fill gives it (tested
// against the GPU on small shapes: tests/kernels/cuda_runner/synth_host_test.cpp). `first`: p[i]
// gets element first + i of the seed's sequence, so a tensor can be generated in any pieces.
// The synthetic checkpoint writer (model/synthetic_checkpoint.h) is their user; they are its
// bottleneck, so they are compiled with AVX-512 / AVX2 clones where the CPU has them (integer and
// exactly rounded float operations only: every clone gives the same bits).
#pragma once

#include <cstdint>
#include <span>

namespace dsv4::synth_host {

// f32 uniform in [lo, hi): fma(hi - lo, u, lo), u in [0, 1) from the top 24 bits.
void fill_f32(std::span<float> p, uint64_t seed, float lo, float hi, int64_t first = 0);
// bf16 bits of amp * (2u - 1) (round to nearest even).
void fill_bf16(std::span<uint16_t> p, uint64_t seed, float amp, int64_t first = 0);
// e4m3 codes with random sign and mantissa, exponent field 5..8 (never NaN).
void fill_e4m3(std::span<uint8_t> p, uint64_t seed, int64_t first = 0);
// UE8M0 scale bytes uniform in [lo, hi].
void fill_ue8m0(std::span<uint8_t> p, uint64_t seed, int lo, int hi, int64_t first = 0);
// Packed MXFP4 bytes (two e2m1 codes each, all 16 codes valid).
void fill_mxfp4(std::span<uint8_t> p, uint64_t seed, int64_t first = 0);
// tid2eid [V, k] (p.size() == V * k): per row k distinct experts from [0, hot).
void fill_tid2eid(std::span<int32_t> p, int64_t V, int k, int hot, uint64_t seed);

}  // namespace dsv4::synth_host
