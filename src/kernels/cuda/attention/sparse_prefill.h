// Sparse MQA attention of prefill query tokens on wgmma (sparse_prefill_sm90.cu): the arguments and
// result of sparse_decode (sparse_decode.h), one query token per CTA of 64 heads, no split-KV, FP8
// 584-byte rows. The batched prefill path (runtime/cuda_runner_prefill.cpp) uses it where
// sparse_prefill_decline allows (option prefill_attn_wgmma). Header usable from host and nvcc code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention/sparse_decode_args.h"

namespace dsv4::cuda {

// Why sparse_prefill_run cannot take these arguments ("" = it can): bf16 rows, n_heads not a
// multiple of 64, a null pointer, q not 16-byte or out not 4-byte aligned. Ignores workspace,
// max_rows, target_ctas, n_splits and variant.
const char* sparse_prefill_decline(const SparseDecodeArgs& a);
// out[b, h, :] for b < batch, h < n_heads (bf16 [batch, n_heads, 512]) from q (bf16 [batch, n_heads,
// 512]) over the rows row_offsets[row_start[b] .. row_start[b + 1]) (byte offsets of FP8 rows into
// kv_pool), with the per-head sink; the same formula as sparse_decode with one split. Declined
// arguments: cudaErrorInvalidValue. Asynchronous on `stream`.
cudaError_t sparse_prefill_run(const SparseDecodeArgs& a, cudaStream_t stream);
// Self-check of the kernel's fast FP8 dequantisation (4 instructions per two codes) against the
// float form for every e4m3 code but NaN and every UE8M0 scale byte below 128 (the bytes it takes),
// and of its row store for every scale byte 0..255 in each of the 7 scaled blocks (bytes of 128 and
// more send the row to the float form; a row past the list stores zeros): the number of differing
// bf16 pairs or units (0 expected), -1 on a CUDA error. Synchronous; for tests.
int64_t sparse_prefill_dequant_mismatches();

}  // namespace dsv4::cuda
