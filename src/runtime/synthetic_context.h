// Sequences pre-filled to a context length without running prefill (the Flash proxy benchmark,
// ../shared/docs/perf-method.md): pages are assigned, and the state pages (window rings,
// compressor states) and the compressed rows of the token pages are written with random valid
// values in the pool's row format. A decode step at position L then reads exactly what it would
// after a real prefill of L tokens (same rows, same counts), only with other values.
// CUDA builds only.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/synth/synth.h"
#include "model/config.h"
#include "model/kv_layout.h"
#include "runtime/cuda_bench_runner.h"

namespace dsv4 {

// How the compressed rows of one token page are stored, per row format (the page regions to fill).
// "f32"/"bf16": the CUDA runner's rows (row_bf16 packs bf16 rows from the same offsets);
// "fp8": the reference 584-byte main rows (kernels/cuda/attention/sparse_decode_args.h) and
// 132-byte indexer rows, assumed packed from each layer's row offset. This is the one function to
// adapt when the page pool's FP8 row placement changes.
Result<std::vector<cuda::synth::KvFillRegion>> kv_token_page_regions(const KvLayout& layout, const ModelConfig& cfg,
                                                                     std::string_view rows);

// Pages of sequence s (s < B) for decoding at position L: [s * P, (s + 1) * P), P = pages_for_tokens(L + 1).
std::vector<int32_t> synthetic_page_table(const KvLayout& layout, int s, int64_t L);

// Fills sequences [0, B) for a decode step at position L (L tokens of context): their state pages
// with f32 uniform [-1, 1) and the rows of their token pages covering positions [0, L] per
// `pool.kv_rows`. Deterministic in `seed`. Errors: the pool has fewer than B * P pages.
Status fill_synthetic_context(const CudaPoolInfo& pool, const KvLayout& layout, const ModelConfig& cfg, int B,
                              int64_t L, uint64_t seed);

}  // namespace dsv4
