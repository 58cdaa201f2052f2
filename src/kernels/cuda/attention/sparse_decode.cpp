// Host side of the sparse decode attention: argument checks, variant selection (env
// DSV4_ATTN_VARIANT, then heuristic), the split-KV plan, and the launch.
#include "kernels/cuda/attention/sparse_decode.h"

#include <algorithm>

#include "kernels/cuda/attention/sparse_decode_sm90.h"

namespace dsv4::cuda {
namespace {

int sm_count() {
    int dev = 0, n = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n;
}

bool legal(int i, const SparseDecodeArgs& a) {
    const KernelParams p = sm90::sparse_decode_params(i);
    return a.n_heads % p.block_h == 0 && sm90::sparse_decode_smem(i, a.format == KvFormat::kFp8) <= 232448;
}

}  // namespace

bool sparse_decode_variant_legal(int i, KvFormat format, int n_heads) {
    SparseDecodeArgs a;
    a.format = format;
    a.n_heads = n_heads;
    return i >= 0 && i < sm90::sparse_decode_count() && legal(i, a);
}

int sparse_decode_variant_count() { return sm90::sparse_decode_count(); }
KernelParams sparse_decode_variant_params(int i) { return sm90::sparse_decode_params(i); }
std::string sparse_decode_variant_name(int i) { return variant_name("sparse_decode", sm90::sparse_decode_params(i)); }

int sparse_decode_select_variant(const SparseDecodeArgs& a) {
    if (a.variant >= 0 && a.variant < sparse_decode_variant_count() && legal(a.variant, a)) return a.variant;
    for (int i = 0; i < sparse_decode_variant_count(); ++i)
        if (legal(i, a)) return i;
    return 0;
}

int sparse_decode_plan_splits(int batch, int head_blocks, int max_rows, int block_t, int target_ctas) {
    const int base = std::max(1, batch * head_blocks);
    int want = std::max(1, target_ctas / base);
    const int tiles = std::max(1, (max_rows + block_t - 1) / block_t);
    want = std::min({want, 64, tiles});
    int s = 1;
    while (s * 2 <= want) s *= 2;
    return s;
}

size_t sparse_decode_workspace_floats(int batch, int n_heads, int n_splits) {
    return size_t(batch) * n_splits * n_heads * (kKvHeadDim + 2);
}

int sparse_decode_splits_for(const SparseDecodeArgs& a) {
    if (a.n_splits > 0) return a.n_splits;
    const KernelParams p = sm90::sparse_decode_params(sparse_decode_select_variant(a));
    const int target = a.target_ctas > 0 ? a.target_ctas : 2 * sm_count();
    return sparse_decode_plan_splits(a.batch, a.n_heads / p.block_h, a.max_rows, p.block_t, target);
}

Status sparse_decode_launch(const SparseDecodeArgs& a, cudaStream_t stream) {
    if (a.batch <= 0) return Status::ok();
    if (!a.q || !a.kv_pool || !a.row_offsets || !a.row_start || !a.sink || !a.out)
        return invalid_argument("sparse_decode: null pointer argument");
    const int v = sparse_decode_select_variant(a);
    if (v < 0 || v >= sparse_decode_variant_count() || !legal(v, a))
        return invalid_argument("sparse_decode: variant {} illegal for n_heads {}", v, a.n_heads);
    const int splits = sparse_decode_splits_for(a);
    if (splits > 1 && !a.workspace) return invalid_argument("sparse_decode: {} splits need a workspace", splits);
    const cudaError_t e = sm90::sparse_decode_run(a, v, splits, stream);
    if (e != cudaSuccess)
        return Status(StatusCode::kInternal,
                      "sparse_decode " + sparse_decode_variant_name(v) + ": " + cudaGetErrorString(e));
    return Status::ok();
}

}  // namespace dsv4::cuda
