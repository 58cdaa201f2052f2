// Whole-page copies inside the KV/state pool (prefix caching: snapshots of a sequence's state
// pages taken and restored on the device, runtime/forward_batch.h PageCopy).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// For i < n, in order of i where pages repeat: pool[dst_i * page_words ..] = pool[src_i * page_words ..]
// for page_words 4-byte words; pairs: device array of n (src, dst) int32 pairs. Pairs of one call
// must not chain (a page written by one pair and read by another): the copies run concurrently.
cudaError_t copy_pages(uint32_t* pool, int64_t page_words, const int32_t* pairs, int n, cudaStream_t st);

}  // namespace dsv4::cuda
