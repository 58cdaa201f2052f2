// K-chunked tensor-core skinny GEMM, third form (`dense_gemm_kc3`): the tiling, fp8 dequant,
// mma sequence, split-K cluster reduction and results contract of dense_gemm_kc.cuh (read that
// header first), with weights AND x streamed through an ST-deep cp.async ring in shared memory.
//
// Why (docs/perf/ledger.md E18): ncu on dense_gemm_kc showed a latency-bound kernel (issue
//   48%, L1 41-57%, L2 30%, DRAM 6-15%, 1.15 eligible warps per scheduler) and dense_gemm_kc2,
//   which cut the instructions by 26%, ran no faster (issue 36%): each CTA has one 128-k block
//   of weights (registers) and x (cp.async) in flight while it multiplies the previous one, so a
//   block costs about one L2/HBM round trip, and at 4 CTAs of 4 warps per SM that is ~96 KB in
//   flight per SM, two thirds of it x. Here ST-1 blocks of weights and x are in flight per CTA
//   and the weight registers of the prefetch are freed.
// Shared memory, per stage: x [MT][128] as given (f32 or bf16, the swizzles of dense_gemm_kc)
//   then weights [R][128 k] (fp8: 128 B rows, unit u at u ^ (row & 1); bf16: 256 B rows, the
//   bf16 x swizzle) so that the A-fragment loads (lane t reads 16-byte unit 2t+q / 4t+q of rows
//   g, g+8) are bank-conflict free. The UE8M0 scales of the CTA's K range are staged once.
// One __syncthreads per block: wait for block kb, barrier, refill the slot of block kb-1 with
//   block kb+ST-1, multiply block kb.
// Measured (docs/perf/ledger.md E18, f32 x): ST = 3 (74 KB, 3 CTAs per SM) 5-16% faster than
//   dense_gemm_kc at T <= 64 (wo_b T = 64 55.2 vs 62.0 us) and on wq_b at every T; ST = 4 (2 CTAs
//   per SM) slower everywhere: the warps that hide the dequant chains matter more than depth.
#pragma once

#include <cooperative_groups.h>

#include "kernels/cuda/gemm/dense_gemm_kc.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::gemm_kc3 {

template <bool FP8, bool XF32, int NW, int MTL, int NTT, int ST>
struct Layout {
    static constexpr int MT = 8 * NTT;
    static constexpr int R = NW * 16 * MTL;
    static constexpr int XB = MT * 128 * (XF32 ? 4 : 2);  // x bytes per stage
    static constexpr int RB = FP8 ? 128 : 256;            // weight bytes per row per stage
    static constexpr int STAGE = XB + R * RB;
    static constexpr int SCALES = 256;  // UE8M0 bytes of the K range (K <= 32768)
    static constexpr int PART = R * (MT + 8) * 4;
    static constexpr int bytes() { return ST * STAGE + SCALES > PART ? ST * STAGE + SCALES : PART; }
};

__device__ __forceinline__ int wswz(bool fp8, int u, int r) { return fp8 ? (u ^ (r & 1)) : gemm_kc::swz<false>(u, r); }

template <bool FP8, bool XF32, int NW, int MTL, int NTT, int ST>
__global__ void __launch_bounds__(NW * 32) dense_gemm_kc3_kernel(DenseGemvArgs a) {
    dev::pdl_begin();
    using L = Layout<FP8, XF32, NW, MTL, NTT, ST>;
    constexpr int MT = L::MT, R = L::R, RB = L::RB, STAGE = L::STAGE, XB = L::XB;
    constexpr int NT32 = NW * 32;
    constexpr int UPR = XF32 ? 32 : 16;   // 16-byte x units per token row per block
    constexpr int UW = RB / 16;           // 16-byte weight units per row per block
    constexpr int NXU = MT * UPR / NT32;  // x units per thread per block
    constexpr int NWU = R * UW / NT32;    // weight units per thread per block
    constexpr int QN = FP8 ? 2 : 4;
    constexpr int SPQ = FP8 ? 4 : 2;
    static_assert(MT * UPR % NT32 == 0 && R * UW % NT32 == 0, "stage units must split evenly");
    static_assert((NT32 / UPR) % 2 == 0 && (NT32 / UW) % 2 == 0, "swizzle parity must be per-thread constant");
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = a.K, T = a.n_tokens;
    const int cta_row = blockIdx.x * R;
    const int grp = cta_row / a.N;
    const int64_t xstride = a.x_stride ? a.x_stride : int64_t(a.groups) * K;
    const int64_t xbase = int64_t(grp) * K;
    const int nkb = K / 128, S = gridDim.z, z = blockIdx.z;
    const int kb0 = nkb * z / S, kb1 = nkb * (z + 1) / S;
    const int64_t row_bytes = int64_t(K) * (FP8 ? 1 : 2);
    unsigned char* scales = smem + ST * STAGE;  // UE8M0 bytes of blocks kb0.. (fp8)

    // Weight slots of this thread: unit tid % UW of rows tid / UW + n * (NT32 / UW).
    const int wr0 = tid / UW, wu = tid % UW;
    const unsigned char* wsrc0 = static_cast<const unsigned char*>(a.w) + int64_t(cta_row + wr0) * row_bytes + wu * 16;
    const int64_t wstep = int64_t(NT32 / UW) * row_bytes;
    const int wdst0 = XB + wr0 * RB + wswz(FP8, wu, wr0) * 16;
    // A-fragment offsets within a stage's weights: row g of the warp's first tile, unit 2t+q / 4t+q.
    int woff[QN];
#pragma unroll
    for (int q = 0; q < QN; ++q) woff[q] = XB + (warp * 16 * MTL + g) * RB + wswz(FP8, (FP8 ? 2 : 4) * t + q, g) * 16;
    // B-fragment offsets within a stage's x: row g of token tile 0.
    constexpr int XO = XF32 ? SPQ : SPQ / 2;
    int xoff[QN][XO];
#pragma unroll
    for (int q = 0; q < QN; ++q)
#pragma unroll
        for (int s = 0; s < XO; ++s)
            xoff[q][s] = g * UPR * 16 + (XF32 ? gemm_kc::swz<true>(8 * t + SPQ * q + s, g)
                                              : gemm_kc::swz<false>(4 * t + (SPQ / 2) * q + s, g)) *
                                            16;
    const unsigned char* xg = static_cast<const unsigned char*>(a.x);

    for (int t0 = blockIdx.y * MT; t0 < T; t0 += gridDim.y * MT) {
        const int tn = min(MT, T - t0), ntn = (tn + 7) / 8, rows_used = 8 * ntn;
        // x slots: unit tid % UPR of rows tid / UPR + n * (NT32 / UPR).
        const int xr0 = tid / UPR, xu = tid % UPR;
        const unsigned char* xsrc0 = xg + (xbase + int64_t(t0 + xr0) * xstride) * (XF32 ? 4 : 2) + xu * 16;
        const unsigned char* xsrcz = xg + (xbase + int64_t(t0) * xstride) * (XF32 ? 4 : 2) + xu * 16;
        const int64_t xstep = int64_t(NT32 / UPR) * xstride * (XF32 ? 4 : 2);
        const int xdst0 = xr0 * UPR * 16 + gemm_kc::swz<XF32>(xu, xr0) * 16;

        auto issue = [&](int kb, int slot) {
            unsigned char* st = smem + slot * STAGE;
            const int kx = (kb)*128 * (XF32 ? 4 : 2);
#pragma unroll
            for (int n = 0; n < NXU; ++n) {
                const int m = xr0 + n * (NT32 / UPR);
                if (m < rows_used) {
                    const bool ok = t0 + m < T;
                    dev::cp_async16(st + xdst0 + n * (NT32 / UPR) * UPR * 16, (ok ? xsrc0 + n * xstep : xsrcz) + kx,
                                    ok ? 16 : 0);
                }
            }
            const int64_t kw = int64_t(kb) * 128 * (FP8 ? 1 : 2);
#pragma unroll
            for (int n = 0; n < NWU; ++n)
                dev::cp_async16(st + wdst0 + n * (NT32 / UW) * RB, wsrc0 + n * wstep + kw, 16);
        };

        float acc[MTL][NTT][4];
#pragma unroll
        for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
            for (int j = 0; j < NTT; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;

        __syncthreads();  // the previous chunk's readers of shared memory are done
        if constexpr (FP8) {
            const uint8_t* srow = a.w_scale + int64_t(cta_row / 128) * nkb;  // all R <= 128 rows share one scale row
            for (int i = tid; i < kb1 - kb0; i += NT32) scales[i] = __ldg(srow + kb0 + i);
        }
#pragma unroll
        for (int s = 0; s < ST - 1; ++s) {
            if (kb0 + s < kb1) issue(kb0 + s, s);
            dev::cp_async_commit();
        }
        for (int kb = kb0; kb < kb1; ++kb) {
            const int slot = (kb - kb0) % ST;
            dev::cp_async_wait<ST - 2>();
            __syncthreads();  // block kb visible to all; everyone is done with the slot of block kb-1
            if (kb + ST - 1 < kb1) issue(kb + ST - 1, (kb - kb0 + ST - 1) % ST);
            dev::cp_async_commit();
            const unsigned char* st = smem + slot * STAGE;
            const float sc = FP8 ? dev::ue8m0(scales[kb - kb0]) : 1.0f;
#pragma unroll
            for (int q = 0; q < QN; ++q) {
                uint32_t d[MTL][2][2 * SPQ];
#pragma unroll
                for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const uint4 r = *reinterpret_cast<const uint4*>(st + woff[q] + (16 * mt + 8 * h) * RB);
                        gemm_kc::a_words<FP8>(r, sc, d[mt][h]);
                    }
#pragma unroll
                for (int j = 0; j < NTT; ++j) {
                    if (j >= ntn) break;  // warp-uniform: token tiles past T
                    const unsigned char* xr = st + j * 8 * UPR * 16;
                    uint32_t b[2 * SPQ];
                    if constexpr (XF32) {
#pragma unroll
                        for (int s = 0; s < SPQ; ++s) {
                            const float4 f = *reinterpret_cast<const float4*>(xr + xoff[q][s]);
                            b[2 * s] = dev::pack_bf16x2(f.x, f.y);
                            b[2 * s + 1] = dev::pack_bf16x2(f.z, f.w);
                        }
                    } else {
#pragma unroll
                        for (int i = 0; i < SPQ / 2; ++i) {
                            const uint4 v = *reinterpret_cast<const uint4*>(xr + xoff[q][i]);
                            gemm_kc::put_words(b, 4 * i, v);
                        }
                    }
                    gemm_kc::mma_steps<SPQ>(acc, j, d, b);
                }
            }
        }
        dev::cp_async_wait<0>();  // nothing in flight into the buffers reused below

        gemm_kc::store_tile<NW, MTL, NTT>(a, acc, smem, S, t0, tn, cta_row);
    }
}

}  // namespace dsv4::cuda::gemm_kc3
