// prefill_gemm.h: FP8 -> bf16 weight dequantisation and the cuBLAS call.
// Dequant: one thread per 8 consecutive weights of a row (one 8-byte load, one 16-byte store);
// memory-bound (3 bytes moved per weight, ~0.1 ms for the largest Flash projection).
#include "kernels/cuda/ops/prefill_gemm.h"

#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/ops/fast_path.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {

__global__ void dequant_fp8_bf16_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ scale, int64_t N,
                                        int64_t K, __nv_bfloat16* __restrict__ out) {
    dev::pdl_begin();
    const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
    if (i >= N * K) return;
    const int64_t n = i / K, k = i % K, kb = (K + 127) / 128;
    const float s = ue8m0_f32(scale[(n / 128) * kb + k / 128]);  // K % 8 == 0: the 8 share a block
    const uint2 raw = *reinterpret_cast<const uint2*>(w + i);
    const uint32_t words[2] = {raw.x, raw.y};
    __align__(16) __nv_bfloat16 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __float2bfloat16_rn(e4m3_f32(uint8_t(words[j / 4] >> (8 * (j % 4)))) * s);
    *reinterpret_cast<uint4*>(out + i) = *reinterpret_cast<const uint4*>(v);
}

struct Layout {
    int64_t npg = 0, groups = 0;  // rows per group, groups
};
Layout layout_of(const WeightDesc& w, int n_per_group, int64_t group_in) {
    if (n_per_group <= 0 || n_per_group == w.N) return {w.N, 1};
    if (w.N % n_per_group == 0 && group_in == w.K) return {n_per_group, w.N / n_per_group};
    return {};
}

}  // namespace

const char* prefill_gemm_decline(const PrefillGemm& g, const WeightDesc& w, int n_per_group, int64_t group_in,
                                 int64_t ldx, int64_t ldy, bool accumulate, int T) {
    if (!g.handle || g.min_tokens <= 0 || T < g.min_tokens) return "below the token threshold";
    if (w.fmt != WFmt::kFp8E8M0 && w.fmt != WFmt::kBF16) return "format";
    // Only where the fast kernels would run (bf16 x there too): small matrices, such as the tiny
    // goldens', keep the f32 kernels they were checked with.
    if (!linear_fast_decline(w, n_per_group, group_in, ldx, ldy, accumulate).empty()) return "not a fast-kernel shape";
    if (accumulate) return "accumulating";
    if (ldy != w.N) return "strided output";
    if (ldx % 8 != 0 || w.K % 8 != 0) return "x rows not 8-aligned";
    const Layout l = layout_of(w, n_per_group, group_in);
    if (l.groups == 0) return "grouped layout does not map";
    if (w.fmt == WFmt::kFp8E8M0 && int64_t(w.N) * w.K > g.w_scratch_elems) return "weight scratch too small";
    if (ldx > g.x_cols || g.x_rows <= 0) return "x scratch too small";
    return "";
}

cudaError_t prefill_gemm_linear(const PrefillGemm& g, const WeightDesc& w, const float* x, const void* x_bf16,
                                int64_t ldx, int n_per_group, int64_t group_in, float* y, int64_t ldy, int T,
                                cudaStream_t st, void* y_bf16) {
    const Layout l = layout_of(w, n_per_group, group_in);
    const void* A = w.data;
    if (w.fmt == WFmt::kFp8E8M0) {
        const int64_t n8 = (int64_t(w.N) * w.K + 7) / 8;
        dequant_fp8_bf16_kernel<<<unsigned((n8 + 255) / 256), 256, 0, st>>>(
            static_cast<const uint8_t*>(w.data), static_cast<const uint8_t*>(w.scale), w.N, w.K,
            static_cast<__nv_bfloat16*>(g.w_scratch));
        DSV4_LAUNCH_RET();
        A = g.w_scratch;
    }
    // Row-major y[T, ldy] = x[T, ldx] W^T is, column-major, Y (N x T, ld ldy) = W^T (W: K x N,
    // ld K) X (K x T, ld ldx); group g: W rows g*npg.., x columns g*K.., y columns g*npg.
    for (int64_t t0 = 0; t0 < T; t0 += g.x_rows) {
        const int64_t rows = T - t0 < g.x_rows ? T - t0 : g.x_rows;
        const void* B =
            x_bf16 ? static_cast<const void*>(static_cast<const __nv_bfloat16*>(x_bf16) + t0 * ldx) : nullptr;
        if (!B) {
            DSV4_CUDA_RET(round_to_bf16(x + t0 * ldx, rows * ldx, g.x_scratch, st));
            B = g.x_scratch;
        }
        void* C = y_bf16 ? static_cast<void*>(static_cast<__nv_bfloat16*>(y_bf16) + t0 * ldy)
                         : static_cast<void*>(y + t0 * ldy);
        DSV4_CUDA_RET(lt_gemm_run(g.handle, int(l.npg), int(rows), w.K, A, w.K, l.npg * w.K, B, ldx, w.K, C, ldy, l.npg,
                                  y_bf16 != nullptr, int(l.groups), st));
    }
    return cudaSuccess;
}

}  // namespace dsv4::cuda
