// InProcCommunicator: the Communicator over threads of one process, for CPU tests of the
// distributed code (N ranks = N threads sharing host memory). Each collective publishes the
// caller's pointers in its rank's slot, meets the others at a barrier, copies or sums straight
// from the peers' buffers, and meets them again before returning, so buffers may be reused as
// soon as the call returns. Argument checks see every rank's slot, so all ranks agree on an
// error and none is left waiting. Reductions sum in rank order: identical bits on every rank.
// A rank that stops calling (returns early between collectives) leaves its peers waiting: keep
// all ranks on the same sequence of calls.
#pragma once

#include <barrier>
#include <functional>
#include <memory>
#include <vector>

#include "dist/communicator.h"

namespace dsv4::dist {

class InProcGroup {
public:
    // Errors: n_ranks < 1.
    static Result<std::shared_ptr<InProcGroup>> create(int n_ranks);
    int size() const { return int(slots_.size()); }

    struct Slot {
        const void* send = nullptr;
        void* recv = nullptr;
        std::span<const int64_t> send_counts, send_offsets, recv_counts, recv_offsets;
        int64_t count = 0;
        CommDtype dtype = CommDtype::kF32;
        int op = 0;  // which collective, to catch ranks calling different ones
    };

private:
    friend class InProcCommunicator;
    explicit InProcGroup(int n) : slots_(size_t(n)), barrier_(n) {}
    std::vector<Slot> slots_;
    std::barrier<> barrier_;
};

// The communicator of one rank of a group (it keeps the group alive). rank in [0, group->size()).
std::unique_ptr<Communicator> make_inproc_communicator(std::shared_ptr<InProcGroup> group, int rank);

// Runs fn(communicator of rank r) on n threads (rank 0 on the caller's thread) and returns the
// first non-ok Status in rank order.
Status run_in_process(int n_ranks, const std::function<Status(Communicator&)>& fn);

}  // namespace dsv4::dist
