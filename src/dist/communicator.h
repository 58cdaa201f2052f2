// Communicator: the collectives distributed inference needs (issue 8), behind one interface so
// the same dispatch/combine code runs over threads on the CPU (InProcCommunicator) and over NCCL
// between GPUs (NcclCommunicator).
//
// Memory: InProcCommunicator takes host pointers; NcclCommunicator takes device pointers and
// enqueues on its CUDA stream (a call returns once enqueued; barrier() waits for completion).
// Counts and offsets are in elements of `dtype`, never bytes. Every rank of the group must make
// the same sequence of calls (collectives are matched by order, not by tag).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"

namespace dsv4::dist {

enum class CommDtype : uint8_t { kF32, kBf16, kI32, kI64, kU8 };

size_t comm_dtype_bytes(CommDtype t);
const char* comm_dtype_name(CommDtype t);

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;

    // All-to-all with per-peer counts: elements send[send_offsets[p] .. + send_counts[p]) go to
    // rank p, which stores them at its recv[recv_offsets[me] .. + recv_counts[me]). All spans:
    // [size()]. recv_counts[p] must equal what rank p sends here. Errors: span sizes, a count mismatch with the peer
    // (in-process only: NCCL cannot see it), an unsupported dtype.
    virtual Status all_to_all_v(const void* send, std::span<const int64_t> send_counts,
                                std::span<const int64_t> send_offsets, void* recv, std::span<const int64_t> recv_counts,
                                std::span<const int64_t> recv_offsets, CommDtype dtype) = 0;

    // In place: buf[i] = sum over ranks of buf[i]. kF32 or kBf16 (bf16: summed in f32, rounded
    // once). The in-process version sums in rank order, so every rank gets identical bits.
    virtual Status all_reduce_sum(void* buf, int64_t count, CommDtype dtype) = 0;

    // recv [size() * count] = concatenation of every rank's send [count], in rank order.
    virtual Status all_gather(const void* send, void* recv, int64_t count, CommDtype dtype) = 0;

    // Every rank has reached this point and (NCCL) every enqueued collective has completed.
    virtual Status barrier() = 0;
};

}  // namespace dsv4::dist
