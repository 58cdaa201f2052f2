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

namespace {
// Fill kind and byte stride of rows stored as `spec` (model/kv_rows.h), `words` 4-byte words apart.
Result<cuda::synth::KvFillRegion> row_region(const KvRowSpec& spec, int64_t words) {
    using cuda::synth::KvFillKind;
    cuda::synth::KvFillRegion g;
    g.dim = spec.dim;
    g.stride = 4 * words;
    switch (spec.fmt) {
        case KvRowFormat::kF32:
            g.kind = KvFillKind::kF32;
            break;
        case KvRowFormat::kBf16:
            g.kind = KvFillKind::kBf16;
            break;
        case KvRowFormat::kFp8:
            // The fill writes the 584-byte reference row (448 e4m3 + 64 bf16 + 7 UE8M0 + pad).
            if (spec.bytes() != 584)
                return invalid_argument("synthetic fp8 rows need the 584-byte layout (dim {}, rope {})", spec.dim,
                                        spec.rope_dim);
            g.kind = KvFillKind::kFp8Row584;
            break;
    }
    return g;
}
}  // namespace

Result<std::vector<cuda::synth::KvFillRegion>> kv_token_page_regions(const KvLayout& layout, const ModelConfig& cfg,
                                                                     std::string_view /*rows: layout.row_format*/) {
    std::vector<cuda::synth::KvFillRegion> out;
    auto add = [&](int64_t word_off, int64_t count, const KvRowSpec& spec, int64_t words) -> Status {
        DSV4_ASSIGN_OR_RETURN(cuda::synth::KvFillRegion g, row_region(spec, words));
        g.byte_off = word_off * 4;
        g.count = int32_t(count);
        out.push_back(g);
        return Status::ok();
    };
    for (int l = 0; l < cfg.n_layers; ++l) {
        const LayerStateLayout& s = layout.layers[l];
        if (s.ratio == 0) continue;
        DSV4_RETURN_IF_ERROR(add(s.row_offset, s.rows_per_page, layout.main_row, layout.row_words_main));
        if (s.idx_row_offset >= 0)
            DSV4_RETURN_IF_ERROR(add(s.idx_row_offset, s.rows_per_page, layout.index_row, layout.row_words_index));
    }
    return out;
}

// Window ring rows of state page `page` (index within a sequence's state pages) as fill regions:
// rows stored in a packed format must be written in that format, not as random f32 words.
Result<std::vector<cuda::synth::KvFillRegion>> ring_regions_in_state_page(const KvLayout& layout,
                                                                          const ModelConfig& cfg, int64_t page) {
    std::vector<cuda::synth::KvFillRegion> out;
    for (int l = 0; l < cfg.n_layers; ++l) {
        for (int64_t slot = 0; slot < cfg.sliding_window; ++slot) {
            const int64_t w = layout.ring_row(l, slot);
            if (w / layout.page_elems != page) continue;
            const int64_t in_page = (w % layout.page_elems) * 4;
            DSV4_ASSIGN_OR_RETURN(cuda::synth::KvFillRegion g, row_region(layout.main_row, layout.row_words_main));
            if (!out.empty() && out.back().byte_off + out.back().stride * out.back().count == in_page) {
                ++out.back().count;  // contiguous with the previous row: extend the region
                continue;
            }
            g.byte_off = in_page;
            g.count = 1;
            out.push_back(g);
        }
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
        s = cu(cuda::synth::fill_kv_pages(pool.base, pool.page_bytes, d_ids + state_ids.size(),
                                          int64_t(token_ids.size()), d_reg + 1, int(regions.size()), seed + 1, nullptr),
               "fill token pages");
    // Packed ring rows (bf16 / fp8) over the f32 fill of the state area, one state page index at a
    // time (the regions are offsets within that page).
    for (int64_t i = 0; s.is_ok() && layout.row_format != KvRowFormat::kF32 && i < layout.n_state_pages; ++i) {
        auto ring = ring_regions_in_state_page(layout, cfg, i);
        if (!ring.is_ok()) {
            s = ring.status();
            break;
        }
        if (ring->empty()) continue;
        std::vector<int32_t> ids;
        for (int q = 0; q < B; ++q) ids.push_back(state_ids[size_t(q) * size_t(layout.n_state_pages) + size_t(i)]);
        int32_t* d_pg = nullptr;
        KvFillRegion* d_rr = nullptr;
        s = cu(cudaMalloc(&d_pg, ids.size() * 4), "cudaMalloc");
        if (s.is_ok()) s = cu(cudaMalloc(&d_rr, ring->size() * sizeof(KvFillRegion)), "cudaMalloc");
        if (s.is_ok()) s = cu(cudaMemcpy(d_pg, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "upload");
        if (s.is_ok())
            s = cu(cudaMemcpy(d_rr, ring->data(), ring->size() * sizeof(KvFillRegion), cudaMemcpyHostToDevice),
                   "upload");
        if (s.is_ok())
            s = cu(cuda::synth::fill_kv_pages(pool.base, pool.page_bytes, d_pg, int64_t(ids.size()), d_rr,
                                              int(ring->size()), seed + 2 + uint64_t(i), nullptr),
                   "fill ring rows");
        if (s.is_ok()) s = cu(cudaDeviceSynchronize(), "ring fill");
        cudaFree(d_pg);
        cudaFree(d_rr);
    }
    if (s.is_ok()) s = cu(cudaDeviceSynchronize(), "context fill");
    cudaFree(d_ids);
    cudaFree(d_reg);
    return s;
}

}  // namespace dsv4
