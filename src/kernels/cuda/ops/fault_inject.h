// Test hooks. GPU fault handling (issue 21; RuntimeOptions::fault_inject_step): a genuine device
// fault, not a simulated error value, so the whole path from the kernel to the HTTP reply is the
// one a broken kernel or a failing GPU takes. A deliberate slowdown (issue 16: `dsv4 tune
// --calibrate` measures that its statistics detect a known change): a kernel that waits.
#pragma once

#include <cuda_runtime.h>

namespace dsv4::cuda {

// Queues on `st` one single-thread kernel that stores through a null pointer (an address no
// allocation covers). The launch returns cudaSuccess (or an earlier error); the fault shows at the
// next synchronisation with `st` as cudaErrorIllegalAddress, which is sticky: every later CUDA call
// of the process fails too, as after a real fault.
cudaError_t inject_device_fault(cudaStream_t st);

// Queues on `st` one single-thread kernel that spins for `ns` nanoseconds of the GPU's global timer
// (ns <= 0: nothing is queued). Graph-capturable. Returns the launch error.
cudaError_t spin_device_ns(long long ns, cudaStream_t st);

}  // namespace dsv4::cuda
