// K-chunked tensor-core skinny GEMM, second form (`dense_gemm_kc2`): the same tiling, weight
// path, split-K cluster reduction and results contract as dense_gemm_kc.cuh (read that header
// first), with the x side rebuilt after the ncu profile of docs/perf/ledger.md E18.
//
// Why: ncu on dense_gemm_kc (wo_b fp8, T = 64, f32 x, 4 warps x 16 rows, 32 tokens) found no
//   unit near its limit (issue 48%, ALU 41%, L1 41%, L2 30%, DRAM 13%) but 878 warp
//   instructions per warp and 128-k block for 32 HMMA: ~250 of them in the x staging loop
//   (64-bit address arithmetic and the swizzle recomputed per 16-byte cp.async), ~100 in the
//   f32 -> bf16 packing of the B fragments (each of the NW warps converts the whole x block
//   again) plus their shared-memory address arithmetic; with 4 warps per scheduler (127
//   registers, 4 CTAs per SM) and 1.15 eligible, the issue rate was 0.59 per cycle.
// Changes (the weight loads, the fp8 dequantisation and the mma sequence are unchanged):
//   - x is staged in shared memory as bf16 only. bf16 x: cp.async straight into the stage.
//     f32 x: cp.async into an f32 landing buffer one block ahead, then the CTA converts the
//     landing buffer into the bf16 stage once (one F2FP per 2 elements per CTA, not per warp),
//     at the cost of a second __syncthreads per block.
//   - Every thread stages fixed (row, 16-byte unit) slots, so its source pointer and swizzled
//     destination are computed once per token chunk and advance by a constant per block.
//   - The B-fragment shared-memory offsets (swizzle included) are computed once per thread.
// Shared memory: bf16 stages 2 x [MT][128] (+ f32 landing [MT][128] for f32 x); reused after
//   the main loop for the split-K partials [16*NW*MTL][MT+8] f32.
// Measured (docs/perf/ledger.md E18, f32 x): 26% fewer instructions than dense_gemm_kc but
//   the same time on wo_b (T = 64 61 vs 62 us: latency-bound, not issue-bound); wins on wq_b
//   at T <= 32 (22.8 vs 25.9 us at T = 32), chosen there by the heuristic.
#pragma once

#include <cooperative_groups.h>

#include "kernels/cuda/gemm/dense_gemm_kc.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::gemm_kc2 {

// Bytes of dynamic shared memory: bf16 double buffer (+ f32 landing), or the partials if larger.
template <bool XF32, int NW, int MTL, int NTT>
constexpr int smem_bytes() {
    constexpr int stages = 2 * 8 * NTT * 256 + (XF32 ? 8 * NTT * 512 : 0);
    constexpr int part = 16 * NW * MTL * (8 * NTT + 8) * 4;
    return stages > part ? stages : part;
}

// Swizzled position of 16-byte unit u (of 16) of bf16 x row m: lane t reads units 4t..4t+3 of
// rows g, g+8, ...; units 8 apart and adjacent rows would collide in the same banks.
__device__ __forceinline__ int swz(int u, int m) { return u ^ (((u >> 3) & 1) << 1) ^ (m & 1); }

template <bool FP8, bool XF32, int NW, int MTL, int NTT>
__global__ void __launch_bounds__(NW * 32) dense_gemm_kc2_kernel(DenseGemvArgs a) {
    dev::pdl_begin();
    constexpr int MT = 8 * NTT;
    constexpr int NT32 = NW * 32;
    constexpr int R = NW * 16 * MTL;    // rows per CTA
    constexpr int BSTAGE = MT * 256;    // bytes per bf16 stage
    constexpr int QN = FP8 ? 2 : 4;     // 16-byte weight loads per row per 128-k block
    constexpr int SPQ = FP8 ? 4 : 2;    // mma k-steps covered by one weight load
    constexpr int NB = MT * 16 / NT32;  // bf16 16-byte units per thread per block
    constexpr int NL = MT * 32 / NT32;  // f32 16-byte units per thread per block (landing)
    static_assert(MT * 16 % NT32 == 0, "bf16 stage units must split evenly over the threads");
    constexpr bool kPrefetch = FP8 || MTL == 1;
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = a.K, T = a.n_tokens;
    const int cta_row = blockIdx.x * R;
    const int grp = cta_row / a.N;
    const int n0 = cta_row + warp * 16 * MTL;
    const int64_t xstride = a.x_stride ? a.x_stride : int64_t(a.groups) * K;
    const int64_t xbase = int64_t(grp) * K;
    const int nkb = K / 128, S = gridDim.z, z = blockIdx.z;
    const int kb0 = nkb * z / S, kb1 = nkb * (z + 1) / S;
    const int64_t row_bytes = int64_t(K) * (FP8 ? 1 : 2);
    const unsigned char* wrow[MTL][2];
    gemm_kc::lane_weight_rows<FP8>(a, n0, g, t, row_bytes, wrow);
    const uint8_t* srow = FP8 ? a.w_scale + int64_t(n0 / 128) * nkb : nullptr;
    const unsigned char* xg = static_cast<const unsigned char*>(a.x);
    unsigned char* land = smem + 2 * BSTAGE;  // f32 landing buffer (XF32 only)

    auto load_w = [&](int kb, uint4(&raw)[MTL][2][QN], float& sc) {
        gemm_kc::load_w_block<FP8>(wrow, srow, kb, raw, sc);
    };

    // B-fragment offsets within a stage: row g of token tile 0, unit 4t + (SPQ/2) q + i.
    int xoff[QN][SPQ / 2];
#pragma unroll
    for (int q = 0; q < QN; ++q)
#pragma unroll
        for (int i = 0; i < SPQ / 2; ++i) xoff[q][i] = g * 256 + swz(4 * t + (SPQ / 2) * q + i, g) * 16;

    for (int t0 = blockIdx.y * MT; t0 < T; t0 += gridDim.y * MT) {
        const int tn = min(MT, T - t0), ntn = (tn + 7) / 8, rows_used = 8 * ntn;
        // Staging slots of this thread. bf16 stage / bf16 x: unit u = tid % 16 of rows
        // tid / 16 + n * (NT32 / 16). f32 landing: unit lane of rows warp + n * NW.
        const int sm_b = tid / 16, su_b = tid % 16;
        const int sm_l = warp, su_l = lane;
        const int m_first = XF32 ? sm_l : sm_b;
        const unsigned char* src0 =
            xg + (xbase + int64_t(t0 + m_first) * xstride) * (XF32 ? 4 : 2) + (XF32 ? su_l : su_b) * 16;
        const int64_t src_step = int64_t(XF32 ? NW : NT32 / 16) * xstride * (XF32 ? 4 : 2);
        const unsigned char* srcz = xg + (xbase + int64_t(t0) * xstride) * (XF32 ? 4 : 2) + (XF32 ? su_l : su_b) * 16;
        // Rows past T read row t0 (a valid address) with 0 bytes: zero fill.
        auto stage = [&](int kb, int buf) {
            if constexpr (XF32) {
#pragma unroll
                for (int n = 0; n < NL; ++n) {
                    const int m = sm_l + n * NW;
                    if (m < rows_used) {
                        const bool ok = t0 + m < T;
                        const unsigned char* src = (ok ? src0 + n * src_step : srcz) + kb * 512;
                        dev::cp_async16(land + m * 512 + su_l * 16, src, ok ? 16 : 0);
                    }
                }
            } else {
                unsigned char* dst = smem + buf * BSTAGE;
#pragma unroll
                for (int n = 0; n < NB; ++n) {
                    const int m = sm_b + n * (NT32 / 16);
                    if (m < rows_used) {
                        const bool ok = t0 + m < T;
                        const unsigned char* src = (ok ? src0 + n * src_step : srcz) + kb * 256;
                        dev::cp_async16(dst + m * 256 + swz(su_b, m) * 16, src, ok ? 16 : 0);
                    }
                }
            }
        };
        // f32 landing -> bf16 stage buf (XF32): thread converts bf16 units su_b of rows sm_b + n*(NT32/16).
        auto convert = [&](int buf) {
            unsigned char* dst = smem + buf * BSTAGE;
#pragma unroll
            for (int n = 0; n < NB; ++n) {
                const int m = sm_b + n * (NT32 / 16);
                if (m < rows_used) {
                    const float4 f0 = *reinterpret_cast<const float4*>(land + m * 512 + su_b * 32);
                    const float4 f1 = *reinterpret_cast<const float4*>(land + m * 512 + su_b * 32 + 16);
                    *reinterpret_cast<uint4*>(dst + m * 256 + swz(su_b, m) * 16) =
                        make_uint4(dev::pack_bf16x2(f0.x, f0.y), dev::pack_bf16x2(f0.z, f0.w),
                                   dev::pack_bf16x2(f1.x, f1.y), dev::pack_bf16x2(f1.z, f1.w));
                }
            }
        };

        float acc[MTL][NTT][4];
#pragma unroll
        for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
            for (int j = 0; j < NTT; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;

        __syncthreads();  // the previous chunk's readers of shared memory are done
        uint4 wc[MTL][2][QN];
        float sc = 1.0f;
        stage(kb0, 0);
        dev::cp_async_commit();
        if constexpr (kPrefetch) load_w(kb0, wc, sc);
        if constexpr (XF32) {
            dev::cp_async_wait<0>();
            __syncthreads();
            convert(0);
            __syncthreads();  // stage 0 visible, landing free
            if (kb0 + 1 < kb1) stage(kb0 + 1, 1);
            dev::cp_async_commit();
        }
        for (int kb = kb0; kb < kb1; ++kb) {
            const int buf = (kb - kb0) & 1;
            if constexpr (!XF32) {
                dev::cp_async_wait<0>();
                __syncthreads();  // stage buf visible; everyone is done with stage buf^1
                if (kb + 1 < kb1) stage(kb + 1, buf ^ 1);
                dev::cp_async_commit();
            }
            uint4 wn[MTL][2][QN];
            float scn = 1.0f;
            if constexpr (kPrefetch) {
                if (kb + 1 < kb1) load_w(kb + 1, wn, scn);
            } else {
                load_w(kb, wc, sc);
            }
            const unsigned char* xs = smem + buf * BSTAGE;
#pragma unroll
            for (int q = 0; q < QN; ++q) {
                uint32_t d[MTL][2][2 * SPQ];
#pragma unroll
                for (int mt = 0; mt < MTL; ++mt)
#pragma unroll
                    for (int h = 0; h < 2; ++h) gemm_kc::a_words<FP8>(wc[mt][h][q], sc, d[mt][h]);
#pragma unroll
                for (int j = 0; j < NTT; ++j) {
                    if (j >= ntn) break;  // warp-uniform: token tiles past T
                    uint32_t b[2 * SPQ];
#pragma unroll
                    for (int i = 0; i < SPQ / 2; ++i) {
                        const uint4 v = *reinterpret_cast<const uint4*>(xs + j * 8 * 256 + xoff[q][i]);
                        gemm_kc::put_words(b, 4 * i, v);
                    }
                    gemm_kc::mma_steps<SPQ>(acc, j, d, b);
                }
            }
            if constexpr (XF32) {
                if (kb + 1 < kb1) {
                    dev::cp_async_wait<0>();
                    __syncthreads();  // landing (block kb+1) visible; all warps are done with stage buf^1
                    convert(buf ^ 1);
                    __syncthreads();  // stage buf^1 visible, landing free
                    if (kb + 2 < kb1) stage(kb + 2, 0);
                    dev::cp_async_commit();
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

        gemm_kc::store_tile<NW, MTL, NTT>(a, acc, smem, S, t0, tn, cta_row);
    }
}

}  // namespace dsv4::cuda::gemm_kc2
