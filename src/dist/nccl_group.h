// An NCCL all-reduce group over several GPUs of one process (expert-parallel CUDA runner, one
// thread per GPU: runtime/multi_gpu_runner.h). Compiled only with NCCL (DSV4_HAVE_NCCL).
//
// The communicators are created together by ncclCommInitAll from the calling thread; afterwards
// communicator i is used only from the thread driving device devices[i], on that thread's streams
// (one thread per rank: NCCL calls of one rank never wait for another rank's host thread).
// Environment set before init: NCCL_NVLS_ENABLE=0 always (NVLink multicast must stay off on these
// shared hosts; nothing here creates multicast objects), and NCCL_RUNTIME_CONNECT=0 unless the
// caller set it (every connection is made at init, none inside a graph capture).
#pragma once

#include <memory>
#include <vector>

#include "dist/device_all_reduce.h"

namespace dsv4::dist {

// One DeviceAllReduce per entry of `devices` (CUDA ordinals, distinct), rank i on devices[i].
// Errors: an empty or repeated device list, NCCL/CUDA failures with NCCL's message.
Result<std::vector<std::shared_ptr<DeviceAllReduce>>> make_nccl_group(const std::vector<int>& devices);

}  // namespace dsv4::dist
