// NCCL smoke test (issue 8): N ranks, one thread per GPU in one process (N = --ranks, default 1),
// through NcclCommunicator: all-reduce f32 and bf16, all-gather, all-to-all-v with uneven and
// zero counts, barrier; each result checked element by element on the host. Prints the NCCL
// version and NCCL_NVLS_ENABLE as NCCL saw it, and a few latencies (informative, not a
// benchmark). Exit 0 all passed, 1 a check failed, 77 no GPU (ctest SKIP_RETURN_CODE).
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "dist/nccl_communicator.h"

using namespace dsv4;
using namespace dsv4::dist;

namespace {

std::mutex g_print;
int g_failures = 0;

void report(int rank, const std::string& what, bool ok, const std::string& detail = "") {
    std::lock_guard<std::mutex> lk(g_print);
    std::printf("rank %d %-34s %s %s\n", rank, what.c_str(), ok ? "PASS" : "FAIL", detail.c_str());
    if (!ok) ++g_failures;
}

template <typename T>
T* to_device(const std::vector<T>& h) {
    T* d = nullptr;
    cudaMalloc(&d, h.size() * sizeof(T) + 1);
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    // A pageable copy may still be in flight when cudaMemcpy returns, and the communicator's
    // stream does not wait for the legacy default stream.
    cudaDeviceSynchronize();
    return d;
}

template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaDeviceSynchronize();
    cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
}

// Elements rank `src` sends to rank `dst` in the all-to-all-v check: zero for some pairs, never
// for rank 0 to itself, so a one-rank run moves data too.
int64_t a2a_count(int src, int dst) { return (src + 2 * dst) % 3 == 2 ? 0 : 997 * (1 + src + 3 * dst); }
int32_t a2a_value(int src, int dst, int64_t i) { return int32_t(src * 1000000 + dst * 1000 + i); }

void run_rank(const NcclId& id, int rank, int n) {
    auto made = make_nccl_communicator(id, rank, n, rank);
    if (!made.is_ok()) {
        report(rank, "init", false, made.status().to_string());
        return;
    }
    Communicator& c = **made;
    report(rank, "init", true,
           fmt::format("(NCCL {}, NCCL_NVLS_ENABLE={})", nccl_version_string(),
                       std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "unset"));
    // all-reduce f32: rank r holds r + 1 + i / 4.
    {
        const int64_t cnt = 1 << 16;
        std::vector<float> h(cnt);
        for (int64_t i = 0; i < cnt; ++i) h[i] = float(rank + 1) + float(i % 64) * 0.25f;
        float* d = to_device(h);
        Status s = c.all_reduce_sum(d, cnt, CommDtype::kF32);
        auto out = to_host(d, cnt);
        bool ok = s.is_ok();
        for (int64_t i = 0; i < cnt && ok; ++i)
            ok = out[i] == float(n * (n + 1) / 2) + float(n) * float(i % 64) * 0.25f;
        report(rank, "all_reduce_sum f32 65536", ok, s.is_ok() ? "" : s.to_string());
        cudaFree(d);
    }
    // all-reduce bf16 (values exact in bf16).
    {
        const int64_t cnt = 4096;
        std::vector<uint16_t> h(cnt);
        for (int64_t i = 0; i < cnt; ++i) h[i] = f32_to_bf16(float(rank + 1) * float(1 + i % 8));
        uint16_t* d = to_device(h);
        Status s = c.all_reduce_sum(d, cnt, CommDtype::kBf16);
        auto out = to_host(d, cnt);
        bool ok = s.is_ok();
        for (int64_t i = 0; i < cnt && ok; ++i) ok = bf16_to_f32(out[i]) == float(n * (n + 1) / 2) * float(1 + i % 8);
        report(rank, "all_reduce_sum bf16 4096", ok, s.is_ok() ? "" : s.to_string());
        cudaFree(d);
    }
    // all-gather i32.
    {
        const int64_t cnt = 1000;
        std::vector<int32_t> h(cnt);
        for (int64_t i = 0; i < cnt; ++i) h[i] = int32_t(rank * 100000 + i);
        int32_t* d = to_device(h);
        int32_t* r = to_device(std::vector<int32_t>(size_t(cnt * n), -1));
        Status s = c.all_gather(d, r, cnt, CommDtype::kI32);
        auto out = to_host(r, size_t(cnt * n));
        bool ok = s.is_ok();
        for (int p = 0; p < n && ok; ++p)
            for (int64_t i = 0; i < cnt && ok; ++i) ok = out[size_t(p * cnt + i)] == int32_t(p * 100000 + i);
        report(rank, "all_gather i32 1000", ok, s.is_ok() ? "" : s.to_string());
        cudaFree(d);
        cudaFree(r);
    }
    // all-to-all-v i32 with uneven and zero counts (also to itself).
    {
        std::vector<int64_t> sc(n), so(n), rc(n), ro(n);
        int64_t S = 0, R = 0;
        for (int p = 0; p < n; ++p) {
            sc[p] = a2a_count(rank, p), so[p] = S, S += sc[p];
            rc[p] = a2a_count(p, rank), ro[p] = R, R += rc[p];
        }
        std::vector<int32_t> h(static_cast<size_t>(S));
        for (int p = 0; p < n; ++p)
            for (int64_t i = 0; i < sc[p]; ++i) h[size_t(so[p] + i)] = a2a_value(rank, p, i);
        int32_t* d = to_device(h);
        int32_t* r = to_device(std::vector<int32_t>(size_t(R), -1));
        Status s = c.all_to_all_v(d, sc, so, r, rc, ro, CommDtype::kI32);
        auto out = to_host(r, size_t(R));
        bool ok = s.is_ok();
        for (int p = 0; p < n && ok; ++p)
            for (int64_t i = 0; i < rc[p] && ok; ++i) ok = out[size_t(ro[p] + i)] == a2a_value(p, rank, i);
        report(rank, "all_to_all_v i32 uneven", ok,
               s.is_ok() ? fmt::format("(sent {}, received {})", S, R) : s.to_string());
        cudaFree(d);
        cudaFree(r);
    }
    {
        Status s = c.barrier();
        report(rank, "barrier", s.is_ok(), s.is_ok() ? "" : s.to_string());
    }
    // Latencies of the decode-size messages (informative).
    {
        const int64_t cnt = 4096 * 64;  // 64 tokens x d=4096 f32: a decode MoE exchange
        float* d = to_device(std::vector<float>(size_t(cnt), 1.0f));
        float* r = to_device(std::vector<float>(size_t(cnt) * n, 0.0f));
        std::vector<int64_t> sc(n, cnt / n), so(n), rc(n, cnt / n), ro(n);
        for (int p = 0; p < n; ++p) so[p] = ro[p] = p * (cnt / n);
        for (int warm = 0; warm < 3; ++warm) (void)c.all_reduce_sum(d, cnt, CommDtype::kF32);
        (void)c.barrier();
        const int iters = 50;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) (void)c.all_reduce_sum(d, cnt, CommDtype::kF32);
        (void)c.barrier();
        auto t1 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) (void)c.all_to_all_v(d, sc, so, r, rc, ro, CommDtype::kF32);
        (void)c.barrier();
        auto t2 = std::chrono::steady_clock::now();
        const double ar = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
        const double a2a = std::chrono::duration<double, std::micro>(t2 - t1).count() / iters;
        report(rank, "timing 1 MiB f32", true,
               fmt::format("(all_reduce {:.1f} us, all_to_all_v {:.1f} us per call, {} iterations)", ar, a2a, iters));
        cudaFree(d);
        cudaFree(r);
    }
}

}  // namespace

int main(int argc, char** argv) {
    int n = 1;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], "--ranks") == 0) n = std::atoi(argv[i + 1]);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (n < 1 || n > devices) {
        std::printf("FAIL: --ranks %d but %d CUDA device(s)\n", n, devices);
        return 1;
    }
    auto id = nccl_make_id();
    if (!id.is_ok()) {
        std::printf("FAIL: %s\n", id.status().to_string().c_str());
        return 1;
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back(run_rank, *id, r, n);
    for (auto& t : threads) t.join();
    std::printf("%d rank(s), %d check(s) failed\n", n, g_failures);
    return g_failures == 0 ? 0 : 1;
}
