// Shared pieces of `dsv4 decode-bench` (cmd_decode_bench_cuda.cpp, decode_bench_*.cpp): device
// buffers, random input patterns, CUDA-graph timing, and the ceilings every point is reported
// against (copy bandwidth, cuBLAS bf16 GEMM peak). Benchmark tool code: failures exit the process
// with a message.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsv4::cli::dbench {

#define BENCH_CHECK(x)                                                                              \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(3);                                                                           \
        }                                                                                           \
    } while (0)

// Exits with what failed when s is an error.
void check_status(const Status& s, const char* what);

// Device allocation freed at scope end.
struct Buf {
    void* p = nullptr;
    size_t bytes = 0;
    explicit Buf(size_t n = 0) : bytes(n) {
        if (n) BENCH_CHECK(cudaMalloc(&p, n));
    }
    ~Buf() { cudaFree(p); }
    Buf(Buf&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
    Buf(const Buf&) = delete;
    template <typename T>
    T* as() const {
        return static_cast<T*>(p);
    }
};

// Fills `bytes` of device memory by repeating a host pattern (random, valid values).
void fill_pattern(void* dst, size_t bytes, const std::vector<uint8_t>& pat);
// n random bytes in [lo, hi] (no_fp8_nan: never the e4m3 NaN code).
std::vector<uint8_t> pat_bytes(size_t n, std::mt19937& g, int lo, int hi, bool no_fp8_nan = false);
// n_elems bf16 values ~ N(0, sd).
std::vector<uint8_t> pat_bf16(size_t n_elems, std::mt19937& g, float sd);
// FP8 584-byte KV rows: random codes, scales near 2^-6, bf16 RoPE dims.
std::vector<uint8_t> pat_fp8_rows(int rows, std::mt19937& g);

struct Timing {
    double med_us = 0, p10_us = 0, p90_us = 0;
};
// Captures n_rot enqueues into one graph, replays it `reps` times, returns per-enqueue time.
Timing time_graph(cudaStream_t s, int n_rot, int reps, const std::function<void(int)>& enqueue);
// JSON of a timed point moving `bytes`: times, GB/s and % of copy_gbs.
nlohmann::json point(const Timing& t, double bytes, double copy_gbs);
// Copy bandwidth in GB/s (read + write) of a 2 GiB buffer: kernel copy (the ceiling reported
// against) and cudaMemcpyAsync D2D (copy engines) for reference.
std::pair<double, double> measure_copy(cudaStream_t s);
// cuBLAS bf16 GEMM peak in TFLOP/s (8192^3); 0 when cuBLAS cannot start.
double measure_gemm(cudaStream_t s);

}  // namespace dsv4::cli::dbench
