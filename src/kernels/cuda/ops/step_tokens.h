// Sampled tokens kept on the device between steps (overlapped scheduling): the next step's decode
// tokens are filled in from the previous step's sampled ids without a host round trip
// (runtime/forward_batch.h kPendingToken).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops/sample_rows.h"

namespace dsv4::cuda {

// ids[args[i].row] = out[i].token for the n kFull rows of a step (ids: [R] int32, the same array
// argmax_rows writes for greedy rows), so every device-sampled row's token sits in ids.
cudaError_t scatter_sampled_tokens(const SampleRowArgs* args, const SampleRowOut* out, int n, int32_t* ids,
                                   cudaStream_t st);

// tokens[dst[i]] = ids[src[i]] for i < n: pending chunk tokens taken from the previous step's
// sampled ids. dst: token indices of this step; src: row indices of the previous step.
cudaError_t fill_pending_tokens(int32_t* tokens, const int32_t* dst, const int32_t* src, int n, const int32_t* ids,
                                cudaStream_t st);

}  // namespace dsv4::cuda
