// Grouped MXFP4 expert GEMM for prefill-sized steps on sm90 (issue 22): the same contract as the
// tensor-core expert GEMV (moe_args.h, MoeExpertArgs kGateUp / kDown), for steps whose experts
// hold dozens to hundreds of rows each. The GEMV re-reads and re-dequantises every weight once per
// 8 rows; here a CTA owns a tile of MT rows of one expert and a slab of weight rows, and each
// dequantised weight fragment feeds MT / 8 tensor-core products.
//
// Work list: a one-CTA kernel turns expert_count into entries (expert, token tile) in expert order
//   (tile_list); the GEMM grid is (N / columns per CTA, max_tiles) and CTAs past *n_tiles exit, so
//   the launch needs no host sync.
// Thread roles: NW warps; warp w owns WT m16 tiles of weight rows (kGateUp: WT / 2 pairs of 16 w1
//   rows and the same 16 w3 rows, the SwiGLU pair of 16 h columns; kDown: 16 * WT output rows) and
//   all MT rows of the tile. Per 128-k block, lane (g = lane / 4, t = lane % 4) reads the codes of
//   physical k [32t, 32t + 32) of rows g and g + 8 of each tile from shared memory and dequantises
//   them in two halves of 16 k (code words 0-1, then 2-3) exactly as the GEMV's DQ = 2 / DQ = 4
//   forms do (checkpoint_pair_words / pair_words, then the UE8M0 scale by a bf16x2 multiply); the x
//   B fragments are the lane's own 16-byte units of token rows re-paired with byte_perm. Every
//   product therefore sees the same operands in the same k order as the GEMV: the outputs are
//   bitwise those of moe_expert_mma_kernel (tests/kernels/cuda_runner/cuda_fast_ops_test.cpp).
// Pipeline: STAGES-deep cp.async ring over 128-k blocks; one stage holds the CTA's codes
//   [R][64 B], scales [R][4 B] and x [MT][128] bf16 (gathered through perm_token for kGateUp,
//   16-byte units XOR-swizzled per row so the B-fragment loads are bank-conflict free).
// Bound: tensor-core issue and the dequant at 4K-token steps (2 x 3 x 4096 x 2048 FLOP per row and
//   layer); the weights stream from HBM about once per step while every expert's tiles run close
//   together (expert-major tile order). x must be bf16 (the caller rounds f32 x first).
#include <algorithm>

#include "core/mxfp4_pair_rotated.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/moe/moe_expert_mma.cuh"
#include "kernels/cuda/moe/moe_sm90.h"
#include "kernels/cuda/moe/moe_tile_list.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::sm90 {
namespace {

// 16-byte unit u (0..15) of x row m inside a 128-k block: lanes t read units 4t + c, so without
// the flips rows and units 8 apart share banks.
__device__ __forceinline__ int swz(int u, int m) { return u ^ (((u >> 3) & 1) << 1) ^ (m & 1); }

template <int NW, int WT, int MT>
struct Shape {
    static constexpr int R = NW * WT * 16;  // weight rows per CTA
    static constexpr int kCodes = R * 64;   // bytes per stage: 128 k of e2m1 per row
    static constexpr int kScales = R * 4;
    static constexpr int kX = MT * 256;
    static constexpr int kStage = kCodes + kScales + kX;
};

template <bool GATEUP, bool PK, int NW, int WT, int MT, int STAGES, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB) moe_grouped_kernel(MoeExpertArgs a) {
    dev::pdl_begin();
    static_assert(!GATEUP || WT % 2 == 0, "gate-up tiles come in w1 / w3 pairs");
    using S = Shape<NW, WT, MT>;
    constexpr int kThreads = NW * 32, NJ = MT / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    const int tile = blockIdx.y;
    if (tile >= *a.n_tiles) return;
    const auto [e, t0, live] = tile_entry(a, tile, MT);
    const int off = a.expert_offset[e];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int K = a.K, N = a.N, nkb = K / 128;
    const int c0 = blockIdx.x * (GATEUP ? S::R / 2 : S::R);  // first output column of the CTA
    const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);

    // Global row of local weight row r and its matrix (kGateUp: 16-row tiles alternate w1, w3).
    auto wrow = [&](int r, const uint8_t*& W, const uint8_t*& Sc) -> int64_t {
        if constexpr (GATEUP) {
            const bool up = (r >> 4) & 1;
            W = up ? a.w3 : a.w1;
            Sc = up ? a.w3_scale : a.w1_scale;
            return int64_t(e) * N + c0 + (r >> 5) * 16 + (r & 15);
        } else {
            W = a.w1;
            Sc = a.w1_scale;
            return int64_t(e) * N + c0 + r;
        }
    };
    auto issue = [&](int kb) {
        unsigned char* st = smem + (kb % STAGES) * S::kStage;
        for (int i = tid; i < S::R * 4; i += kThreads) {
            const int r = i >> 2, u = i & 3;
            const uint8_t *W, *Sc;
            const int64_t row = wrow(r, W, Sc);
            dev::cp_async16(st + r * 64 + u * 16, W + row * (K / 2) + kb * 64 + u * 16, 16);
        }
        for (int r = tid; r < S::R; r += kThreads) {
            const uint8_t *W, *Sc;
            const int64_t row = wrow(r, W, Sc);
            dev::cp_async4(st + S::kCodes + r * 4, Sc + row * (K / 32) + kb * 4);
        }
        for (int i = tid; i < MT * 16; i += kThreads) {
            const int m = i >> 4, u = i & 15;
            const int p = off + t0 + min(m, live - 1);  // dead rows repeat the last live one
            const int64_t src = GATEUP ? a.perm_token[p] : p;
            dev::cp_async16(st + S::kCodes + S::kScales + m * 256 + swz(u, m) * 16, x + src * K + kb * 128 + u * 8, 16);
        }
    };

    float acc[WT][NJ][4];
#pragma unroll
    for (int i = 0; i < WT; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nkb) issue(s);
        dev::cp_async_commit();
    }
    for (int kb = 0; kb < nkb; ++kb) {
        dev::cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kb visible to all; stage kb - 1 no longer read
        if (kb + STAGES - 1 < nkb) issue(kb + STAGES - 1);
        dev::cp_async_commit();
        const unsigned char* st = smem + (kb % STAGES) * S::kStage;
        const unsigned char* xs = st + S::kCodes + S::kScales;
        uint32_t keep[WT][2][2];  // code words 2, 3 of each row for the second half
        uint32_t sc[WT][2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            uint32_t A[WT][2][8];
#pragma unroll
            for (int ti = 0; ti < WT; ++ti)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int r = (warp * WT + ti) * 16 + g + 8 * hh;
                    uint32_t w0, w1;
                    if (half == 0) {
                        const uint4 v = *reinterpret_cast<const uint4*>(st + r * 64 + t * 16);
                        w0 = v.x;
                        w1 = v.y;
                        keep[ti][hh][0] = v.z;
                        keep[ti][hh][1] = v.w;
                        sc[ti][hh] = st[S::kCodes + r * 4 + t];
                    } else {
                        w0 = keep[ti][hh][0];
                        w1 = keep[ti][hh][1];
                    }
                    uint32_t q0[4], q1[4];
                    if constexpr (PK) {
                        mxfp4_pk::pair_words(w0, q0);
                        mxfp4_pk::pair_words(w1, q1);
                    } else {
                        mxfp4_pk::checkpoint_pair_words(w0, q0);
                        mxfp4_pk::checkpoint_pair_words(w1, q1);
                    }
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        A[ti][hh][q] = q0[q];
                        A[ti][hh][4 + q] = q1[q];
                    }
                    moe_mma::scale_words<8>(sc[ti][hh], A[ti][hh]);
                }
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int m = j * 8 + g;
                const unsigned char* xr = xs + m * 256;
                const uint4 u0 = *reinterpret_cast<const uint4*>(xr + swz(4 * t + 2 * half, m) * 16);
                const uint4 u1 = *reinterpret_cast<const uint4*>(xr + swz(4 * t + 2 * half + 1, m) * 16);
                const uint32_t xb[8] = {__byte_perm(u0.x, u0.z, 0x5410), __byte_perm(u0.x, u0.z, 0x7632),
                                        __byte_perm(u0.y, u0.w, 0x5410), __byte_perm(u0.y, u0.w, 0x7632),
                                        __byte_perm(u1.x, u1.z, 0x5410), __byte_perm(u1.x, u1.z, 0x7632),
                                        __byte_perm(u1.y, u1.w, 0x5410), __byte_perm(u1.y, u1.w, 0x7632)};
#pragma unroll
                for (int ti = 0; ti < WT; ++ti)
#pragma unroll
                    for (int s = 0; s < 4; ++s) {
                        const uint32_t af[4] = {A[ti][0][2 * s], A[ti][1][2 * s], A[ti][0][2 * s + 1],
                                                A[ti][1][2 * s + 1]};
                        dev::mma_bf16_16816(acc[ti][j], af, xb[2 * s], xb[2 * s + 1]);
                    }
            }
        }
    }
    dev::cp_async_wait<0>();

    // Epilogue: acc[ti][j][0, 1] = (row g, tokens j*8 + 2t, +1), [2, 3] = (row g + 8, same tokens).
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int tok = j * 8 + 2 * t + (i & 1);
            if (tok >= live) continue;
            const int p = off + t0 + tok;
            const int rr = g + 8 * (i >> 1);
            if constexpr (GATEUP) {
#pragma unroll
                for (int pr = 0; pr < WT / 2; ++pr) {
                    float gt = acc[2 * pr][j][i], up = acc[2 * pr + 1][j][i];
                    if (a.swiglu_limit > 0.0f) {
                        gt = fminf(gt, a.swiglu_limit);
                        up = fminf(fmaxf(up, -a.swiglu_limit), a.swiglu_limit);
                    }
                    const float hv = gt / (1.0f + expf(-gt)) * up * a.perm_w[p];
                    const int col = c0 + (warp * (WT / 2) + pr) * 16 + rr;
                    static_cast<__nv_bfloat16*>(a.out)[int64_t(p) * N + col] = __float2bfloat16_rn(hv);
                }
            } else {
                float* y = static_cast<float*>(a.out) + int64_t(a.perm_dst[p]) * N + c0 + warp * WT * 16 + rr;
#pragma unroll
                for (int ti = 0; ti < WT; ++ti) y[16 * ti] = acc[ti][j][i];
            }
        }
}

template <bool GATEUP, bool PK, int NW, int WT, int MT, int STAGES, int MINB>
cudaError_t launch_mode(const MoeExpertArgs& a, cudaStream_t s) {
    using S = Shape<NW, WT, MT>;
    return launch_grouped(moe_grouped_kernel<GATEUP, PK, NW, WT, MT, STAGES, MINB>, a, MT,
                          a.N / (GATEUP ? S::R / 2 : S::R), NW * 32, STAGES * S::kStage, s);
}

template <bool PK, int NW, int WT, int MT, int STAGES, int MINB>
cudaError_t launch(const MoeExpertArgs& a, cudaStream_t s) {
    return a.mode == MoeExpertMode::kGateUp ? launch_mode<true, PK, NW, WT, MT, STAGES, MINB>(a, s)
                                            : launch_mode<false, PK, NW, WT, MT, STAGES, MINB>(a, s);
}

template <bool PK, int NW, int WT, int MT, int STAGES, int MINB = 1>
constexpr Entry entry() {
    return {{NW, WT, MT, STAGES, MINB, PK ? MoeWeightLayout::kPairRotated : MoeWeightLayout::kCheckpoint,
             STAGES * Shape<NW, WT, MT>::kStage},
            &launch<PK, NW, WT, MT, STAGES, MINB>};
}

// The one list: instantiates and registers; moe_grouped_select_variant (moe.cpp) picks by rows per
// expert. Measured (docs/perf/ledger.md E29, `dsv4 decode-bench --sections moe_gemm`, Flash shapes,
// pair-rotated, gate-up + down of one layer) and not instantiated any more: 8 warps x 2 tiles x 64
// rows (3 and 4 stages; 5-6% slower than the 4-warp form below at 4,096 tokens, 2x slower at 512),
// 8 warps x 4 tiles x 32 rows with 5 stages (+13-15%), 4 warps x 4 tiles x 32 rows, 2 CTAs per SM
// (within 1% of the 8-warp form at 1,024 tokens, 6% slower at 4,096), 4 stages for the 4-warp
// 64-row form (+5%).
const Entry kTable[] = {
    entry<true, 8, 4, 16, 3>(),    entry<false, 8, 4, 16, 3>(),     // <= 16 rows per expert
    entry<true, 8, 4, 32, 3>(),    entry<false, 8, 4, 32, 3>(),     // <= 48
    entry<true, 4, 2, 64, 3, 2>(), entry<false, 4, 2, 64, 3, 2>(),  // more
};

}  // namespace

int moe_grouped_max_tiles(int n_rows, int n_experts, int mt) {
    if (n_rows <= 0 || mt <= 0) return 0;
    return (n_rows + mt - 1) / mt + std::min(n_experts, n_rows);
}
int moe_grouped_mixed_cap128(int n_rows, int n_experts) {
    // c = 128 q + r rows give q + (r > 64) tiles <= c / 65; summed over the experts, <= n_rows / 65.
    return std::min(moe_grouped_max_tiles(n_rows, n_experts, 128), n_rows / 65);
}
constexpr int kMmaCount = int(sizeof(kTable) / sizeof(kTable[0]));
int moe_grouped_count() { return kMmaCount + moe_wgmma_count(); }
MoeGroupedShape moe_grouped_shape(int i) { return i < kMmaCount ? kTable[i].shape : moe_wgmma_shape(i - kMmaCount); }
int moe_grouped_smem_bytes(int i, int K) {
    return i < kMmaCount ? kTable[i].shape.smem_bytes : moe_wgmma_smem_bytes(i - kMmaCount, K);
}
cudaError_t moe_grouped_run(const MoeExpertArgs& a, int variant, cudaStream_t stream) {
    if (variant < 0 || variant >= moe_grouped_count()) return cudaErrorInvalidValue;
    if (variant >= kMmaCount) return moe_wgmma_run(a, variant - kMmaCount, stream);
    if (kTable[variant].shape.layout != a.layout || a.x_kperm) return cudaErrorInvalidValue;
    return kTable[variant].fn(a, stream);
}

}  // namespace dsv4::cuda::sm90
