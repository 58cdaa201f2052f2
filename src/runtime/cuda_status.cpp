// CUDA runtime errors as Status values (see cuda_status.h).
#include "runtime/cuda_status.h"

#include <fmt/format.h>

namespace dsv4 {
namespace {

double gib(size_t b) { return double(b) / double(size_t(1) << 30); }

}  // namespace

bool cuda_error_is_sticky(cudaError_t e) {
    switch (e) {
        case cudaErrorIllegalAddress:
        case cudaErrorLaunchTimeout:
        case cudaErrorAssert:
        case cudaErrorHardwareStackError:
        case cudaErrorIllegalInstruction:
        case cudaErrorMisalignedAddress:
        case cudaErrorInvalidAddressSpace:
        case cudaErrorInvalidPc:
        case cudaErrorLaunchFailure:
        case cudaErrorExternalDevice:
        case cudaErrorECCUncorrectable:
        case cudaErrorNvlinkUncorrectable:
        case cudaErrorContextIsDestroyed:
        // Not documented as sticky, but the runtime knows no more: trusting the context further
        // risks wrong outputs, while a restart only costs the requests already failed.
        case cudaErrorUnknown:
            return true;
        default:
            return false;
    }
}

Status cuda_error_status(cudaError_t e, std::string_view what) {
    if (e == cudaSuccess) return Status::ok();
    if (cuda_error_is_sticky(e))
        return error(StatusCode::kDeviceLost, "CUDA error in {}: {} ({}); the GPU context is lost for this process",
                     what, cudaGetErrorName(e), cudaGetErrorString(e));
    return error(e == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted : StatusCode::kInternal,
                 "CUDA error in {}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

Result<void*> cuda_malloc(size_t bytes, std::string_view what) {
    void* p = nullptr;
    const size_t ask = bytes ? bytes : 1;
    const cudaError_t e = cudaMalloc(&p, ask);
    if (e == cudaSuccess) return p;
    if (e != cudaErrorMemoryAllocation) return cuda_error_status(e, fmt::format("cudaMalloc for {}", what));
    (void)cudaGetLastError();  // not sticky: clear it, or the next launch check returns it
    size_t free_b = 0, total_b = 0;
    int dev = -1;
    (void)cudaMemGetInfo(&free_b, &total_b);
    (void)cudaGetDevice(&dev);
    return error(StatusCode::kResourceExhausted,
                 "out of GPU memory: {} needs {} bytes ({:.2f} GiB); {} bytes ({:.2f} GiB) are "
                 "free of {:.1f} GiB on "
                 "GPU {}",
                 what, ask, gib(ask), free_b, gib(free_b), gib(total_b), dev);
}

}  // namespace dsv4
