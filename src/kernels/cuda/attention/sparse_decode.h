// Decode attention over an explicit per-sequence list of K=V rows (window rows + selected CSA /
// all HCA compressed rows), MQA (one shared 512-d K=V row for all heads), per-head sink, split-KV
// with a log-sum-exp combine (spec §2.4 "Core attention", §3.5; design.md "CUDA kernels"):
//   o_h = sum_s exp(z_hs - M) k_s / (sum_s exp(z_hs - M) + exp(sink_h - M)),  z = q_h.k_s * scale.
// Rows are addressed by 64-bit element offsets into a paged pool (B09): bf16 elements for kBf16,
// bytes for kFp8 (the 584-byte reference layout below). A sequence with zero rows yields zeros.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/cuda/attention/sparse_decode_args.h"
#include "kernels/cuda/common/kernel_params.h"

namespace dsv4::cuda {

int sparse_decode_variant_count();
KernelParams sparse_decode_variant_params(int i);
std::string sparse_decode_variant_name(int i);
bool sparse_decode_variant_legal(int i, KvFormat format, int n_heads);
// Variant the launcher would pick for these args (env override, then heuristic).
int sparse_decode_select_variant(const SparseDecodeArgs& a);
// Splits: batch x head_blocks x splits reaches target_ctas, rounded down to a power of two,
// capped at 64 and at ceil(max_rows / block_t); 1 when there is nothing to split.
int sparse_decode_plan_splits(int batch, int head_blocks, int max_rows, int block_t, int target_ctas);
size_t sparse_decode_workspace_floats(int batch, int n_heads, int n_splits);
int sparse_decode_splits_for(const SparseDecodeArgs& a);  // what the launch will use

Status sparse_decode_launch(const SparseDecodeArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
