// What the two wgmma grouped expert GEMMs share (moe_wgmma_sm90.cu: every thread loads and
// computes; moe_wgmma_ws_sm90.cu: a producer warpgroup loads, two consumer warpgroups compute):
// the pipeline slot layout, the weight rows of a CTA, the register-A dequantisation of one 64-k
// block, and the epilogues. Internal linkage; included by those translation units only.
//
// Rows: 128 weight rows per computing warpgroup (one or two per CTA), two m64 tiles each. kGateUp: m64
//   tile m of warpgroup c holds w1 (m = 0) or w3 (m = 1) rows of the same 64 h columns, so the
//   SwiGLU pair meets in registers; kDown: 128 consecutive output rows per warpgroup.
// Slot: the x tile (NT token rows x 64 k bf16, K-major, 128-byte swizzle, read by wgmma through a
//   descriptor) then the codes (64 k of e2m1 for each of the CTA's weight rows, 32 B per row).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "core/mxfp4_pair_rotated.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/wgmma.cuh"
#include "kernels/cuda/gemm/wgmma_rs_n.cuh"
#include "kernels/cuda/moe/moe_args.h"
#include "kernels/cuda/moe/moe_expert_mma.cuh"
#include "kernels/cuda/moe/moe_kperm.h"

namespace dsv4::cuda::sm90 {
namespace {

// Bytes of one pipeline slot for nt token rows and wg warpgroups of 128 weight rows, 1,024-byte
// aligned for the swizzled x tile.
constexpr int stage_bytes(int nt, int wg) { return (nt * 128 + 128 * wg * 32 + 1023) / 1024 * 1024; }
// Scale bytes per staged row: K / 32 plus 16 so that rows 1..7 apart fall in different banks.
__host__ __device__ constexpr int scale_stride(int K) { return K / 32 + 16; }

// Global row (in [n_experts * N)) of local weight row r of a CTA whose first column is c0, and the
// matrix it belongs to. kGateUp: 64-row tile m = r / 64 is w3 when odd; tiles 2j, 2j + 1 hold the
// same 64 h columns (c0 + 64 j ..); kDown: output row c0 + r.
template <bool GATEUP>
__device__ __forceinline__ int64_t weight_row(const MoeExpertArgs& a, int e, int c0, int r, const uint8_t*& W,
                                              const uint8_t*& Sc) {
    if constexpr (GATEUP) {
        const int m = r >> 6;
        W = (m & 1) ? a.w3 : a.w1;
        Sc = (m & 1) ? a.w3_scale : a.w1_scale;
        return int64_t(e) * a.N + c0 + (m >> 1) * 64 + (r & 63);
    } else {
        W = a.w1;
        Sc = a.w1_scale;
        return int64_t(e) * a.N + c0 + r;
    }
}

// Block kb's register-A fragments of the M m64 tiles first_tile .. first_tile + M - 1 of the CTA's
// weight rows (rows (first_tile + m) * 64 + 16 wq + g + 8 hh): A[m][s] is the operand of k16 step s
// for tile m. codes: the slot's code rows (32 B each); scales: the CTA's scale rows over all K
// (sstride bytes apart). Thread (wq, g, t) as in wgmma.cuh.
// Every shared-memory load is issued first, and the rare scale bytes above 128 (a factor that is
// not a finite bf16, scale_words) are handled behind one branch per block instead of one per row
// pair (ncu, session 17: four branch regions per block in the consumers' hot loop).
template <bool PK, int M>
__device__ __forceinline__ void dequant_tiles(const unsigned char* codes, const unsigned char* scales, int sstride,
                                              int kb, int first_tile, int wq, int g, int t, uint32_t (&A)[M][4][4]) {
    uint2 v[M][2];
    uint32_t sc[M][2];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int r = (first_tile + m) * 64 + wq * 16 + g + 8 * hh;
            v[m][hh] = *reinterpret_cast<const uint2*>(codes + r * 32 + 8 * t);
            sc[m][hh] = scales[r * sstride + kb * 2 + (t >> 1)];
        }
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            uint32_t w[8];
            uint32_t q0[4], q1[4];
            if constexpr (PK) {
                mxfp4_pk::pair_words(v[m][hh].x, q0);
                mxfp4_pk::pair_words(v[m][hh].y, q1);
            } else {
                mxfp4_pk::checkpoint_pair_words(v[m][hh].x, q0);
                mxfp4_pk::checkpoint_pair_words(v[m][hh].y, q1);
            }
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                w[q] = q0[q];
                w[4 + q] = q1[q];
            }
            moe_mma::scale_words_low<8>(sc[m][hh], w);
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                A[m][s][hh] = w[4 * (s >> 1) + 2 * (s & 1)];
                A[m][s][2 + hh] = w[4 * (s >> 1) + 2 * (s & 1) + 1];
            }
        }
    uint32_t top = max(sc[0][0], sc[0][1]);
#pragma unroll
    for (int m = 1; m < M; ++m) top = max(top, max(sc[m][0], sc[m][1]));
    if (top > 128u) {
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                if (sc[m][hh] <= 128u) continue;
                const __nv_bfloat162 f = moe_mma::scale_rest_factor(sc[m][hh]);
#pragma unroll
                for (int s = 0; s < 4; ++s)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        uint32_t& word = A[m][s][2 * j + hh];
                        __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&word), f);
                        word = *reinterpret_cast<uint32_t*>(&r);
                    }
            }
    }
}
// The two m64 tiles of consumer warpgroup c (tiles 2c and 2c + 1).
template <bool PK>
__device__ __forceinline__ void dequant_block(const unsigned char* codes, const unsigned char* scales, int sstride,
                                              int kb, int c, int wq, int g, int t, uint32_t (&A)[2][4][4]) {
    dequant_tiles<PK, 2>(codes, scales, sstride, kb, 2 * c, wq, g, t, A);
}

// Block kb's 4 k16 steps x 2 m64 tiles of wgmmas W tokens wide (none when W > NT: the switch below
// instantiates every width).
template <int W, int NT>
__device__ __forceinline__ void mma_block_w(float (&acc)[2][NT / 2], const uint32_t (&A)[2][4][4], uint64_t desc) {
    if constexpr (W <= NT) {
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int m = 0; m < 2; ++m) dev::WgmmaRs<W>::run(acc[m], A[m][s], desc + 2 * s);  // +32 B per k16
    }
}
// Block kb's 8 wgmmas on the x tile at shared address x_addr, committed as one group behind whatever
// this warpgroup has in flight. w: the token columns to compute (8 <= w <= NT, w % 8 == 0, uniform
// over the warpgroup; the balanced tiles' width), so a tile of w live rows costs w / NT of the full
// tile's tensor work; w == NT (every fixed-width caller) folds the switch away.
template <int NT>
__device__ __forceinline__ void mma_block(float (&acc)[2][NT / 2], const uint32_t (&A)[2][4][4], uint32_t x_addr,
                                          int w = NT) {
    const uint64_t desc = dev::wgmma_desc_k128(x_addr);
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < NT / 2; ++i) dev::wgmma_pin(acc[m][i]);
    dev::wgmma_fence();
    if (w == NT) {
        mma_block_w<NT, NT>(acc, A, desc);
    } else {
        switch (w >> 3) {
            // Macro-generated cases, which clang-format 14 does not format stably.
            // clang-format off
#define DSV4_WIDTH_CASE(W) \
    case W / 8: mma_block_w<W, NT>(acc, A, desc); break;
            DSV4_WIDTH_CASE(8) DSV4_WIDTH_CASE(16) DSV4_WIDTH_CASE(24) DSV4_WIDTH_CASE(32) DSV4_WIDTH_CASE(40)
            DSV4_WIDTH_CASE(48) DSV4_WIDTH_CASE(56) DSV4_WIDTH_CASE(64) DSV4_WIDTH_CASE(72) DSV4_WIDTH_CASE(80)
            DSV4_WIDTH_CASE(88) DSV4_WIDTH_CASE(96) DSV4_WIDTH_CASE(104) DSV4_WIDTH_CASE(112) DSV4_WIDTH_CASE(120)
#undef DSV4_WIDTH_CASE
            default: break;
            // clang-format on
        }
    }
    dev::wgmma_commit();
}

// Waits for every wgmma group of this warpgroup; the accumulators are final after it.
template <int NT>
__device__ __forceinline__ void mma_retire_all(float (&acc)[2][NT / 2]) {
    dev::wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < NT / 2; ++i) dev::wgmma_pin(acc[m][i]);
}

// kGateUp epilogue, part 1: h = SwiGLU(gate, up) x routing weight of the warpgroup's 64 columns into
// the shared tile hs [NT][hs_stride(WG)] (the CTA's WG * 64 columns in k-permuted order).
// Stored straight from the fragments, the k-permuted columns scatter 2-byte writes over a sector
// each (ncu: 8 of 32 bytes used), so h goes through shared memory. acc[m][4j + q] = (row wq*16 + g
// + 8 (q >> 1), token 8j + 2t + (q & 1)) of tile m.
constexpr int hs_stride(int wg) { return wg * 64 + 8; }  // +8: rows 16 B apart in the banks
// w: the tile's computed width (columns past it hold nothing). tile_w: when given, the routing
// weights of the tile's token rows in shared memory (tile_w[tok] = perm_w[p0 + min(tok, live - 1)]),
// read instead of perm_w (ncu, session 17: the dependent global loads of perm_w stalled each group
// of eight tokens).
template <int NT, int WG>
__device__ __forceinline__ void gateup_to_smem(const float (&acc)[2][NT / 2], const MoeExpertArgs& a, int p0, int live,
                                               int c, int wq, int g, int t, __nv_bfloat16* hs, int w = NT,
                                               const float* tile_w = nullptr) {
#pragma unroll
    for (int j = 0; j < NT / 8; ++j) {
        if (8 * j >= w) break;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int tok = 8 * j + 2 * t + (q & 1);
            const int p = p0 + min(tok, live - 1);
            const int rr = wq * 16 + g + 8 * (q >> 1);
            float gt = acc[0][4 * j + q], up = acc[1][4 * j + q];
            if (a.swiglu_limit > 0.0f) {
                gt = fminf(gt, a.swiglu_limit);
                up = fminf(fmaxf(up, -a.swiglu_limit), a.swiglu_limit);
            }
            // Fast exp and divide: the accurate forms cost ~25 instructions per element, about a
            // fifth of the consumers' instructions per tile at 96 columns, with nothing to overlap
            // them; the difference (a few ulp of f32) is far below h's bf16 rounding. For gt < -88
            // the divisor is inf and __fdividef gives 0, the limit of silu.
            const float hv = __fdividef(gt, 1.0f + __expf(-gt)) * up * (tile_w ? tile_w[tok] : a.perm_w[p]);
            hs[tok * hs_stride(WG) + c * 64 + moe_kperm::pos_of(rr)] = __float2bfloat16_rn(hv);
        }
    }
}
// Part 2 (after a barrier over the writers): the live rows of hs to h (permuted row p0 + tok,
// columns c0 ..), 16 bytes per thread and step; thread i0 of n.
template <int WG>
__device__ __forceinline__ void gateup_smem_to_global(const __nv_bfloat16* hs, const MoeExpertArgs& a, int p0, int live,
                                                      int c0, int i0, int n) {
    constexpr int U = WG * 64 / 8;  // 16-byte units per h row
    for (int i = i0; i < live * U; i += n) {
        const int tok = i / U, u = i % U;
        *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.out) + int64_t(p0 + tok) * a.N + c0 + u * 8) =
            *reinterpret_cast<const uint4*>(hs + tok * hs_stride(WG) + u * 8);
    }
}
// kDown epilogue: y[perm_dst[p], c0 + 64 (first_tile + m) + row] of the M m64 tiles, live tokens only.
template <int NT, int M>
__device__ __forceinline__ void down_tiles_to_global(const float (&acc)[M][NT / 2], const MoeExpertArgs& a, int p0,
                                                     int live, int c0, int first_tile, int wq, int g, int t) {
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int tok = 8 * j + 2 * t + (q & 1);
            if (tok >= live) continue;
            const int rr = wq * 16 + g + 8 * (q >> 1);
            float* y = static_cast<float*>(a.out) + int64_t(a.perm_dst[p0 + tok]) * a.N + c0 + first_tile * 64 + rr;
#pragma unroll
            for (int m = 0; m < M; ++m) y[64 * m] = acc[m][4 * j + q];
        }
}
// The two m64 tiles of consumer warpgroup c: output rows c0 + 128 c ..
template <int NT>
__device__ __forceinline__ void down_to_global(const float (&acc)[2][NT / 2], const MoeExpertArgs& a, int p0, int live,
                                               int c0, int c, int wq, int g, int t) {
    down_tiles_to_global<NT, 2>(acc, a, p0, live, c0, 2 * c, wq, g, t);
}

}  // namespace
}  // namespace dsv4::cuda::sm90
