// Instantiations and launch of the second K-chunked tensor-core GEMM (dense_gemm_kc2.cuh): the
// grid, split rule and clusters of dense_gemm_kc_sm90.cu.
#include "kernels/cuda/gemm/dense_gemm_kc2.cuh"
#include "kernels/cuda/gemm/dense_gemm_kc_sm90.h"

namespace dsv4::cuda::sm90 {

int dense_gemm_kc2_smem(int warps, int rows_per_warp, int tokens, bool x_f32) {
    const int stages = 2 * tokens * 256 + (x_f32 ? tokens * 512 : 0);
    const int part = warps * rows_per_warp * (tokens + 8) * 4;
    return stages > part ? stages : part;
}

namespace {

template <bool FP8, bool XF32, int NW, int MTL, int NTT>
cudaError_t launch_t(const DenseGemvArgs& a, cudaStream_t s) {
    auto* k = gemm_kc2::dense_gemm_kc2_kernel<FP8, XF32, NW, MTL, NTT>;
    constexpr int smem = gemm_kc2::smem_bytes<XF32, NW, MTL, NTT>();
    return dense_gemm_kc_cluster_launch(reinterpret_cast<const void*>(k), smem, 16 * NW * MTL, 8 * NTT, NW * 32, a, s);
}

}  // namespace

template <int NW, int MTL, int NTT>
cudaError_t dense_gemm_kc2_launch(const DenseGemvArgs& a, cudaStream_t s) {
    const bool fp8 = a.format == WeightFormat::kFp8Block;
    if (fp8) return a.x_f32 ? launch_t<true, true, NW, MTL, NTT>(a, s) : launch_t<true, false, NW, MTL, NTT>(a, s);
    return a.x_f32 ? launch_t<false, true, NW, MTL, NTT>(a, s) : launch_t<false, false, NW, MTL, NTT>(a, s);
}

// The registered configurations (dense_gemv_sm90.cu kTable).
template cudaError_t dense_gemm_kc2_launch<4, 1, 4>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc2_launch<4, 1, 8>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc2_launch<8, 1, 4>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc2_launch<8, 1, 8>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc2_launch<4, 2, 8>(const DenseGemvArgs&, cudaStream_t);

}  // namespace dsv4::cuda::sm90
