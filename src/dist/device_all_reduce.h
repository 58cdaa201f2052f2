// DeviceAllReduce: the one collective the expert-parallel CUDA runner needs (docs/design.md,
// "Parallelism over several GPUs"): an in-place f32 sum over the ranks of a group, enqueued on the
// caller's CUDA stream so that it is recorded into the runner's decode graph when that stream is
// being captured (NCCL collectives are capturable). Host-only, no CUDA or NCCL types: the NCCL
// implementation is dist/nccl_group.h (built only with NCCL).
#pragma once

#include <cstdint>

#include "core/status.h"

namespace dsv4::dist {

class DeviceAllReduce {
public:
    virtual ~DeviceAllReduce() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // buf [count] f32 on this rank's device; stream: a cudaStream_t of that device. Every rank of
    // the group must make the same sequence of calls with the same counts (matched by order).
    // Returns once enqueued. Errors: the collective library's launch errors.
    virtual Status sum_f32(float* buf, int64_t count, void* stream) = 0;
};

}  // namespace dsv4::dist
