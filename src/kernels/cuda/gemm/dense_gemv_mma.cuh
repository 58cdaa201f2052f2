// Tensor-core (mma.sync m16n8k16 bf16) variant of the weight-streaming GEMV for token counts
// where the CUDA-core version is FMA-bound (n_tokens >= ~8).
//
// Thread roles: warp w owns one 16-row weight tile; the CTA walks all tokens in chunks of
//   8*NTT. Per 128-k block lane (g = lane/4, t = lane%4) loads physical k [32t, 32t+32) of rows
//   g and g+8 with 16-byte loads (fp8: 2, bf16: 4 per row), dequantises to bf16 (fp8 x UE8M0 is
//   exact in bf16) and uses physical k 32t+4s+{0,1} / +{2,3} as logical {2t,2t+1} / {2t+8,2t+9}
//   of mma step s; x B-fragments are read from shared memory with the same relabelling.
// Shared memory: x [8*NTT][K + 8] bf16 of the current token chunk.
// Bound: meant to be HBM-bound up to n_tokens ~ 100 (2n FLOP per fp8 weight byte); last
//   measured (ledger E5): wq_b fp8 batch 8 in 13.2 us = 66% of the copy bandwidth, batch 128
//   in 94 us (91 TFLOP/s, 12% of copy: the dequant + mma issue rate binds, not HBM).
#pragma once

#include "kernels/cuda/gemm/dense_gemv_args.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::gemv_mma {

template <bool FP8, int NW, int NTT, int U>
__global__ void __launch_bounds__(NW * 32) dense_gemv_mma_kernel(DenseGemvArgs a) {
    dev::pdl_begin();
    constexpr int MT = 8 * NTT;
    constexpr int kLoads = FP8 ? 2 : 4;  // 16-byte loads per row per 128-k block
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = a.K, T = a.n_tokens, NT = a.groups * a.N, XS = K + 8;
    const int cta_row = blockIdx.x * NW * 16;
    const int grp = cta_row / a.N;
    const int n0 = cta_row + warp * 16;
    const int64_t xstride = a.x_stride ? a.x_stride : int64_t(a.groups) * K;
    const int64_t xbase = int64_t(grp) * K;  // element offset of this CTA's group in a token row
    const int64_t row_bytes = int64_t(K) * (FP8 ? 1 : 2);
    const unsigned char* wrow[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
        wrow[h] = static_cast<const unsigned char*>(a.w) + int64_t(n0 + g + 8 * h) * row_bytes + (FP8 ? 32 : 64) * t;
    const uint8_t* srow = FP8 ? a.w_scale + int64_t(n0 / 128) * (K / 128) : nullptr;

    auto load_group = [&](int kb, uint4(&raw)[U][2][kLoads], float(&sc)[U]) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = kb + 128 * u;
            sc[u] = 1.0f;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int q = 0; q < kLoads; ++q) {
                    raw[u][h][q] = make_uint4(0, 0, 0, 0);
                    if (k < K)
                        raw[u][h][q] = __ldg(reinterpret_cast<const uint4*>(wrow[h] + int64_t(k) * (FP8 ? 1 : 2)) + q);
                }
            if constexpr (FP8)
                if (k < K) sc[u] = dev::ue8m0(__ldg(srow + k / 128));
        }
    };

    for (int t0 = blockIdx.y * MT; t0 < T; t0 += gridDim.y * MT) {  // token chunks over blockIdx.y
        uint4 nraw[U][2][kLoads];
        float nsc[U];
        load_group(0, nraw, nsc);  // in flight while x is staged
        __syncthreads();
        for (int i = tid; i < MT * (K / 8); i += NW * 32) {
            const int m = i / (K / 8), c = i % (K / 8);
            uint4 v = make_uint4(0, 0, 0, 0);
            if (t0 + m < T) v = dev::load_x8_bf16(a.x, a.x_f32, xbase + (t0 + m) * xstride + c * 8);
            *reinterpret_cast<uint4*>(xs + m * XS + c * 8) = v;
        }
        __syncthreads();
        float acc[NTT][4];
#pragma unroll
        for (int j = 0; j < NTT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

        for (int kb = 0; kb < K; kb += 128 * U) {
            uint4 raw[U][2][kLoads];
            float sc[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                sc[u] = nsc[u];
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int q = 0; q < kLoads; ++q) raw[u][h][q] = nraw[u][h][q];
            }
            if (kb + 128 * U < K) load_group(kb + 128 * U, nraw, nsc);  // next group in flight
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = kb + 128 * u;
                if (k >= K) break;
                // A: 16 bf16x2 words per row in physical k order.
                uint32_t d[2][16];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    if constexpr (FP8) {
#pragma unroll
                        for (int q = 0; q < 2; ++q) {
                            const uint32_t w4[4] = {raw[u][h][q].x, raw[u][h][q].y, raw[u][h][q].z, raw[u][h][q].w};
#pragma unroll
                            for (int j = 0; j < 4; ++j) {
                                const float2 lo = dev::fp8x2_to_float2(uint16_t(w4[j] & 0xffff));
                                const float2 hi = dev::fp8x2_to_float2(uint16_t(w4[j] >> 16));
                                d[h][8 * q + 2 * j] = dev::pack_bf16x2(lo.x * sc[u], lo.y * sc[u]);
                                d[h][8 * q + 2 * j + 1] = dev::pack_bf16x2(hi.x * sc[u], hi.y * sc[u]);
                            }
                        }
                    } else {
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            d[h][4 * q] = raw[u][h][q].x;
                            d[h][4 * q + 1] = raw[u][h][q].y;
                            d[h][4 * q + 2] = raw[u][h][q].z;
                            d[h][4 * q + 3] = raw[u][h][q].w;
                        }
                    }
                }
#pragma unroll
                for (int j = 0; j < NTT; ++j) {
                    const uint4* xp = reinterpret_cast<const uint4*>(xs + (j * 8 + g) * XS + k + 32 * t);
                    uint32_t xb[16];
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const uint4 v = xp[q];
                        xb[4 * q] = v.x;
                        xb[4 * q + 1] = v.y;
                        xb[4 * q + 2] = v.z;
                        xb[4 * q + 3] = v.w;
                    }
#pragma unroll
                    for (int s = 0; s < 8; ++s) {
                        const uint32_t af[4] = {d[0][2 * s], d[1][2 * s], d[0][2 * s + 1], d[1][2 * s + 1]};
                        dev::mma_bf16_16816(acc[j], af, xb[2 * s], xb[2 * s + 1]);
                    }
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NTT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int tok = t0 + j * 8 + 2 * t + (i & 1);
                if (tok >= T) continue;
                const int64_t o = int64_t(tok) * NT + n0 + g + 8 * (i >> 1);
                if (a.out_f32)
                    static_cast<float*>(a.y)[o] = acc[j][i];
                else
                    static_cast<__nv_bfloat16*>(a.y)[o] = __float2bfloat16_rn(acc[j][i]);
            }
    }
}

}  // namespace dsv4::cuda::gemv_mma
