#include "dist/inproc_communicator.h"

#include <cstring>
#include <thread>

#include "core/dtype.h"

namespace dsv4::dist {

class InProcCommunicator final : public Communicator {
public:
    InProcCommunicator(std::shared_ptr<InProcGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return g_->size(); }

    Status all_to_all_v(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_offsets,
                        void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_offsets,
                        CommDtype dtype) override {
        InProcGroup::Slot& me = g_->slots_[rank_];
        me = InProcGroup::Slot{send, recv, send_counts, send_offsets, recv_counts, recv_offsets, 0, dtype, kAllToAll};
        g_->barrier_.arrive_and_wait();
        Status st = check_all_to_all();
        if (st.is_ok()) {
            const size_t eb = comm_dtype_bytes(dtype);
            for (int p = 0; p < size(); ++p) {
                const InProcGroup::Slot& peer = g_->slots_[p];
                // An empty exchange may come with null buffers, which memcpy must not be given.
                if (recv_counts[p] == 0) continue;
                std::memcpy(static_cast<char*>(recv) + size_t(recv_offsets[p]) * eb,
                            static_cast<const char*>(peer.send) + size_t(peer.send_offsets[rank_]) * eb,
                            size_t(recv_counts[p]) * eb);
            }
        }
        g_->barrier_.arrive_and_wait();
        return st;
    }

    Status all_reduce_sum(void* buf, int64_t count, CommDtype dtype) override {
        InProcGroup::Slot& me = g_->slots_[rank_];
        me = InProcGroup::Slot{nullptr, buf, {}, {}, {}, {}, count, dtype, kAllReduce};
        g_->barrier_.arrive_and_wait();
        Status st = check_same(kAllReduce);
        if (st.is_ok() && dtype != CommDtype::kF32 && dtype != CommDtype::kBf16)
            st = invalid_argument("all-reduce sum supports f32 and bf16, not {}", comm_dtype_name(dtype));
        std::vector<float> sum;
        if (st.is_ok()) {
            sum.assign(size_t(count), 0.0f);
            // Rank order, starting from rank 0's value: every rank computes the same bits.
            for (int p = 0; p < size(); ++p) {
                const void* src = g_->slots_[p].recv;
                for (int64_t i = 0; i < count; ++i) {
                    const float v = dtype == CommDtype::kF32 ? static_cast<const float*>(src)[i]
                                                             : bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
                    sum[i] = p == 0 ? v : sum[i] + v;
                }
            }
        }
        g_->barrier_.arrive_and_wait();  // every peer has read every buffer
        if (st.is_ok()) {
            if (dtype == CommDtype::kF32 && count > 0)
                std::memcpy(buf, sum.data(), sizeof(float) * size_t(count));
            else
                for (int64_t i = 0; i < count; ++i) static_cast<uint16_t*>(buf)[i] = f32_to_bf16(sum[i]);
        }
        return st;
    }

    Status all_gather(const void* send, void* recv, int64_t count, CommDtype dtype) override {
        InProcGroup::Slot& me = g_->slots_[rank_];
        me = InProcGroup::Slot{send, recv, {}, {}, {}, {}, count, dtype, kAllGather};
        g_->barrier_.arrive_and_wait();
        Status st = check_same(kAllGather);
        if (st.is_ok() && count > 0) {
            const size_t n = size_t(count) * comm_dtype_bytes(dtype);
            for (int p = 0; p < size(); ++p)
                std::memcpy(static_cast<char*>(recv) + size_t(p) * n, g_->slots_[p].send, n);
        }
        g_->barrier_.arrive_and_wait();
        return st;
    }

    Status barrier() override {
        g_->slots_[rank_].op = kBarrier;
        g_->barrier_.arrive_and_wait();
        Status st = check_same(kBarrier);
        g_->barrier_.arrive_and_wait();  // nobody overwrites a slot before all have checked
        return st;
    }

private:
    enum { kAllToAll = 1, kAllReduce, kAllGather, kBarrier };

    // Every rank evaluates the same checks over all slots, so all agree on the outcome.
    Status check_same(int op) const {
        const InProcGroup::Slot& s0 = g_->slots_[0];
        for (int p = 0; p < size(); ++p) {
            const InProcGroup::Slot& s = g_->slots_[p];
            if (s.op != op)
                return error(StatusCode::kFailedPrecondition, "ranks 0 and {} called different collectives", p);
            if (op != kBarrier && (s.count != s0.count || s.dtype != s0.dtype))
                return invalid_argument("collective mismatch: rank 0 passes {} x {}, rank {} passes {} x {}", s0.count,
                                        comm_dtype_name(s0.dtype), p, s.count, comm_dtype_name(s.dtype));
            if (s.count < 0) return invalid_argument("rank {}: negative count {}", p, s.count);
        }
        return Status::ok();
    }

    Status check_all_to_all() const {
        const int n = size();
        DSV4_RETURN_IF_ERROR(check_same(kAllToAll));
        for (int p = 0; p < n; ++p) {
            const InProcGroup::Slot& s = g_->slots_[p];
            if (int(s.send_counts.size()) != n || int(s.send_offsets.size()) != n || int(s.recv_counts.size()) != n ||
                int(s.recv_offsets.size()) != n)
                return invalid_argument("rank {}: all-to-all counts and offsets must each hold {} entries", p, n);
        }
        for (int src = 0; src < n; ++src)
            for (int dst = 0; dst < n; ++dst) {
                const int64_t sent = g_->slots_[src].send_counts[dst], want = g_->slots_[dst].recv_counts[src];
                if (sent != want)
                    return invalid_argument("all-to-all: rank {} sends {} elements to rank {}, which expects {}", src,
                                            sent, dst, want);
                if (sent < 0 || g_->slots_[src].send_offsets[dst] < 0 || g_->slots_[dst].recv_offsets[src] < 0)
                    return invalid_argument("all-to-all: negative count or offset between ranks {} and {}", src, dst);
            }
        return Status::ok();
    }

    std::shared_ptr<InProcGroup> g_;
    int rank_;
};

Result<std::shared_ptr<InProcGroup>> InProcGroup::create(int n_ranks) {
    if (n_ranks < 1) return invalid_argument("an in-process group needs at least one rank, got {}", n_ranks);
    return std::shared_ptr<InProcGroup>(new InProcGroup(n_ranks));
}

std::unique_ptr<Communicator> make_inproc_communicator(std::shared_ptr<InProcGroup> group, int rank) {
    return std::make_unique<InProcCommunicator>(std::move(group), rank);
}

Status run_in_process(int n_ranks, const std::function<Status(Communicator&)>& fn) {
    DSV4_ASSIGN_OR_RETURN(std::shared_ptr<InProcGroup> g, InProcGroup::create(n_ranks));
    std::vector<Status> st(static_cast<size_t>(n_ranks));
    std::vector<std::thread> threads;
    for (int r = 1; r < n_ranks; ++r)
        threads.emplace_back([&, r] {
            InProcCommunicator c(g, r);
            st[r] = fn(c);
        });
    {
        InProcCommunicator c(g, 0);
        st[0] = fn(c);
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n_ranks; ++r)
        if (!st[r].is_ok()) return st[r].with_context(fmt::format("rank {}", r));
    return Status::ok();
}

}  // namespace dsv4::dist
