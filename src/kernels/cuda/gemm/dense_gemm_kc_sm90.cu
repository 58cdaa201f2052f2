// Instantiations and launch of the K-chunked tensor-core skinny GEMM (dense_gemm_kc.cuh):
// grid (row tiles, token chunks of MT, split S), clusters (1, 1, S) when S > 1.
#include "kernels/cuda/gemm/dense_gemm_kc.cuh"
#include "kernels/cuda/gemm/dense_gemm_kc_sm90.h"

namespace dsv4::cuda::sm90 {

int dense_gemm_kc_split(int tiles, int nkb, int sms) {
    int s = 1;
    while (s < 8 && tiles * s < 2 * sms && nkb >= 4 * s) s *= 2;
    return s;
}

int dense_gemm_kc_smem(int warps, int rows_per_warp, int tokens, bool x_f32) {
    const int stage = tokens * 128 * (x_f32 ? 4 : 2);
    const int part = warps * rows_per_warp * (tokens + 8) * 4;
    return 2 * stage > part ? 2 * stage : part;
}

cudaError_t dense_gemm_kc_cluster_launch(const void* kernel, int smem, int rows_per_cta, int tokens_per_pass,
                                         int threads, const DenseGemvArgs& a, cudaStream_t s) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    int dev = 0, sms = 132;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    const int tiles = a.groups * a.N / rows_per_cta;
    const int chunks = (a.n_tokens + tokens_per_pass - 1) / tokens_per_pass;
    const int split = dense_gemm_kc_split(tiles, a.K / 128, sms);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(tiles), unsigned(chunks < 1 ? 1 : (chunks > 1024 ? 1024 : chunks)), unsigned(split));
    cfg.blockDim = dim3(unsigned(threads));
    cfg.dynamicSmemBytes = size_t(smem);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = unsigned(split);
    cfg.attrs = attr;
    cfg.numAttrs = split > 1 ? 1 : 0;
    DenseGemvArgs arg = a;
    void* args[] = {&arg};
    return cudaLaunchKernelExC(&cfg, kernel, args);
}

namespace {

template <bool FP8, bool XF32, int NW, int MTL, int NTT>
cudaError_t launch_t(const DenseGemvArgs& a, cudaStream_t s) {
    auto* k = gemm_kc::dense_gemm_kc_kernel<FP8, XF32, NW, MTL, NTT>;
    constexpr int smem = gemm_kc::smem_bytes<XF32, NW, MTL, NTT>();
    return dense_gemm_kc_cluster_launch(reinterpret_cast<const void*>(k), smem, 16 * NW * MTL, 8 * NTT, NW * 32, a, s);
}

}  // namespace

template <int NW, int MTL, int NTT>
cudaError_t dense_gemm_kc_launch(const DenseGemvArgs& a, cudaStream_t s) {
    const bool fp8 = a.format == WeightFormat::kFp8Block;
    if (fp8) return a.x_f32 ? launch_t<true, true, NW, MTL, NTT>(a, s) : launch_t<true, false, NW, MTL, NTT>(a, s);
    return a.x_f32 ? launch_t<false, true, NW, MTL, NTT>(a, s) : launch_t<false, false, NW, MTL, NTT>(a, s);
}

// The registered configurations (dense_gemv_sm90.cu kTable).
template cudaError_t dense_gemm_kc_launch<4, 2, 4>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc_launch<4, 1, 4>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc_launch<4, 2, 8>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc_launch<4, 1, 8>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc_launch<8, 1, 4>(const DenseGemvArgs&, cudaStream_t);
template cudaError_t dense_gemm_kc_launch<8, 1, 8>(const DenseGemvArgs&, cudaStream_t);

}  // namespace dsv4::cuda::sm90
