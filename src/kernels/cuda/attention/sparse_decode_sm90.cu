// Variant table, instantiations and launchers of the sm90 sparse decode attention
// (sparse_decode.cuh). The table below is the only list: it both instantiates each kernel and
// registers its parameters, so names and code cannot drift.
#include "kernels/cuda/attention/sparse_decode.cuh"
#include "kernels/cuda/attention/sparse_decode_sm90.h"

namespace dsv4::cuda::sm90 {
namespace {

using LaunchFn = cudaError_t (*)(const attn::KernelArgs&, int batch, bool fp8, cudaStream_t);

template <int BT, int HB, int NW, int ST, bool FP8>
cudaError_t launch_one(const attn::KernelArgs& ka, int batch, cudaStream_t stream) {
    using C = attn::Cfg<BT, HB, NW, ST, FP8>;
    if constexpr (C::kSmem > 232448) {
        return cudaErrorInvalidConfiguration;  // illegal combination (see sparse_decode_smem)
    } else {
        auto* k = attn::sparse_decode_kernel<BT, HB, NW, ST, FP8>;
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmem));
        if (e != cudaSuccess) return e;
        dim3 grid(ka.n_heads / HB, ka.n_splits, batch);
        k<<<grid, C::kThreads, C::kSmem, stream>>>(ka);
        return cudaGetLastError();
    }
}

template <int BT, int HB, int NW, int ST>
cudaError_t launch(const attn::KernelArgs& ka, int batch, bool fp8, cudaStream_t stream) {
    return fp8 ? launch_one<BT, HB, NW, ST, true>(ka, batch, stream)
               : launch_one<BT, HB, NW, ST, false>(ka, batch, stream);
}

struct Entry {
    KernelParams params;
    LaunchFn fn;
    size_t smem_bf16, smem_fp8;
};

template <int BT, int HB, int NW, int ST>
constexpr Entry entry() {
    return {{BT, HB, NW, ST, 0},
            &launch<BT, HB, NW, ST>,
            attn::Cfg<BT, HB, NW, ST, false>::kSmem,
            attn::Cfg<BT, HB, NW, ST, true>::kSmem};
}

// The first entry is the default (heuristic fallback): bh32_w8 won every batch in the first
// A/B sweep (docs/perf/ledger.md).
const Entry kTable[] = {
    entry<32, 32, 8, 2>(),
    entry<32, 32, 8, 3>(),
    entry<64, 32, 8, 2>(),
    entry<32, 32, 4, 2>(),
    entry<32, 16, 4, 2>(),
    entry<32, 64, 8, 2>(),
    entry<32, 64, 8, 3>(),
    entry<64, 64, 8, 2>(),
    // The default tile with 4 warps and 3 stages: with w8_s2 (the default), w8_s3 and w4_s2 it completes
    // the warps {4, 8} x stages {2, 3} grid of `dsv4 tune --variants default-tile` (issue 16).
    entry<32, 32, 4, 3>(),
};

}  // namespace

int sparse_decode_count() { return int(sizeof(kTable) / sizeof(kTable[0])); }
KernelParams sparse_decode_params(int i) { return kTable[i].params; }
size_t sparse_decode_smem(int i, bool fp8) { return fp8 ? kTable[i].smem_fp8 : kTable[i].smem_bf16; }

cudaError_t sparse_decode_run(const SparseDecodeArgs& a, int variant, int n_splits, cudaStream_t stream) {
    attn::KernelArgs ka{
        static_cast<const __nv_bfloat16*>(a.q), a.kv_pool,   a.row_offsets, a.row_start, a.sink,
        static_cast<__nv_bfloat16*>(a.out),     a.workspace, a.n_heads,     n_splits,    a.scale * dev::kLog2e};
    const bool fp8 = a.format == KvFormat::kFp8;
    cudaError_t e = kTable[variant].fn(ka, a.batch, fp8, stream);
    if (e != cudaSuccess || n_splits == 1) return e;
    attn::sparse_decode_combine_kernel<<<dim3(a.n_heads, a.batch), 128, 0, stream>>>(ka, a.batch);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda::sm90
