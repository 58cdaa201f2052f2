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
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    int dev = 0, sms = 132;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    constexpr int R = 16 * NW * MTL, MT = 8 * NTT;
    const int tiles = a.groups * a.N / R;
    const int chunks = (a.n_tokens + MT - 1) / MT;
    const int split = dense_gemm_kc_split(tiles, a.K / 128, sms);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(tiles), unsigned(chunks < 1 ? 1 : (chunks > 1024 ? 1024 : chunks)), unsigned(split));
    cfg.blockDim = dim3(NW * 32);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = unsigned(split);
    cfg.attrs = attr;
    cfg.numAttrs = split > 1 ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, k, a);
}

}  // namespace

template <int NW, int MTL, int NTT, int ST>
cudaError_t dense_gemm_kc3_launch(const DenseGemvArgs& a, cudaStream_t s) {
    const bool fp8 = a.format == WeightFormat::kFp8Block;
    if (fp8) return a.x_f32 ? launch_t<true, true, NW, MTL, NTT, ST>(a, s) : launch_t<true, false, NW, MTL, NTT, ST>(a, s);
    return a.x_f32 ? launch_t<false, true, NW, MTL, NTT, ST>(a, s) : launch_t<false, false, NW, MTL, NTT, ST>(a, s);
}

// The registered configurations (dense_gemv_sm90.cu kTable).
template cudaError_t dense_gemm_kc3_launch<4, 1, 4, 3>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc3_launch<4, 1, 4, 4>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc3_launch<8, 1, 4, 3>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc3_launch<8, 1, 8, 3>(const DenseGemvArgs&, cudaStream_t);

}  // namespace dsv4::cuda::sm90
