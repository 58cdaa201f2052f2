// Synthetic context fill (see synthetic_context.h).
#include "runtime/synthetic_context.h"

#include <cuda_runtime.h>

namespace dsv4 {

namespace {
Status cu(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    return error(StatusCode::kInternal, "CUDA error in {}: {}", what, cudaGetErrorString(e));
}
}  // namespace

Result<std::vector<cuda::synth::KvFillRegion>> kv_token_page_regions(const KvLayout& layout, const ModelConfig& cfg,
                                                                     std::string_view rows) {
    using cuda::synth::KvFillKind;
    using cuda::synth::KvFillRegion;
    std::vector<KvFillRegion> out;
    auto add = [&](int64_t elem_off, int64_t count, int dim, bool index) -> Status {
        KvFillRegion g;
        g.byte_off = elem_off * layout.elem_bytes;
        g.count = int32_t(count);
        g.dim = dim;
        if (rows == "f32") {
            g.kind = KvFillKind::kF32;
            g.stride = 4 * int64_t(dim);
        } else if (rows == "bf16") {
            g.kind = KvFillKind::kBf16;
            g.stride = 2 * int64_t(dim);
        } else if (rows == "fp8") {
            g.kind = index ? KvFillKind::kFp8Row132 : KvFillKind::kFp8Row584;
            g.stride = index ? int64_t(dim) + 4 : 584;
            if (!index && dim != 512) return invalid_argument("fp8 rows need head_dim 512 (got {})", dim);
        } else {
            return invalid_argument("KV row format '{}' (expected f32, bf16 or fp8)", rows);
        }
        out.push_back(g);
        return Status::ok();
    };
    for (int l = 0; l < cfg.n_layers; ++l) {
        const LayerStateLayout& s = layout.layers[l];
        if (s.ratio == 0) continue;
        DSV4_RETURN_IF_ERROR(add(s.row_offset, s.rows_per_page, cfg.head_dim, false));
        if (s.idx_row_offset >= 0) DSV4_RETURN_IF_ERROR(add(s.idx_row_offset, s.rows_per_page, cfg.index_head_dim, true));
    }
    return out;
}

std::vector<int32_t> synthetic_page_table(const KvLayout& layout, int s, int64_t L) {
    const int64_t P = layout.pages_for_tokens(L + 1);
    std::vector<int32_t> t(static_cast<size_t>(P));
    for (int64_t i = 0; i < P; ++i) t[size_t(i)] = int32_t(int64_t(s) * P + i);
    return t;
}

Status fill_synthetic_context(const CudaPoolInfo& pool, const KvLayout& layout, const ModelConfig& cfg, int B,
                              int64_t L, uint64_t seed) {
    using cuda::synth::KvFillRegion;
    const int64_t P = layout.pages_for_tokens(L + 1);
    if (int64_t(B) * P > pool.n_pages)
        return error(StatusCode::kResourceExhausted, "{} sequences at context {} need {} pages, the pool has {}", B, L,
                     int64_t(B) * P, pool.n_pages);
    std::vector<int32_t> state_ids, token_ids;
    for (int s = 0; s < B; ++s) {
        const auto t = synthetic_page_table(layout, s, L);
        state_ids.insert(state_ids.end(), t.begin(), t.begin() + layout.n_state_pages);
        token_ids.insert(token_ids.end(), t.begin() + layout.n_state_pages, t.end());
    }
    DSV4_ASSIGN_OR_RETURN(auto regions, kv_token_page_regions(layout, cfg, pool.kv_rows));
    // The whole state area as f32 (rings and compressor kv/gate states: any finite value is a state
    // some token history could have left).
    const KvFillRegion state{0, layout.page_bytes, 1, int32_t(layout.page_bytes / 4), cuda::synth::KvFillKind::kF32};
    int32_t* d_ids = nullptr;
    KvFillRegion* d_reg = nullptr;
    const size_t n_ids = state_ids.size() + token_ids.size();
    Status s = cu(cudaMalloc(&d_ids, n_ids * sizeof(int32_t)), "cudaMalloc");
    if (s.is_ok()) s = cu(cudaMalloc(&d_reg, (regions.size() + 1) * sizeof(KvFillRegion)), "cudaMalloc");
    if (s.is_ok()) s = cu(cudaMemcpy(d_ids, state_ids.data(), state_ids.size() * 4, cudaMemcpyHostToDevice), "upload");
    if (s.is_ok())
        s = cu(cudaMemcpy(d_ids + state_ids.size(), token_ids.data(), token_ids.size() * 4, cudaMemcpyHostToDevice),
               "upload");
    if (s.is_ok()) s = cu(cudaMemcpy(d_reg, &state, sizeof(KvFillRegion), cudaMemcpyHostToDevice), "upload");
    if (s.is_ok() && !regions.empty())
        s = cu(cudaMemcpy(d_reg + 1, regions.data(), regions.size() * sizeof(KvFillRegion), cudaMemcpyHostToDevice),
               "upload");
    if (s.is_ok())
        s = cu(cuda::synth::fill_kv_pages(pool.base, pool.page_bytes, d_ids, int64_t(state_ids.size()), d_reg, 1, seed,
                                          nullptr),
               "fill state pages");
    if (s.is_ok() && !regions.empty())
        s = cu(cuda::synth::fill_kv_pages(pool.base, pool.page_bytes, d_ids + state_ids.size(), int64_t(token_ids.size()),
                                          d_reg + 1, int(regions.size()), seed + 1, nullptr),
               "fill token pages");
    if (s.is_ok()) s = cu(cudaDeviceSynchronize(), "context fill");
    cudaFree(d_ids);
    cudaFree(d_reg);
    return s;
}

}  // namespace dsv4
