#include "dist/nccl_communicator.h"

#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>
#include <nccl.h>

static_assert(sizeof(ncclUniqueId) == sizeof(dsv4::dist::NcclId::bytes), "NCCL unique id size changed");

namespace dsv4::dist {

namespace {

Status cuda_status(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    return error(StatusCode::kInternal, "{}: CUDA error {}", what, cudaGetErrorString(e));
}

Status nccl_status(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
    if (r == ncclSuccess) return Status::ok();
    const char* last = ncclGetLastError(comm);
    return error(StatusCode::kInternal, "{}: NCCL {} ({})", what, ncclGetErrorString(r), last ? last : "");
}

Result<ncclDataType_t> nccl_type(CommDtype t) {
    switch (t) {
        case CommDtype::kF32:
            return ncclFloat32;
        case CommDtype::kBf16:
            return ncclBfloat16;
        case CommDtype::kI32:
            return ncclInt32;
        case CommDtype::kI64:
            return ncclInt64;
        case CommDtype::kU8:
            return ncclUint8;
    }
    return invalid_argument("unknown communicator dtype");
}

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(ncclComm_t comm, int rank, int size, int device, cudaStream_t stream, bool own_stream,
                     float* scratch)
        : comm_(comm),
          rank_(rank),
          size_(size),
          device_(device),
          stream_(stream),
          own_stream_(own_stream),
          scratch_(scratch) {}

    ~NcclCommunicator() override {
        cudaSetDevice(device_);
        cudaStreamSynchronize(stream_);
        ncclCommDestroy(comm_);
        cudaFree(scratch_);
        if (own_stream_) cudaStreamDestroy(stream_);
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }

    Status all_to_all_v(const void* send, std::span<const int64_t> send_counts, std::span<const int64_t> send_offsets,
                        void* recv, std::span<const int64_t> recv_counts, std::span<const int64_t> recv_offsets,
                        CommDtype dtype) override {
        if (int(send_counts.size()) != size_ || int(send_offsets.size()) != size_ || int(recv_counts.size()) != size_ ||
            int(recv_offsets.size()) != size_)
            return invalid_argument("all-to-all: counts and offsets must each hold {} entries", size_);
        DSV4_ASSIGN_OR_RETURN(ncclDataType_t t, nccl_type(dtype));
        const size_t eb = comm_dtype_bytes(dtype);
        DSV4_RETURN_IF_ERROR(nccl_status(ncclGroupStart(), "ncclGroupStart"));
        Status st = Status::ok();
        for (int p = 0; p < size_ && st.is_ok(); ++p) {
            if (send_counts[p] > 0)
                st = nccl_status(ncclSend(static_cast<const char*>(send) + size_t(send_offsets[p]) * eb,
                                          size_t(send_counts[p]), t, p, comm_, stream_),
                                 "ncclSend", comm_);
            if (st.is_ok() && recv_counts[p] > 0)
                st = nccl_status(ncclRecv(static_cast<char*>(recv) + size_t(recv_offsets[p]) * eb,
                                          size_t(recv_counts[p]), t, p, comm_, stream_),
                                 "ncclRecv", comm_);
        }
        Status end = nccl_status(ncclGroupEnd(), "ncclGroupEnd", comm_);
        return st.is_ok() ? end : st;
    }

    Status all_reduce_sum(void* buf, int64_t count, CommDtype dtype) override {
        if (dtype != CommDtype::kF32 && dtype != CommDtype::kBf16)
            return invalid_argument("all-reduce sum supports f32 and bf16, not {}", comm_dtype_name(dtype));
        DSV4_ASSIGN_OR_RETURN(ncclDataType_t t, nccl_type(dtype));
        return nccl_status(ncclAllReduce(buf, buf, size_t(count), t, ncclSum, comm_, stream_), "ncclAllReduce", comm_);
    }

    Status all_gather(const void* send, void* recv, int64_t count, CommDtype dtype) override {
        DSV4_ASSIGN_OR_RETURN(ncclDataType_t t, nccl_type(dtype));
        return nccl_status(ncclAllGather(send, recv, size_t(count), t, comm_, stream_), "ncclAllGather", comm_);
    }

    Status barrier() override {
        // NCCL has no barrier: a one-element all-reduce every rank must join, then wait for it.
        DSV4_RETURN_IF_ERROR(
            nccl_status(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), "barrier", comm_));
        return cuda_status(cudaStreamSynchronize(stream_), "barrier: cudaStreamSynchronize");
    }

private:
    ncclComm_t comm_;
    int rank_, size_, device_;
    cudaStream_t stream_;
    bool own_stream_;
    float* scratch_;
};

}  // namespace

Result<NcclId> nccl_make_id() {
    ncclUniqueId id;
    DSV4_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    NcclId out;
    std::memcpy(out.bytes.data(), &id, sizeof(id));
    return out;
}

std::string nccl_version_string() {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
    // Since 2.9 the code is major*10000 + minor*100 + patch.
    return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclId& id, int rank, int n_ranks, int device,
                                                             void* stream) {
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks) return invalid_argument("rank {} of {} ranks", rank, n_ranks);
    // Issue 8 item 4: NVLink multicast must stay off on these shared hosts, whatever the caller's
    // environment says. NCCL reads it at init.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    DSV4_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const bool own = s == nullptr;
    if (own)
        DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
    float* scratch = nullptr;
    Status st = cuda_status(cudaMalloc(&scratch, sizeof(float)), "cudaMalloc");
    ncclUniqueId uid;
    std::memcpy(&uid, id.bytes.data(), sizeof(uid));
    ncclComm_t comm = nullptr;
    if (st.is_ok()) st = nccl_status(ncclCommInitRank(&comm, n_ranks, uid, rank), "ncclCommInitRank");
    if (!st.is_ok()) {
        cudaFree(scratch);
        if (own) cudaStreamDestroy(s);
        return st;
    }
    return std::unique_ptr<Communicator>(new NcclCommunicator(comm, rank, n_ranks, device, s, own, scratch));
}

}  // namespace dsv4::dist
