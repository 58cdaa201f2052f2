// The device-fault test hook (see fault_inject.h).
#include "kernels/cuda/ops/fault_inject.h"

namespace dsv4::cuda {
namespace {

// `where` comes from the host, so the compiler cannot drop or fold the store.
__global__ void illegal_store_kernel(int* where) { *reinterpret_cast<volatile int*>(where) = 1; }

}  // namespace

cudaError_t inject_device_fault(cudaStream_t st) {
    illegal_store_kernel<<<1, 1, 0, st>>>(nullptr);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
