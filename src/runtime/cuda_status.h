// CUDA runtime errors as Status values (CUDA builds only; host code). One classification for the
// runner, the weight upload and the page pool: a sticky error (the context is unusable for the rest
// of the process: illegal address, launch failure, ...) is StatusCode::kDeviceLost, which the
// engine treats as the end of the process (sched/engine_core.h, EngineCore::fatal); running out of
// device memory is kResourceExhausted with the bytes asked and free; anything else kInternal.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string_view>

#include "core/status.h"

namespace dsv4 {

// True for the errors after which every later CUDA call of this process fails the same way (the
// runtime's documentation: "the process must be terminated and relaunched").
bool cuda_error_is_sticky(cudaError_t e);

// Ok for cudaSuccess; else "CUDA error in WHAT: NAME (text)": kDeviceLost when sticky (the message
// then says the context is lost), kResourceExhausted for cudaErrorMemoryAllocation, else kInternal.
Status cuda_error_status(cudaError_t e, std::string_view what);

// cudaMalloc of `bytes` (1 when 0) on the current device. Errors: kResourceExhausted "out of GPU
// memory: WHAT needs N bytes (x GiB); F bytes (y GiB) are free of T on GPU d", where the failed
// call's error is cleared first (otherwise the next kernel launch check would report it again);
// a sticky error as cuda_error_status.
Result<void*> cuda_malloc(size_t bytes, std::string_view what);

}  // namespace dsv4
