// Instantiations and launch of the third K-chunked tensor-core GEMM (dense_gemm_kc3.cuh: weights
// and x through an ST-deep cp.async ring): the grid, split rule and clusters of dense_gemm_kc_sm90.cu.
#include "kernels/cuda/gemm/dense_gemm_kc3.cuh"
#include "kernels/cuda/gemm/dense_gemm_kc_sm90.h"

namespace dsv4::cuda::sm90 {

int dense_gemm_kc3_smem(int warps, int rows_per_warp, int tokens, int stages, bool fp8, bool x_f32) {
    const int rows = warps * rows_per_warp;
    const int stage = tokens * 128 * (x_f32 ? 4 : 2) + rows * (fp8 ? 128 : 256);
    const int ring = stages * stage + 256;
    const int part = rows * (tokens + 8) * 4;
    return ring > part ? ring : part;
}

namespace {

template <bool FP8, bool XF32, int NW, int MTL, int NTT, int ST>
cudaError_t launch_t(const DenseGemvArgs& a, cudaStream_t s) {
    auto* k = gemm_kc3::dense_gemm_kc3_kernel<FP8, XF32, NW, MTL, NTT, ST>;
    constexpr int smem = gemm_kc3::Layout<FP8, XF32, NW, MTL, NTT, ST>::bytes();
    return dense_gemm_kc_cluster_launch(reinterpret_cast<const void*>(k), smem, 16 * NW * MTL, 8 * NTT, NW * 32, a, s);
}

}  // namespace

template <int NW, int MTL, int NTT, int ST>
cudaError_t dense_gemm_kc3_launch(const DenseGemvArgs& a, cudaStream_t s) {
    const bool fp8 = a.format == WeightFormat::kFp8Block;
    if (fp8)
        return a.x_f32 ? launch_t<true, true, NW, MTL, NTT, ST>(a, s) : launch_t<true, false, NW, MTL, NTT, ST>(a, s);
    return a.x_f32 ? launch_t<false, true, NW, MTL, NTT, ST>(a, s) : launch_t<false, false, NW, MTL, NTT, ST>(a, s);
}

// The registered configurations (dense_gemv_sm90.cu kTable).
template cudaError_t dense_gemm_kc3_launch<4, 1, 4, 3>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc3_launch<4, 1, 4, 4>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc3_launch<8, 1, 4, 3>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc3_launch<8, 1, 8, 3>(const DenseGemvArgs&, cudaStream_t);

}  // namespace dsv4::cuda::sm90
