// decode-bench's shared pieces (decode_bench_util.h).
#include "tools/dsv4/decode_bench_util.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cuda/attention/sparse_decode.h"
#include "kernels/cuda/gemm/stream_copy.h"

namespace dsv4::cli::dbench {

using cuda::kKvFp8RowBytes;
using cuda::stream_copy;

void check_status(const Status& s, const char* what) {
    if (!s.is_ok()) {
        std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
        std::exit(3);
    }
}

void fill_pattern(void* dst, size_t bytes, const std::vector<uint8_t>& pat) {
    size_t off = 0;
    while (off < bytes) {
        const size_t n = std::min(pat.size(), bytes - off);
        BENCH_CHECK(cudaMemcpy(static_cast<uint8_t*>(dst) + off, pat.data(), n, cudaMemcpyHostToDevice));
        off += n;
    }
}
std::vector<uint8_t> pat_bytes(size_t n, std::mt19937& g, int lo, int hi, bool no_fp8_nan) {
    std::vector<uint8_t> v(n);
    std::uniform_int_distribution<int> u(lo, hi);
    for (auto& b : v) {
        b = uint8_t(u(g));
        if (no_fp8_nan && (b & 0x7f) == 0x7f) b &= 0xfe;
    }
    return v;
}
std::vector<uint8_t> pat_bf16(size_t n_elems, std::mt19937& g, float sd) {
    std::vector<uint8_t> v(n_elems * 2);
    std::normal_distribution<float> d(0.f, sd);
    for (size_t i = 0; i < n_elems; ++i) {
        const uint16_t b = f32_to_bf16(d(g));
        std::memcpy(&v[2 * i], &b, 2);
    }
    return v;
}
std::vector<uint8_t> pat_fp8_rows(int rows, std::mt19937& g) {
    std::vector<uint8_t> v(size_t(rows) * kKvFp8RowBytes);
    std::uniform_int_distribution<int> u(0, 255), s(119, 123);
    std::normal_distribution<float> d(0.f, 1.f);
    for (int r = 0; r < rows; ++r) {
        uint8_t* p = &v[size_t(r) * kKvFp8RowBytes];
        for (int i = 0; i < 448; ++i) {
            uint8_t b = uint8_t(u(g));
            if ((b & 0x7f) == 0x7f) b &= 0xfe;
            p[i] = b;
        }
        for (int i = 0; i < 64; ++i) {
            const uint16_t b = f32_to_bf16(d(g));
            std::memcpy(p + 448 + 2 * i, &b, 2);
        }
        for (int i = 0; i < 7; ++i) p[576 + i] = uint8_t(s(g));
        p[583] = 0;
    }
    return v;
}

Timing time_graph(cudaStream_t s, int n_rot, int reps, const std::function<void(int)>& enqueue) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BENCH_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < n_rot; ++i) enqueue(i);
    BENCH_CHECK(cudaStreamEndCapture(s, &graph));
    BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    BENCH_CHECK(cudaEventCreate(&e0));
    BENCH_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) BENCH_CHECK(cudaGraphLaunch(exec, s));
    BENCH_CHECK(cudaStreamSynchronize(s));
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        BENCH_CHECK(cudaEventRecord(e0, s));
        BENCH_CHECK(cudaGraphLaunch(exec, s));
        BENCH_CHECK(cudaEventRecord(e1, s));
        BENCH_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(1000.0 * ms / n_rot);
    }
    std::sort(t.begin(), t.end());
    Timing out{t[t.size() / 2], t[t.size() / 10], t[std::min(t.size() - 1, t.size() * 9 / 10)]};
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return out;
}

nlohmann::json point(const Timing& t, double bytes, double copy_gbs) {
    const double gbs = bytes / (t.med_us * 1e-6) / 1e9;
    return nlohmann::json{{"median_us", t.med_us}, {"p10_us", t.p10_us}, {"p90_us", t.p90_us},
                          {"bytes", bytes},        {"gb_s", gbs},        {"pct_copy", 100.0 * gbs / copy_gbs}};
}

// ---------------------------------------------------------------- ceilings
// Copy bandwidth (read + write) of a 2 GiB buffer: kernel copy (the ceiling we report against)
// and cudaMemcpyAsync D2D (copy engines) for reference.
std::pair<double, double> measure_copy(cudaStream_t s) {
    const size_t n = size_t(2) << 30;
    Buf a(n), b(n);
    std::mt19937 g(1);
    fill_pattern(a.p, n, pat_bytes(size_t(64) << 20, g, 0, 255));
    const Timing tk = time_graph(s, 1, 20, [&](int) { BENCH_CHECK(stream_copy(b.p, a.p, n, s)); });
    const Timing tm =
        time_graph(s, 1, 20, [&](int) { BENCH_CHECK(cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice, s)); });
    return {2.0 * n / (tk.med_us * 1e-6) / 1e9, 2.0 * n / (tm.med_us * 1e-6) / 1e9};
}

double measure_gemm(cudaStream_t s) {
    const int n = 8192;
    Buf a(size_t(n) * n * 2), b(size_t(n) * n * 2), c(size_t(n) * n * 2);
    std::mt19937 g(2);
    const auto pat = pat_bf16(size_t(16) << 20, g, 1.0f);
    fill_pattern(a.p, a.bytes, pat);
    fill_pattern(b.p, b.bytes, pat);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
    cublasSetStream(h, s);
    const float alpha = 1, beta = 0;
    auto run = [&](int) {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.p, CUDA_R_16BF, n, b.p, CUDA_R_16BF, n, &beta, c.p,
                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    for (int i = 0; i < 3; ++i) run(0);
    BENCH_CHECK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<double> t;
    for (int r = 0; r < 10; ++r) {
        cudaEventRecord(e0, s);
        run(0);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    cublasDestroy(h);
    return 2.0 * n * n * double(n) / (t[t.size() / 2] * 1e-3) / 1e12;
}

}  // namespace dsv4::cli::dbench
