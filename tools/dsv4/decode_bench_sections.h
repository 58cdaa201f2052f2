// What `dsv4 decode-bench`'s driver (cmd_decode_bench_cuda.cpp) shares with its three benchmark
// families: decode attention (decode_bench_attn.cpp), the MoE expert path (decode_bench_moe.cpp)
// and the dense GEMVs (decode_bench_gemv.cpp). Each family runs those of its sections named in
// --sections, appends its points to the run's JSON and its lines to the summary table.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/dsv4/cmd_decode_bench.h"

namespace dsv4::cli {

// One run's shared state, made by run_decode_bench and passed to the families in turn.
struct DecodeBenchRun {
    const DecodeBenchOptions& o;
    cudaStream_t s;  // every launch and graph of the run
    // Kernel copy bandwidth in GB/s (bytes read + written) measured at the start of this run:
    // every point's "% copy" is against it, so points of one run compare on one ceiling.
    double copy = 0;
    // One generator for every input, seeded once and drawn in section order (attn, moe, gemv), so a
    // run's inputs repeat for the same options.
    std::mt19937 g{1234};
    nlohmann::json J{};                // the output file: device info, ceilings, one array per section
    std::vector<std::string> table{};  // summary lines, printed once all sections have run
    // Rewrites o.out with J; called after each group of points, so a run cut off by the device
    // machine's time limit keeps what it measured.
    void save() const;
};

// Sections "attn", "attn_sweep".
void run_attn_sections(DecodeBenchRun& run);
// Sections "moe", "moe_gemm", "moe_sweep".
void run_moe_sections(DecodeBenchRun& run);
// Sections "gemv_sweep", "gemv".
void run_gemv_sections(DecodeBenchRun& run);

namespace dbench {
// Mean, min and max of a sweep's per-round medians (a JSON array of numbers), for its summary line.
struct RoundSpread {
    double mean = 0, lo = 0, hi = 0;
};
inline RoundSpread round_spread(const nlohmann::json& values) {
    RoundSpread r{0, 1e30, 0};
    for (const auto& x : values) {
        r.lo = std::min(r.lo, x.get<double>());
        r.hi = std::max(r.hi, x.get<double>());
        r.mean += x.get<double>();
    }
    r.mean /= double(values.size());
    return r;
}

// Whether the list v (--sections) holds s.
inline bool has(const std::vector<std::string>& v, const char* s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}
}  // namespace dbench

}  // namespace dsv4::cli
