// Grouped MXFP4 expert GEMV for decode on sm90 (CUDA cores; Hopper has no FP4 tensor cores, so
// weights are dequantised in registers: e2m1 -> fp16 bit placement -> f32, times UE8M0).
//
// Thread roles: grid (N / rows_per_cta, max_active) over the compact active-expert list written
//   by the permutation (or n_experts without it); CTAs past *n_active exit at once. The grid is
//   fixed per batch size, so the step can be captured in a CUDA graph. Warp w owns two weight
//   rows: kGateUp the same feature n of w1 and w3 (SwiGLU fused in the epilogue), kDown rows
//   2n, 2n+1 of w2. Each lane streams 16 B (32 e2m1 values, exactly one UE8M0 group) per row and
//   step, STAGES steps in flight, and FMAs them against MT rows of x held in shared memory.
// Shared memory: x [MT][K] bf16 for the current chunk of the expert's rows (gathered through
//   perm_token for kGateUp).
// Bound: HBM-bound while rows per expert are few; f32-FMA-bound beyond (64 FLOP per weight byte
//   at 32 rows), where moe_expert_mma.cuh takes over. Last measured (ledger E5): batch 1, 6
//   experts x 13.4 MB in 80 us = 1.0 TB/s, 26% of the copy bandwidth.
#include "kernels/cuda/common/weight_stream.cuh"
#include "kernels/cuda/moe/moe_expert_mma.cuh"
#include "kernels/cuda/moe/moe_sm90.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::sm90 {
namespace {

template <bool GATEUP, int NW, int MT, int U>
__global__ void __launch_bounds__(NW * 32) moe_expert_kernel(MoeExpertArgs a) {
    dev::pdl_begin();
    constexpr int kStep = 32 * 32;  // k per warp step
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
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int K = a.K, N = a.N;
    constexpr int kRowsPerCta = GATEUP ? NW : 2 * NW;
    const int n0 = blockIdx.x * kRowsPerCta + (GATEUP ? warp : 2 * warp);
    const int64_t rb = K / 2, sb = K / 32;
    const uint8_t* wr[2];
    const uint8_t* sr[2];
    if constexpr (GATEUP) {
        wr[0] = a.w1 + (int64_t(e) * N + n0) * rb;
        wr[1] = a.w3 + (int64_t(e) * N + n0) * rb;
        sr[0] = a.w1_scale + (int64_t(e) * N + n0) * sb;
        sr[1] = a.w3_scale + (int64_t(e) * N + n0) * sb;
    } else {
        wr[0] = a.w1 + (int64_t(e) * N + n0) * rb;
        wr[1] = wr[0] + rb;
        sr[0] = a.w1_scale + (int64_t(e) * N + n0) * sb;
        sr[1] = sr[0] + sb;
    }
    for (int t0 = 0; t0 < count; t0 += MT) {
        __syncthreads();
        for (int i = tid; i < MT * (K / 8); i += NW * 32) {
            const int m = i / (K / 8), c = i % (K / 8);
            uint4 v = make_uint4(0, 0, 0, 0);
            if (t0 + m < count) {
                const int p = off + t0 + m;
                const int64_t src = GATEUP ? a.perm_token[p] : p;
                v = dev::load_x8_bf16(a.x, GATEUP && a.x_f32, src * K + c * 8);
            }
            *reinterpret_cast<uint4*>(xs + m * K + c * 8) = v;
        }
        __syncthreads();

        float acc[2][MT];
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;

        for (int kb = 0; kb < K; kb += kStep * U) {
            uint4 raw[U][2];
            float sc[U][2];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = kb + u * kStep + lane * 32;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    raw[u][r] = make_uint4(0, 0, 0, 0);
                    sc[u][r] = 0.0f;
                    if (k < K) {
                        raw[u][r] = __ldg(reinterpret_cast<const uint4*>(wr[r] + k / 2));
                        sc[u][r] = dev::ue8m0(__ldg(sr[r] + k / 32)) * dev::kE2m1Fix;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = kb + u * kStep + lane * 32;
                if (k >= K) break;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float wv[32];
                    ws::decode_mxfp4(raw[u][r], sc[u][r], wv);
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
#pragma unroll
                        for (int h = 0; h < 4; ++h) {
                            float xv[8];
                            ws::load_x<8>(xs + m * K + k + 8 * h, xv);
#pragma unroll
                            for (int i = 0; i < 8; ++i) acc[r][m] = fmaf(wv[8 * h + i], xv[i], acc[r][m]);
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            const float v0 = dev::warp_sum(acc[0][m]);
            const float v1 = dev::warp_sum(acc[1][m]);
            if (lane != 0 || t0 + m >= count) continue;
            const int p = off + t0 + m;
            if constexpr (GATEUP) {
                float gt = v0, up = v1;
                if (a.swiglu_limit > 0.0f) {
                    gt = fminf(gt, a.swiglu_limit);
                    up = fminf(fmaxf(up, -a.swiglu_limit), a.swiglu_limit);
                }
                const float h = gt / (1.0f + expf(-gt)) * up * a.perm_w[p];
                static_cast<__nv_bfloat16*>(a.out)[int64_t(p) * N + n0] = __float2bfloat16_rn(h);
            } else {
                float* y = static_cast<float*>(a.out) + int64_t(a.perm_dst[p]) * N + n0;
                y[0] = v0;
                y[1] = v1;
            }
        }
    }
}

using LaunchFn = cudaError_t (*)(const MoeExpertArgs&, cudaStream_t);

template <bool GATEUP, int NW, int MT, int U>
cudaError_t launch_mode(const MoeExpertArgs& a, cudaStream_t s) {
    auto* k = moe_expert_kernel<GATEUP, NW, MT, U>;
    const size_t smem = size_t(MT) * a.K * 2;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    constexpr int kRows = GATEUP ? NW : 2 * NW;
    const int grid_y = a.active_experts ? a.max_active : a.n_experts;
    if (grid_y <= 0) return cudaSuccess;
    k<<<dim3(a.N / kRows, grid_y), NW * 32, smem, s>>>(a);
    return cudaGetLastError();
}

template <int NW, int MT, int U>
cudaError_t launch(const MoeExpertArgs& a, cudaStream_t s) {
    return a.mode == MoeExpertMode::kGateUp ? launch_mode<true, NW, MT, U>(a, s) : launch_mode<false, NW, MT, U>(a, s);
}

template <bool GATEUP, int NW, int NTT, int U, int DQ, int MINB, int KS>
cudaError_t launch_mma_mode(const MoeExpertArgs& a, cudaStream_t s) {
    auto* k = moe_mma::moe_expert_mma_kernel<GATEUP, NW, NTT, U, DQ, MINB, KS>;
    const size_t smem = size_t(8 * NTT) * (a.K + 8) * 2 + moe_mma::red_bytes(NW, NTT, KS);
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    constexpr int kRows = (NW / KS) * (GATEUP ? 16 : 32);
    const int grid_y = a.active_experts ? a.max_active : a.n_experts;
    if (grid_y <= 0) return cudaSuccess;
    k<<<dim3(a.N / kRows, grid_y), NW * 32, smem, s>>>(a);
    return cudaGetLastError();
}

template <int NW, int NTT, int U, int DQ, int MINB, int KS>
cudaError_t launch_mma(const MoeExpertArgs& a, cudaStream_t s) {
    return a.mode == MoeExpertMode::kGateUp ? launch_mma_mode<true, NW, NTT, U, DQ, MINB, KS>(a, s)
                                            : launch_mma_mode<false, NW, NTT, U, DQ, MINB, KS>(a, s);
}

struct Entry {
    KernelParams params;
    LaunchFn fn;
    bool mma;
    int dq;                  // tensor-core dequant (moe_expert_mma.cuh DQ): 0 via f32, 1..3 conversion-free
    int minb;                // tensor-core: minimum CTAs per SM asked of the register allocator
    MoeWeightLayout layout;  // the only code layout the entry reads
};
template <int NW, int MT, int U>
constexpr Entry entry() {
    return {{MT, 2, NW, U, 0}, &launch<NW, MT, U>, false, 0, 1, MoeWeightLayout::kCheckpoint};
}
// Tensor-core entries: block_t = tokens per pass (8 per n-tile), block_h = 16 rows per warp tile,
// split = KS warps per row tile splitting K (0 for the plain kernel, where KS = 1).
template <int NW, int NTT, int U, int DQ = 0, int MINB = 1, int KS = 1>
constexpr Entry entry_mma() {
    return {{8 * NTT, 16, NW, U, KS > 1 ? KS : 0},
            &launch_mma<NW, NTT, U, DQ, MINB, KS>,
            true,
            DQ,
            MINB,
            DQ == 4 ? MoeWeightLayout::kPairRotated : MoeWeightLayout::kCheckpoint};
}

// The one list: instantiates and registers. First entry = default.
const Entry kTable[] = {
    entry<8, 4, 2>(), entry<4, 4, 2>(), entry<8, 4, 4>(), entry<8, 8, 2>(), entry<8, 2, 2>(), entry_mma<4, 1, 2>(),
    entry_mma<8, 1, 2>(), entry_mma<4, 2, 2>(),
    // Conversion-free dequant (docs/perf/ledger.md E6).
    entry_mma<4, 1, 2, 1>(), entry_mma<8, 1, 2, 1>(), entry_mma<2, 1, 2, 1>(), entry_mma<8, 2, 2, 1>(),
    entry_mma<4, 1, 2, 2>(),
    // E7: x re-paired in shared memory (no detectable change but -2% at batch 1). The register-
    // capped entries measured there (entry_mma<4, 1, 2, 2, 3 or 4>, <8, 1, 2, 2, 2>: no change /
    // +50-90% / +30-65%, spills) are not instantiated any more.
    entry_mma<4, 1, 2, 3>(),
    // Split-K inside the CTA (docs/perf/ledger.md E11): 2 slices of K per row tile, -4% at batch 1 only.
    // Measured there and not instantiated any more: 4 slices (entry_mma<4, 1, 2, 2 or 3, 1, 4>),
    // +13% at B=1 and +45..+70% from B=2 on.
    entry_mma<4, 1, 2, 2, 1, 2>(),
    // Pair-rotated weights (docs/perf/ledger.md E17): the bitdqp form and its 2-way split-K.
    entry_mma<4, 1, 2, 4>(), entry_mma<4, 1, 2, 4, 1, 2>(),
    // Measured and not instantiated any more (docs/perf/ledger.md E28): 16 and 32 tokens per pass on
    // pair-rotated weights (entry_mma<4, 2 or 4, 2, 4>) for prefill chunks (dozens of rows per
    // expert): the routed experts of a 4,096-token step took 498 ms instead of 394 (the 32-token
    // down form spills; fewer CTAs fit per SM).
};

}  // namespace

int moe_expert_count() { return int(sizeof(kTable) / sizeof(kTable[0])); }
KernelParams moe_expert_params(int i) { return kTable[i].params; }
bool moe_expert_is_mma(int i) { return kTable[i].mma; }
int moe_expert_dequant(int i) { return kTable[i].dq; }
int moe_expert_min_blocks(int i) { return kTable[i].minb; }
MoeWeightLayout moe_expert_layout(int i) { return kTable[i].layout; }
cudaError_t moe_expert_run(const MoeExpertArgs& a, int variant, cudaStream_t stream) {
    if (variant < 0 || variant >= moe_expert_count()) return cudaErrorInvalidValue;
    if (kTable[variant].layout != a.layout) return cudaErrorInvalidValue;  // would decode garbage
    return kTable[variant].fn(a, stream);
}

}  // namespace dsv4::cuda::sm90
