// Device-to-device copy kernel: the bandwidth ceiling the decode benchmarks report against
// (bytes read + written). cudaMemcpyAsync D2D goes through the copy engines and measured only
// ~2.7 TB/s on H200 (docs/perf/ledger.md), well under what SM loads/stores reach. Host-only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace dsv4::cuda {

// dst, src: 16-byte aligned device pointers; bytes: multiple of 16.
cudaError_t stream_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace dsv4::cuda
