// NcclCommunicator: the Communicator over NCCL between GPUs (issue 8). Compiled only when NCCL
// and CUDA are found (DSV4_HAVE_NCCL; cmake/dsv4_nccl.cmake, hint DSV4_NCCL_ROOT). Buffers are
// device pointers; every call enqueues on the communicator's stream and returns (barrier()
// waits). One communicator per GPU: one process per GPU, or one thread per GPU in one process.
//
// NVLink multicast (NVLS) stays off: make_nccl_communicator sets NCCL_NVLS_ENABLE=0 before
// ncclCommInitRank, and nothing here allocates multicast objects (no ncclMemAlloc, no window
// registration) — on shared hosts multicast can take every GPU out of service.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "dist/communicator.h"

namespace dsv4::dist {

// The id rank 0 creates and every rank needs before init (share it in memory between threads,
// or through a file/socket between processes). 128 bytes, as NCCL_UNIQUE_ID_BYTES.
struct NcclId {
    std::array<char, 128> bytes{};
};

Result<NcclId> nccl_make_id();

// "2.28.9" of the NCCL library loaded at run time.
std::string nccl_version_string();

// Joins the group as `rank` of `n_ranks` on CUDA device `device` (cudaSetDevice'd on the calling
// thread). stream: a cudaStream_t to enqueue on, or nullptr to create one (owned). Blocks until
// all ranks have joined. Errors: CUDA/NCCL failures with NCCL's message.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclId& id, int rank, int n_ranks, int device,
                                                             void* stream = nullptr);

}  // namespace dsv4::dist
