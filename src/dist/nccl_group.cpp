#include "dist/nccl_group.h"

#include <cstdlib>

#include <cuda_runtime.h>
#include <nccl.h>

namespace dsv4::dist {

namespace {

Status nccl_ok(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
    if (r == ncclSuccess) return Status::ok();
    const char* last = ncclGetLastError(comm);
    return error(StatusCode::kInternal, "{}: NCCL {} ({})", what, ncclGetErrorString(r), last ? last : "");
}

// Owns one communicator; destroyed on its own device.
class NcclAllReduce final : public DeviceAllReduce {
public:
    NcclAllReduce(ncclComm_t comm, int rank, int size, int device)
        : comm_(comm), rank_(rank), size_(size), device_(device) {}
    ~NcclAllReduce() override {
        int prev = 0;
        cudaGetDevice(&prev);
        cudaSetDevice(device_);
        ncclCommDestroy(comm_);
        cudaSetDevice(prev);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    Status sum_f32(float* buf, int64_t count, void* stream) override {
        if (count <= 0) return Status::ok();
        return nccl_ok(
            ncclAllReduce(buf, buf, size_t(count), ncclFloat32, ncclSum, comm_, static_cast<cudaStream_t>(stream)),
            "ncclAllReduce", comm_);
    }

private:
    ncclComm_t comm_;
    int rank_, size_, device_;
};

}  // namespace

Result<std::vector<std::shared_ptr<DeviceAllReduce>>> make_nccl_group(const std::vector<int>& devices) {
    const int n = int(devices.size());
    if (n < 1) return invalid_argument("NCCL group: no devices");
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < i; ++j)
            if (devices[i] == devices[j]) return invalid_argument("NCCL group: device {} listed twice", devices[i]);
    setenv("NCCL_NVLS_ENABLE", "0", 1);      // never NVLink multicast (see the header)
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);  // connect at init, not lazily inside a capture
    int prev = 0;
    cudaGetDevice(&prev);
    std::vector<ncclComm_t> comms(size_t(n), nullptr);
    Status st = nccl_ok(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
    cudaSetDevice(prev);
    DSV4_RETURN_IF_ERROR(st);
    std::vector<std::shared_ptr<DeviceAllReduce>> out;
    for (int i = 0; i < n; ++i) out.push_back(std::make_shared<NcclAllReduce>(comms[size_t(i)], i, n, devices[i]));
    return out;
}

}  // namespace dsv4::dist
