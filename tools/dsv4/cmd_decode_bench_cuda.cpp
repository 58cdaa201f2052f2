// `dsv4 decode-bench` on the GPU: Flash-shape kernel benchmarks with honest ceilings.
// Every point: a CUDA graph of n_rot launches over rotated input sets (together > L2), replayed
// `reps` times, timed with events; median and p10/p90 per launch; bytes moved by the model of
// perf-method.md; GB/s and % of the device-to-device copy bandwidth measured at the start of the
// same run (bytes read + written), plus the cuBLAS bf16 GEMM peak. Inputs are random, never zeros.
// The benchmark families are in decode_bench_attn.cpp, decode_bench_moe.cpp and
// decode_bench_gemv.cpp; this file runs them in that order and prints the summary.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/cuda/attention/sparse_decode.h"
#include "kernels/cuda/gemm/dense_gemv.h"
#include "kernels/cuda/moe/moe.h"
#include "tools/dsv4/cmd_decode_bench.h"
#include "tools/dsv4/decode_bench_sections.h"
#include "tools/dsv4/decode_bench_util.h"

namespace dsv4::cli {
namespace {

using nlohmann::json;
using namespace dsv4::cuda;
using namespace dbench;

std::string env_or(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

}  // namespace

void DecodeBenchRun::save() const {
    std::ofstream f(o.out);
    f << J.dump(1) << "\n";
}

int run_decode_bench(const DecodeBenchOptions& o) {
    cudaStream_t s;
    BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    DecodeBenchRun run{o, s};
    json& J = run.J;
    J["gpu"] = prop.name;
    J["sm_count"] = prop.multiProcessorCount;
    J["l2_bytes"] = prop.l2CacheSize;
    J["cuda_driver"] = driver;
    J["cuda_runtime"] = runtime;
    J["git_sha"] = env_or("DSV4_GIT_SHA");
    std::printf("decode-bench on %s (%d SMs, L2 %d MB)\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    std::printf(
        "variants (the runner forces one with --option attn_variant= / moe_variant= / gemv_variant= / "
        "moe_gemm_variant=):\n");
    for (int i = 0; i < sparse_decode_variant_count(); ++i)
        std::printf("  %s %s\n", sparse_decode_variant_name(i).c_str(),
                    sparse_decode_variant_params(i).to_string().c_str());
    for (int i = 0; i < moe_expert_variant_count(); ++i)
        std::printf("  %s %s\n", moe_expert_variant_name(i).c_str(), moe_expert_variant_params(i).to_string().c_str());
    for (int i = 0; i < dense_gemv_variant_count(); ++i)
        std::printf("  %s %s\n", dense_gemv_variant_name(i).c_str(), dense_gemv_variant_params(i).to_string().c_str());
    for (int i = 0; i < moe_grouped_variant_count(); ++i)  // --option moe_gemm_variant=
        std::printf("  %s\n", moe_grouped_variant_name(i).c_str());

    const auto [copy, copy_memcpy] = measure_copy(s);
    run.copy = copy;
    const double gemm = measure_gemm(s);
    J["copy_gb_s"] = copy;
    J["copy_memcpy_d2d_gb_s"] = copy_memcpy;
    J["bf16_gemm_tflops"] = gemm;
    std::printf("copy bandwidth %.0f GB/s (kernel, read+write; cudaMemcpy D2D %.0f GB/s), bf16 GEMM %.0f TFLOP/s\n",
                copy, copy_memcpy, gemm);
    std::fflush(stdout);
    run_attn_sections(run);
    run_moe_sections(run);
    run_gemv_sections(run);
    run.save();
    std::printf("\n== summary (median per launch; %% of copy bandwidth %.0f GB/s measured in this run) ==\n", copy);
    for (const auto& l : run.table) std::printf("%s\n", l.c_str());
    cudaStreamDestroy(s);
    return 0;
}

}  // namespace dsv4::cli
