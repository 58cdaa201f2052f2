// Tensor-core (mma.sync m16n8k16 bf16) variant of the grouped MXFP4 expert GEMV, for batches
// where the CUDA-core version is FMA-bound (B >= ~16: dozens of rows per active expert).
//
// Thread roles: warp w owns 16 weight rows (kGateUp: the same 16 features of w1 and w3, SwiGLU
//   in the epilogue; kDown: two 16-row tiles of w2) against 8*NTT tokens. The K dimension is
//   relabelled per 128-k block so that each lane's A fragment comes from ONE 16-byte load:
//   lane (g = lane/4, t = lane%4) owns physical k [32t, 32t+32) of rows g and g+8 (exactly one
//   UE8M0 group), and in mma step s uses physical k 32t+4s+{0,1} as logical {2t, 2t+1} and
//   32t+4s+{2,3} as {2t+8, 2t+9}. The B fragments (x) use the same relabelling, read as 8-byte
//   pieces of x from shared memory, so the dot products are unchanged.
// Dequantisation: e2m1 nibble pair -> fp16 bit placement -> f32 x (UE8M0 * 2^14) -> bf16x2,
//   exact (e2m1 x 2^k is representable in bf16).
// Dequantisation, DQ = 1..3 ("bitdq" / "bitdqc" / "bitdqp" variants, docs/perf/ledger.md E6, E7): no float conversions.
// Each
//   32-bit word of codes (8 values, physical k 8c..8c+7) yields four bf16x2 words pairing k j and
//   j+4 (j = 0..3): shift the word so nibbles j and j+4 sit at bits 12-15 / 28-31, keep the sign
//   bit and move the 3 magnitude bits to bf16 bits 6-8 (value e2m1 * 2^-126, code 1 a bf16
//   subnormal), then one bf16x2 multiply by 2^(s-1) applies the UE8M0 scale 2^(s-127) and the
//   2^126 fix-up at once (exact; a second multiply only for s > 128). x fragments are re-paired
//   to (k j, k j+4) with byte permutes, and read with a chunk order swapped for lanes t = 2, 3
//   so the 8 lanes of a quarter-warp hit 32 distinct banks (rows are K + 8 bf16 apart).
// DQ = 4 ("bitdqpk", docs/perf/ledger.md E17): as DQ = 3 on weights whose code words were
//   bit-permuted once at load time (MoeWeightLayout::kPairRotated, core/mxfp4_pair_rotated.h),
//   so the same four bf16x2 words come from 4 rotations and 5 logic ops per code word (~16 ops
//   for DQ = 1..3); the scale multiply is unchanged. Measured (docs/perf/ledger.md E17): 344 vs 454
//   warp instructions per 128 k (SASS), -8..-12% time vs DQ = 2 at batch 1-256 (batch 64: 0.935 ms,
//   74% of copy), so the kernel was partly issue-bound.
// Shared memory: x [8*NTT][K + 8] bf16 of the current token chunk (padded rows).
// Bound: meant to be HBM-bound up to ~8*NTT rows per expert. Measured (ledger E5): DQ = 0 at
//   batch 64, 201 experts x 13.4 MB in 1.73 ms = 1.56 TB/s, ~40% of copy, issue-bound by the
//   dequant; (docs/perf/ledger.md E6): DQ = 2 in 1.01 ms = 2.66 TB/s, 68% of copy, still issue-bound
//   (16 extra selects per 128 k cost 3-5%).
#pragma once

#include "core/mxfp4_pair_rotated.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/moe/moe_args.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::moe_mma {

// 16 bytes of e2m1 (32 values, physical k order) times one scale -> 16 bf16x2 words.
__device__ __forceinline__ void dequant16(const uint4 v, float sc, uint32_t (&o)[16]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            uint32_t h = dev::e2m1x2_to_half2_bits_scaled((w[j] >> (8 * b)) & 0xffu);
            const float2 f = __half22float2(*reinterpret_cast<__half2*>(&h));
            o[4 * j + b] = dev::pack_bf16x2(f.x * sc, f.y * sc);
        }
}

// Applies the UE8M0 byte s to N bf16x2 words holding e2m1 x 2^-126: x 2^(s-1), exact (e2m1 x
// 2^(s-127) is a bf16 value, for s = 0 a subnormal; bf16 multiplies keep subnormal inputs, PTX
// mul/fma .bf16x2 have no .ftz). Shared by the GEMV and both grouped GEMMs.
// scale_words_low: its common part, x 2^(min(s,128) - 1), no branch (exact for s <= 128).
template <int N>
__device__ __forceinline__ void scale_words_low(uint32_t s, uint32_t* o) {
    const uint32_t e1 = min(s, 128u) + 126u;  // bf16 exponent field of 2^(min(s,128) - 1)
    const uint32_t f1 = (e1 << 7) | (e1 << 23);
    const __nv_bfloat162 m1 = *reinterpret_cast<const __nv_bfloat162*>(&f1);
#pragma unroll
    for (int i = 0; i < N; ++i) {
        __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&o[i]), m1);
        o[i] = *reinterpret_cast<uint32_t*>(&r);
    }
}
// The rare rest of scale_words for s > 128, on words scale_words_low already scaled: x 2^(s-128)
// (NaN for s = 255). One multiply of a bf16 value by a power of two, as the two steps of
// scale_words, so the result is bit-identical to it.
__device__ __forceinline__ __nv_bfloat162 scale_rest_factor(uint32_t s) {
    const uint32_t f2 = s == 255u ? 0x7fc07fc0u : (((s - 1u) << 7) | ((s - 1u) << 23));
    return *reinterpret_cast<const __nv_bfloat162*>(&f2);
}
template <int N>
__device__ __forceinline__ void scale_words(uint32_t s, uint32_t* o) {
    scale_words_low<N>(s, o);
    if (s > 128u) {  // rare: 2^(s-1) is not a finite bf16; apply the rest 2^(s-128) (NaN for 255)
        const __nv_bfloat162 m2 = scale_rest_factor(s);
#pragma unroll
        for (int i = 0; i < N; ++i) {
            __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&o[i]), m2);
            o[i] = *reinterpret_cast<uint32_t*>(&r);
        }
    }
}
__device__ __forceinline__ void scale16(uint32_t s, uint32_t (&o)[16]) { scale_words<16>(s, o); }

// DQ = 1..3: 16 bytes of e2m1 (physical k order) with UE8M0 byte s -> 16 bf16x2 words, word 4c + j
// = (k 8c + j, k 8c + j + 4) times 2^(s-127): per word, shift, two masks, shift, or (~4 ops).
__device__ __forceinline__ void dequant16_bits(const uint4 v, uint32_t s, uint32_t (&o)[16]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t q = w[c] << (4 * (3 - j));
            o[4 * c + j] = (q & 0x80008000u) | ((q & 0x70007000u) >> 6);
        }
    scale16(s, o);
}

// DQ = 4: the same 16 words from codes in the pair-rotated layout (core/mxfp4_pair_rotated.h,
// repacked at load time): per code word 4 funnel shifts (rotations) + 5 logic ops for 4 words.
__device__ __forceinline__ void dequant16_pk(const uint4 v, uint32_t s, uint32_t (&o)[16]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        uint32_t q[4];
        mxfp4_pk::pair_words(w[c], q);
#pragma unroll
        for (int j = 0; j < 4; ++j) o[4 * c + j] = q[j];
    }
    scale16(s, o);
}

// Bytes of the split-K reduction buffer after the staged x (KS > 1): NW warps x 32 lanes x the
// 2 * NTT * 4 accumulators of a lane, f32.
constexpr int red_bytes(int NW, int NTT, int KS) { return KS > 1 ? NW * 32 * 8 * NTT * 4 : 0; }

// DQ: 0 f32 dequant; 1 conversion-free with swizzled x reads; 2 conversion-free, natural x reads,
// x re-paired in registers; 3 conversion-free, x re-paired once in shared memory after staging;
// 4 as 3 on pair-rotated weights (MoeWeightLayout::kPairRotated only; dequant16_pk).
// MINB: minimum CTAs per SM for the register allocator (__launch_bounds__).
// KS (split-K inside the CTA, docs/perf/ledger.md E11): the NW warps form NW / KS row tiles x KS slices of
//   K; warp w owns row tile w / KS and k in [(w % KS) K / KS, (w % KS + 1) K / KS). The KS partial
//   accumulators of a row tile meet in shared memory and the slice-0 warp adds them in slice order
//   (fixed, so deterministic) before its epilogue. Meant for small batches, where the plain grid
//   (N / rows per CTA) x active experts is a fraction of a wave. KS > 1 also stages only the live
//   token rows of a chunk (the B fragments of the dead rows are zeros in registers), instead of
//   zero-filling all 8 * NTT rows. Measured (docs/perf/ledger.md E11): KS = 2 is 4% faster at batch 1 only
//   (192 plain CTAs), 10-20% slower from batch 2 on; KS = 4 slower everywhere (+13% at B = 1):
//   each extra CTA pays the x staging and the load-pipeline ramp again, and residency stays
//   register-bound at 3 CTAs per SM, so more CTAs do not mean more bytes in flight.
template <bool GATEUP, int NW, int NTT, int U, int DQ = 0, int MINB = 1, int KS = 1>
__global__ void __launch_bounds__(NW * 32, MINB) moe_expert_mma_kernel(MoeExpertArgs a) {
    dev::pdl_begin();
    static_assert(NW % KS == 0, "KS must divide the warp count");
    constexpr int MT = 8 * NTT;
    constexpr bool kLiveRows = KS > 1;  // stage / read only the live token rows
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem);
    int e = blockIdx.y;
    if (a.active_experts) {
        if (e >= *a.n_active) return;
        e = a.active_experts[e];
    }
    const int count = a.expert_count[e];
    if (count == 0) return;
    const int off = a.expert_offset[e];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = a.K, N = a.N, XS = K + 8;
    constexpr int kRowsPerWarp = GATEUP ? 16 : 32;
    const int ks = warp % KS;  // K slice of this warp
    const int n0 = (blockIdx.x * (NW / KS) + warp / KS) * kRowsPerWarp;
    const int kbeg = ks * (K / KS), kend = kbeg + K / KS;
    const int64_t rb = K / 2, sb = K / 32;
    // Row pointers of the two A tiles (rows g and g+8 of each).
    const uint8_t* wp[2][2];
    const uint8_t* sp[2][2];
#pragma unroll
    for (int tile = 0; tile < 2; ++tile)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint8_t* W = GATEUP ? (tile == 0 ? a.w1 : a.w3) : a.w1;
            const uint8_t* S = GATEUP ? (tile == 0 ? a.w1_scale : a.w3_scale) : a.w1_scale;
            const int row = n0 + (GATEUP ? 0 : 16 * tile) + g + 8 * h;
            wp[tile][h] = W + (int64_t(e) * N + row) * rb + 16 * t;
            sp[tile][h] = S + (int64_t(e) * N + row) * sb + t;
        }
    // Weight loads of one U-block group (issued one group ahead of its use).
    auto load_group = [&](int kb, uint4(&raw)[U][2][2], uint32_t(&scb)[U][2][2]) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int tile = 0; tile < 2; ++tile)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int k = kb + 128 * u;
                    raw[u][tile][h] = make_uint4(0, 0, 0, 0);
                    scb[u][tile][h] = 0;
                    if (k < kend) {
                        raw[u][tile][h] = __ldg(reinterpret_cast<const uint4*>(wp[tile][h] + k / 2));
                        scb[u][tile][h] = __ldg(sp[tile][h] + k / 32);
                    }
                }
    };

    for (int t0 = 0; t0 < count; t0 += MT) {
        uint4 raw[U][2][2];
        uint32_t scb[U][2][2];
        load_group(kbeg, raw, scb);            // in flight while x is staged
        const int live = min(MT, count - t0);  // token rows of this chunk
        __syncthreads();
        for (int i = tid; i < (kLiveRows ? live : MT) * (K / 8); i += NW * 32) {
            const int m = i / (K / 8), c = i % (K / 8);
            uint4 v = make_uint4(0, 0, 0, 0);
            if (t0 + m < count) {
                const int p = off + t0 + m;
                const int64_t src = GATEUP ? a.perm_token[p] : p;
                v = dev::load_x8_bf16(a.x, GATEUP && a.x_f32, src * K + c * 8);
            }
            *reinterpret_cast<uint4*>(xs + m * XS + c * 8) = v;
        }
        __syncthreads();
        if constexpr (DQ >= 3) {
            // Re-pair the staged rows in place: 8 values (k 0..7) -> words (0,4) (1,5) (2,6) (3,7),
            // the order dequant16_bits produces, so the inner loop reads B fragments as they are.
            for (int i = tid; i < live * (K / 8); i += NW * 32) {
                uint4* px = reinterpret_cast<uint4*>(xs + (i / (K / 8)) * XS + (i % (K / 8)) * 8);
                const uint4 v = *px;
                *px = make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632),
                                 __byte_perm(v.y, v.w, 0x5410), __byte_perm(v.y, v.w, 0x7632));
            }
            __syncthreads();
        }

        float acc[2][NTT][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < NTT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

        for (int kb = kbeg; kb < kend; kb += 128 * U) {
            uint4 cur[U][2][2];
            uint32_t csc[U][2][2];
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int tile = 0; tile < 2; ++tile)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        cur[u][tile][h] = raw[u][tile][h];
                        csc[u][tile][h] = scb[u][tile][h];
                    }
            if (kb + 128 * U < kend) load_group(kb + 128 * U, raw, scb);  // next group in flight
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = kb + 128 * u;
                if (k >= kend) break;
                uint32_t xb[NTT][16];
#pragma unroll
                for (int j = 0; j < NTT; ++j) {
                    const uint4* xp = reinterpret_cast<const uint4*>(xs + (j * 8 + g) * XS + k + 32 * t);
                    // Dead rows (kLiveRows: not staged) read as zeros without touching shared memory.
                    const bool row_live = !kLiveRows || j * 8 + g < live;
                    const uint4 zero = make_uint4(0, 0, 0, 0);
                    if constexpr (DQ == 0 || DQ >= 3) {
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            const uint4 v = row_live ? xp[q] : zero;
                            xb[j][4 * q] = v.x;
                            xb[j][4 * q + 1] = v.y;
                            xb[j][4 * q + 2] = v.z;
                            xb[j][4 * q + 3] = v.w;
                        }
                    } else {
                        // Lanes t = 2, 3 read their chunks in the order 2, 3, 0, 1 (bank spread);
                        // DQ = 2 keeps the natural order (2-way conflicts), for A/B only.
                        const int sw = DQ == 1 ? (t & 2) : 0;
                        uint4 v[4];
#pragma unroll
                        for (int q = 0; q < 4; ++q) v[q] = row_live ? xp[q ^ sw] : zero;
#pragma unroll
                        for (int c = 0; c < 4; ++c) {
                            const uint4 ch = sw ? v[c ^ 2] : v[c];  // physical chunk c
                            xb[j][4 * c] = __byte_perm(ch.x, ch.z, 0x5410);
                            xb[j][4 * c + 1] = __byte_perm(ch.x, ch.z, 0x7632);
                            xb[j][4 * c + 2] = __byte_perm(ch.y, ch.w, 0x5410);
                            xb[j][4 * c + 3] = __byte_perm(ch.y, ch.w, 0x7632);
                        }
                    }
                }
#pragma unroll
                for (int tile = 0; tile < 2; ++tile) {
                    uint32_t d0[16], d1[16];
                    if constexpr (DQ == 0) {
                        dequant16(cur[u][tile][0], dev::ue8m0(csc[u][tile][0]) * dev::kE2m1Fix, d0);
                        dequant16(cur[u][tile][1], dev::ue8m0(csc[u][tile][1]) * dev::kE2m1Fix, d1);
                    } else if constexpr (DQ == 4) {
                        dequant16_pk(cur[u][tile][0], csc[u][tile][0], d0);
                        dequant16_pk(cur[u][tile][1], csc[u][tile][1], d1);
                    } else {
                        dequant16_bits(cur[u][tile][0], csc[u][tile][0], d0);
                        dequant16_bits(cur[u][tile][1], csc[u][tile][1], d1);
                    }
#pragma unroll
                    for (int s = 0; s < 8; ++s) {
                        const uint32_t af[4] = {d0[2 * s], d1[2 * s], d0[2 * s + 1], d1[2 * s + 1]};
#pragma unroll
                        for (int j = 0; j < NTT; ++j)
                            dev::mma_bf16_16816(acc[tile][j], af, xb[j][2 * s], xb[j][2 * s + 1]);
                    }
                }
            }
        }
        if constexpr (KS > 1) {
            // Split-K reduction: slices 1..KS-1 park their accumulators after the staged x; the
            // slice-0 warp (warp - ks) adds them in slice order and alone runs the epilogue.
            float* red = reinterpret_cast<float*>(smem + size_t(MT) * XS * 2);
            constexpr int kAcc = 2 * NTT * 4;
            if (ks > 0) {
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int j = 0; j < NTT; ++j)
#pragma unroll
                        for (int q = 0; q < 4; ++q)
                            red[(warp * kAcc + (i * NTT + j) * 4 + q) * 32 + lane] = acc[i][j][q];
            }
            __syncthreads();
            if (ks > 0) continue;  // the next chunk's barrier orders these reads before new writes
#pragma unroll 1
            for (int s = 1; s < KS; ++s)
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int j = 0; j < NTT; ++j)
#pragma unroll
                        for (int q = 0; q < 4; ++q)
                            acc[i][j][q] += red[((warp + s) * kAcc + (i * NTT + j) * 4 + q) * 32 + lane];
        }
        // Epilogue: acc[.][j][0,1] = (row g, tokens 2t, 2t+1), [2,3] = (row g+8, same tokens).
#pragma unroll
        for (int j = 0; j < NTT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int tok = t0 + j * 8 + 2 * t + (i & 1);
                if (tok >= count) continue;
                const int p = off + tok;
                const int r = g + 8 * (i >> 1);
                if constexpr (GATEUP) {
                    float gt = acc[0][j][i], up = acc[1][j][i];
                    if (a.swiglu_limit > 0.0f) {
                        gt = fminf(gt, a.swiglu_limit);
                        up = fminf(fmaxf(up, -a.swiglu_limit), a.swiglu_limit);
                    }
                    const float hv = gt / (1.0f + expf(-gt)) * up * a.perm_w[p];
                    static_cast<__nv_bfloat16*>(a.out)[int64_t(p) * N + n0 + r] = __float2bfloat16_rn(hv);
                } else {
                    float* y = static_cast<float*>(a.out) + int64_t(a.perm_dst[p]) * N + n0 + r;
                    y[0] = acc[0][j][i];
                    y[16] = acc[1][j][i];
                }
            }
    }
}

}  // namespace dsv4::cuda::moe_mma
