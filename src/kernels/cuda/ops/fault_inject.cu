// The device-fault test hook (see fault_inject.h).
#include "kernels/cuda/ops/fault_inject.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {
namespace {

// `where` comes from the host, so the compiler cannot drop or fold the store.
__global__ void illegal_store_kernel(int* where) {
    dev::pdl_begin();
    *reinterpret_cast<volatile int*>(where) = 1;
}

__device__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin_kernel(long long ns) {
    dev::pdl_begin();
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < static_cast<unsigned long long>(ns)) {
    }
}

}  // namespace

cudaError_t inject_device_fault(cudaStream_t st) {
    illegal_store_kernel<<<1, 1, 0, st>>>(nullptr);
    return cudaGetLastError();
}

cudaError_t spin_device_ns(long long ns, cudaStream_t st) {
    if (ns <= 0) return cudaSuccess;
    spin_kernel<<<1, 1, 0, st>>>(ns);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
