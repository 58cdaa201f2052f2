// The two bandwidth ceilings the decode benchmarks report against (docs/perf-method.md: the
// step's bytes floor uses the higher of the two, measured in the same run):
// - stream_copy: device-to-device copy through the SMs (bytes read + written). cudaMemcpyAsync
//   D2D goes through the copy engines and measured only ~2.7 TB/s on H200 (docs/perf/ledger.md).
// - stream_read_xor: a pure-read streaming reduction. A decode step mostly reads, and read-only
//   kernels have exceeded the copy rate (the LM-head GEMV: ~4.5 TB/s against ~3.9 copy).
// Host-only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace dsv4::cuda {

// dst, src: 16-byte aligned device pointers; bytes: multiple of 16.
cudaError_t stream_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// Reads `bytes` at src (16-byte aligned, bytes a multiple of 16) once and writes the XOR of
// every 16-byte word it read handled by CTA i to partial[i] (n_partial CTAs of 512 threads;
// the XOR of all partials is the XOR of the whole buffer, so the loads can not be elided and
// the result is checkable). partial: n_partial x 16 bytes of device memory. n_partial >= 1;
// 8 per SM reach the H200's read rate (fewer leave it short).
// Errors: cudaErrorInvalidValue for n_partial < 1; launch errors as returned.
cudaError_t stream_read_xor(const void* src, size_t bytes, void* partial, int n_partial, cudaStream_t stream);

}  // namespace dsv4::cuda
