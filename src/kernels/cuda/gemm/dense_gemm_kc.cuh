// K-chunked tensor-core skinny GEMM for the decode step's dense matrices (y = x W^T, see
// dense_gemv_args.h): one CTA owns a row tile and ALL tokens of the step up to MT = 8*NTT, so
// each weight element is loaded from HBM and dequantised once per step (the older
// dense_gemv_mma kernel staged x for the whole K and re-read the weights once per 8-16 tokens).
//
// Thread roles: NW warps; warp w owns 16*MTL rows (MTL m16 tiles). Per 128-k block lane
//   (g = lane/4, t = lane%4) loads physical k [32t, 32t+32) of its rows g, g+8 (+16, +24) with
//   16-byte loads (fp8: 2, bf16: 4 per row), dequantises to bf16 (fp8 x UE8M0 is exact in bf16)
//   and uses physical k 32t+4s+{0,1} / +{2,3} as logical {2t,2t+1} / {2t+8,2t+9} of mma step s
//   (mma.sync m16n8k16, weights = A, x = B); the B fragments are read from shared memory with
//   the same relabelling, so no shuffles are needed.
// Pipeline: x is staged one 128-k block at a time (MT token rows, f32 or bf16 as given) with
//   cp.async into a double buffer; block kb+1 (x by cp.async, weights into registers) is in
//   flight while block kb is multiplied; one __syncthreads per block.
// Shared memory: 2 stages of [MT][128] x elements, 16-byte units XOR-swizzled per row so the
//   B-fragment loads (lane t reads 64 or 128 contiguous bytes of token row g) are bank-conflict
//   free; reused after the main loop for the split-K partials [16*NW*MTL][MT+8] f32.
// Split-K: gridDim.z = S ranks of a thread-block cluster (1,1,S) each reduce a contiguous range
//   of 128-k blocks; partials meet in distributed shared memory and rank r sums rows
//   [r*R/S, (r+1)*R/S) over ranks 0..S-1 in order. No workspace, no atomics: deterministic, and
//   S depends only on the shape (dense_gemm_kc_split), so results do not depend on the batch.
// Bound: meant to be HBM-bound (2*T FLOP per weight element, T <= MT). Last measured
//   (docs/perf/ledger.md E10, f32 x, 4 warps x 16 rows, 32 tokens per pass): wo_b fp8
//   T = 8 24.1 us (36% of copy), T = 64 62.1 us (15%), so not HBM-bound above T ~ 8. Profiled
//   (ncu, docs/perf/ledger.md E18): latency-bound, no unit near its limit (wo_b T = 64: issue
//   48%, L1 51%, L2 30%, DRAM 13%, 1.15 eligible of 3.6 active warps per scheduler, 878 warp
//   instructions per warp and 128-k block for 32 HMMA). dense_gemm_kc2.cuh (bf16 x staging,
//   -26% instructions, no faster) and dense_gemm_kc3.cuh (cp.async ring, 5-14% faster at
//   T <= 64) are the follow-ups.
#pragma once

#include <cooperative_groups.h>

#include "kernels/cuda/gemm/dense_gemv_args.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::gemm_kc {

// Bytes of dynamic shared memory: the x double buffer, or the split-K partials if larger.
template <bool XF32, int NW, int MTL, int NTT>
constexpr int smem_bytes() {
    constexpr int stage = 8 * NTT * 128 * (XF32 ? 4 : 2);
    constexpr int part = 16 * NW * MTL * (8 * NTT + 8) * 4;
    return 2 * stage > part ? 2 * stage : part;
}

// Swizzled position of 16-byte unit u of x row m within one 128-k block. bf16 rows hold 16
// units; lane t reads units 4t..4t+3, so units 8 apart and adjacent rows collide unless
// flipped. f32 rows hold 32 units; lane t reads 8t..8t+7 (all in the same bank group).
template <bool XF32>
__device__ __forceinline__ int swz(int u, int m) {
    if constexpr (XF32)
        return u ^ ((u >> 3) & 3) ^ ((m & 1) << 2);
    else
        return u ^ (((u >> 3) & 1) << 1) ^ (m & 1);
}

// The mma.sync A words of 16 bytes of one weight row (a thread's part of two k16 steps): fp8 e4m3
// bytes dequantised and scaled by the block's factor sc into 8 bf16x2 words (byte pairs in order),
// bf16 weights (sc unused) taken as the 4 words they are. Shared by dense_gemm_kc, kc2 and kc3.
template <bool FP8, int N>
__device__ __forceinline__ void a_words(const uint4 r, float sc, uint32_t (&d)[N]) {
    static_assert(N >= (FP8 ? 8 : 4), "8 words from fp8 bytes, 4 from bf16");
    const uint32_t w4[4] = {r.x, r.y, r.z, r.w};
    if constexpr (FP8) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 lo = dev::fp8x2_to_float2(uint16_t(w4[j] & 0xffff));
            const float2 hi = dev::fp8x2_to_float2(uint16_t(w4[j] >> 16));
            d[2 * j] = dev::pack_bf16x2(lo.x * sc, lo.y * sc);
            d[2 * j + 1] = dev::pack_bf16x2(hi.x * sc, hi.y * sc);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) d[j] = w4[j];
    }
}

// This lane's first byte in each of its warp's 2 x MTL weight rows (row n0 + 16 mt + 8 h + g, lane t's
// 32 fp8 or 64 bf16 bytes of every 128-k block). Shared by dense_gemm_kc and kc2.
template <bool FP8, int MTL>
__device__ __forceinline__ void lane_weight_rows(const DenseGemvArgs& a, int n0, int g, int t, int64_t row_bytes,
                                                 const unsigned char* (&wrow)[MTL][2]) {
#pragma unroll
    for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            wrow[mt][h] = static_cast<const unsigned char*>(a.w) + int64_t(n0 + 16 * mt + 8 * h + g) * row_bytes +
                          (FP8 ? 32 : 64) * t;
}
// 128-k block kb of a warp's weight rows into registers: raw[mt][h][q] = 16 bytes q of row (mt, h)
// (wrow: the rows' first bytes for this lane), sc = the block's UE8M0 factor from srow (fp8; 1 for
// bf16). Shared by dense_gemm_kc and kc2.
template <bool FP8, int MTL, int QN>
__device__ __forceinline__ void load_w_block(const unsigned char* const (&wrow)[MTL][2], const uint8_t* srow, int kb,
                                             uint4 (&raw)[MTL][2][QN], float& sc) {
#pragma unroll
    for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int q = 0; q < QN; ++q)
                raw[mt][h][q] =
                    __ldg(reinterpret_cast<const uint4*>(wrow[mt][h] + int64_t(kb) * 128 * (FP8 ? 1 : 2)) + q);
    sc = 1.0f;
    if constexpr (FP8) sc = dev::ue8m0(__ldg(srow + kb));
}
// b[at .. at + 3] = the four words of v (a 16-byte x unit as B words).
template <int N>
__device__ __forceinline__ void put_words(uint32_t (&b)[N], int at, const uint4 v) {
    b[at] = v.x;
    b[at + 1] = v.y;
    b[at + 2] = v.z;
    b[at + 3] = v.w;
}
// The SPQ k16 steps of one q group for token tile j: acc[mt][j] += A(mt) B over steps s, where A's
// four words for step s are rows g / g + 8 (h = 0 / 1) at k 2t.. and 2t + 8.. (d[mt][h][2s], [2s + 1],
// as a_words builds them) and b[2s], b[2s + 1] are B's two words.
template <int SPQ, int MTL, int NTT, int ND>
__device__ __forceinline__ void mma_steps(float (&acc)[MTL][NTT][4], int j, const uint32_t (&d)[MTL][2][ND],
                                          const uint32_t (&b)[2 * SPQ]) {
#pragma unroll
    for (int s = 0; s < SPQ; ++s)
#pragma unroll
        for (int mt = 0; mt < MTL; ++mt) {
            const uint32_t af[4] = {d[mt][0][2 * s], d[mt][1][2 * s], d[mt][0][2 * s + 1], d[mt][1][2 * s + 1]};
            dev::mma_bf16_16816(acc[mt][j], af, b[2 * s], b[2 * s + 1]);
        }
}

// The tile's results to a.y (y [n_tokens][groups * N], f32 or bf16 as a.out_f32 says), called by every
// thread of the CTA after its K range: acc holds warp w's MTL x NTT mma.m16n8k16 C fragments, element
// i of acc[mt][j] being row cta_row + 16 (w MTL + mt) + g + 8 (i / 2) and token t0 + 8 j + 2 t + i % 2
// (g = lane / 4, t = lane % 4); tn = the tokens of this chunk. S = 1 (one CTA per tile): stored
// directly. S > 1 (split-K over a cluster of S CTAs): the partials go to this CTA's shared memory
// (smem, at least R x (MT + 8) f32, reused: every warp must be done with what the main loop staged
// there) and rank r sums rows [r R / S, (r + 1) R / S) over ranks 0..S-1 in that fixed order, so
// the result does not depend on timing. Shared by dense_gemm_kc, kc2 and kc3.
template <int NW, int MTL, int NTT>
__device__ __forceinline__ void store_tile(const DenseGemvArgs& a, const float (&acc)[MTL][NTT][4], unsigned char* smem,
                                           int S, int t0, int tn, int cta_row) {
    constexpr int MT = 8 * NTT, R = NW * 16 * MTL, PP = MT + 8;  // PP: conflict-free float2 stores
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int T = a.n_tokens, NT = a.groups * a.N, n0 = cta_row + warp * 16 * MTL;
    auto store = [&](int tok, int row, float v) {  // tok < T
        const int64_t o = int64_t(tok) * NT + row;
        if (a.out_f32)
            static_cast<float*>(a.y)[o] = v;
        else
            static_cast<__nv_bfloat16*>(a.y)[o] = __float2bfloat16_rn(v);
    };
    if (S == 1) {
#pragma unroll
        for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
            for (int j = 0; j < NTT; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int tok = t0 + 8 * j + 2 * t + (i & 1);
                    if (tok < T) store(tok, n0 + 16 * mt + g + 8 * (i >> 1), acc[mt][j][i]);
                }
        return;
    }
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    float* part = reinterpret_cast<float*>(smem);
    __syncthreads();  // all warps are done reading the stages
#pragma unroll
    for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
        for (int j = 0; j < NTT; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = warp * 16 * MTL + 16 * mt + g + 8 * h;
                *reinterpret_cast<float2*>(part + r * PP + 8 * j + 2 * t) =
                    make_float2(acc[mt][j][2 * h], acc[mt][j][2 * h + 1]);
            }
    cluster.sync();
    const int rank = int(cluster.block_rank());
    const int RS = R / S;
    for (int i = tid; i < RS * tn; i += NW * 32) {
        const int rr = rank * RS + i % RS, tok = i / RS;
        float v = 0.0f;
        for (int q = 0; q < S; ++q) v += cluster.map_shared_rank(part, q)[rr * PP + tok];  // fixed order
        store(t0 + tok, cta_row + rr, v);
    }
    cluster.sync();  // no CTA leaves (or restages) while others read its partials
}

template <bool FP8, bool XF32, int NW, int MTL, int NTT>
__global__ void __launch_bounds__(NW * 32) dense_gemm_kc_kernel(DenseGemvArgs a) {
    dev::pdl_begin();
    constexpr int MT = 8 * NTT;
    constexpr int R = NW * 16 * MTL;      // rows per CTA
    constexpr int UPR = XF32 ? 32 : 16;   // 16-byte x units per token row per 128-k block
    constexpr int STAGE = MT * UPR * 16;  // bytes per x stage
    constexpr int QN = FP8 ? 2 : 4;       // 16-byte weight loads per row per 128-k block
    constexpr int SPQ = FP8 ? 4 : 2;      // mma k-steps covered by one weight load
    // bf16 weights with 32 rows per warp would need 128 registers for two blocks of raw weights:
    // those load the current block only (other CTAs on the SM hide the latency).
    constexpr bool kPrefetch = FP8 || MTL == 1;
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = a.K, T = a.n_tokens;
    const int cta_row = blockIdx.x * R;
    const int grp = cta_row / a.N;
    const int n0 = cta_row + warp * 16 * MTL;
    const int64_t xstride = a.x_stride ? a.x_stride : int64_t(a.groups) * K;
    const int64_t xbase = int64_t(grp) * K;  // element offset of this CTA's group in a token row
    const int nkb = K / 128, S = gridDim.z, z = blockIdx.z;
    const int kb0 = nkb * z / S, kb1 = nkb * (z + 1) / S;
    const int64_t row_bytes = int64_t(K) * (FP8 ? 1 : 2);
    const unsigned char* wrow[MTL][2];
    lane_weight_rows<FP8>(a, n0, g, t, row_bytes, wrow);
    const uint8_t* srow = FP8 ? a.w_scale + int64_t(n0 / 128) * nkb : nullptr;  // a warp's rows share a scale row
    const unsigned char* xg = static_cast<const unsigned char*>(a.x);

    auto load_w = [&](int kb, uint4(&raw)[MTL][2][QN], float& sc) { load_w_block<FP8>(wrow, srow, kb, raw, sc); };
    // x rows [t0, t0+tpad) of 128-k block kb into stage buf; rows >= T are zero-filled.
    auto stage_x = [&](int kb, int buf, int t0, int tpad) {
        unsigned char* dst = smem + buf * STAGE;
        for (int i = tid; i < tpad * UPR; i += NW * 32) {
            const int m = i / UPR, u = i % UPR;
            const bool ok = t0 + m < T;
            const int64_t e = xbase + int64_t(ok ? t0 + m : t0) * xstride + int64_t(kb) * 128;
            dev::cp_async16(dst + (m * UPR + swz<XF32>(u, m)) * 16, xg + e * (XF32 ? 4 : 2) + u * 16, ok ? 16 : 0);
        }
    };

    for (int t0 = blockIdx.y * MT; t0 < T; t0 += gridDim.y * MT) {  // token chunks (T > MT) over blockIdx.y
        const int tn = min(MT, T - t0), ntn = (tn + 7) / 8;
        float acc[MTL][NTT][4];
#pragma unroll
        for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
            for (int j = 0; j < NTT; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;

        __syncthreads();  // the previous chunk's readers of shared memory are done
        stage_x(kb0, 0, t0, 8 * ntn);
        dev::cp_async_commit();
        uint4 wc[MTL][2][QN];
        float sc = 1.0f;
        if constexpr (kPrefetch) load_w(kb0, wc, sc);
        for (int kb = kb0; kb < kb1; ++kb) {
            const int buf = (kb - kb0) & 1;
            dev::cp_async_wait<0>();
            __syncthreads();  // stage buf visible; everyone is done with stage buf^1
            uint4 wn[MTL][2][QN];
            float scn = 1.0f;
            if (kb + 1 < kb1) {
                stage_x(kb + 1, buf ^ 1, t0, 8 * ntn);
                if constexpr (kPrefetch) load_w(kb + 1, wn, scn);
            }
            dev::cp_async_commit();
            if constexpr (!kPrefetch) load_w(kb, wc, sc);
            const unsigned char* xs = smem + buf * STAGE;
#pragma unroll
            for (int q = 0; q < QN; ++q) {
                // A words of mma steps SPQ*q .. SPQ*q+SPQ-1: [2s] rows g / g+8 logical k 2t.., [2s+1] k 2t+8..
                uint32_t d[MTL][2][2 * SPQ];
#pragma unroll
                for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
                    for (int h = 0; h < 2; ++h) a_words<FP8>(wc[mt][h][q], sc, d[mt][h]);
#pragma unroll
                for (int j = 0; j < NTT; ++j) {
                    if (j >= ntn) break;  // warp-uniform: token tiles past T
                    const int m = 8 * j + g;
                    const unsigned char* xr = xs + m * UPR * 16;
                    uint32_t b[2 * SPQ];
                    if constexpr (XF32) {
#pragma unroll
                        for (int s = 0; s < SPQ; ++s) {
                            const float4 f =
                                *reinterpret_cast<const float4*>(xr + swz<true>(8 * t + SPQ * q + s, m) * 16);
                            b[2 * s] = dev::pack_bf16x2(f.x, f.y);
                            b[2 * s + 1] = dev::pack_bf16x2(f.z, f.w);
                        }
                    } else {
#pragma unroll
                        for (int i = 0; i < SPQ / 2; ++i) {
                            const uint4 v =
                                *reinterpret_cast<const uint4*>(xr + swz<false>(4 * t + (SPQ / 2) * q + i, m) * 16);
                            put_words(b, 4 * i, v);
                        }
                    }
                    mma_steps<SPQ>(acc, j, d, b);
                }
            }
            if constexpr (kPrefetch) {
#pragma unroll
                for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int q = 0; q < QN; ++q) wc[mt][h][q] = wn[mt][h][q];
                sc = scn;
            }
        }

        store_tile<NW, MTL, NTT>(a, acc, smem, S, t0, tn, cta_row);
    }
}

}  // namespace dsv4::cuda::gemm_kc
