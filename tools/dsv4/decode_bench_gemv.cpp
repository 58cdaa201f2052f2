// `dsv4 decode-bench`, dense GEMVs: the Flash linears' shapes at each batch with the heuristic's
// variant ("gemv"), and the A/B sweep of every legal variant, optionally against the pre-K-chunk
// heuristic ("gemv_sweep").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda/gemm/dense_gemv.h"
#include "tools/dsv4/decode_bench_sections.h"
#include "tools/dsv4/decode_bench_util.h"

namespace dsv4::cli {
namespace {

using nlohmann::json;
using namespace dsv4::cuda;
using namespace dbench;

// ---------------------------------------------------------------- dense GEMV
struct GemvShape {
    const char* name;
    WeightFormat fmt;
    int N, K, groups;
};
const GemvShape kGemvShapes[] = {
    {"wq_a", WeightFormat::kFp8Block, 1024, 4096, 1},      {"wq_b", WeightFormat::kFp8Block, 32768, 1024, 1},
    {"wkv", WeightFormat::kFp8Block, 512, 4096, 1},        {"wo_a", WeightFormat::kFp8Block, 1024, 4096, 8},
    {"wo_b", WeightFormat::kFp8Block, 4096, 8192, 1},      {"shared_w13", WeightFormat::kFp8Block, 4096, 4096, 1},
    {"shared_w2", WeightFormat::kFp8Block, 4096, 2048, 1}, {"idx_wq_b", WeightFormat::kFp8Block, 8192, 1024, 1},
    {"router", WeightFormat::kBf16, 256, 4096, 1},         {"csa_compressor", WeightFormat::kBf16, 2048, 4096, 1},
    {"lm_head", WeightFormat::kBf16, 129280, 4096, 1},     {"shared_w1", WeightFormat::kFp8Block, 2048, 4096, 1},
};

// Weights (NR rotated copies, to defeat L2), scales, x and y for up to Bmax tokens of one shape;
// x is f32 (the runtime's form) when x_f32, else bf16.
struct GemvData {
    std::vector<Buf> ws, ss, xs, ys;
    double wbytes = 0, sbytes = 0;
    bool x_f32 = false;
};
GemvData make_gemv_data(const GemvShape& sh, int Bmax, bool x_f32, std::mt19937& g) {
    GemvData d;
    const int64_t rows = int64_t(sh.groups) * sh.N;
    d.wbytes = double(rows) * sh.K * (sh.fmt == WeightFormat::kBf16 ? 2 : 1);
    d.sbytes = sh.fmt == WeightFormat::kFp8Block ? double((rows + 127) / 128) * (sh.K / 128) : 0.0;
    d.x_f32 = x_f32;
    const int NR = int(std::clamp(std::ceil(256e6 / d.wbytes), 1.0, 8.0));
    const auto pw = sh.fmt == WeightFormat::kBf16 ? pat_bf16(size_t(8) << 20, g, 0.05f)
                                                  : pat_bytes(size_t(16) << 20, g, 0, 255, true);
    const auto ps = pat_bytes(1 << 16, g, 117, 121);
    const size_t xn = size_t(Bmax) * sh.groups * sh.K;
    std::vector<uint8_t> px;
    if (x_f32) {
        std::normal_distribution<float> nd(0.0f, 1.0f);
        px.resize(std::min<size_t>(xn, size_t(1) << 20) * 4);
        for (size_t i = 0; i < px.size() / 4; ++i) {
            const float v = nd(g);
            std::memcpy(&px[4 * i], &v, 4);
        }
    } else {
        px = pat_bf16(xn, g, 1.0f);
    }
    for (int r = 0; r < NR; ++r) {
        d.ws.emplace_back(size_t(d.wbytes));
        fill_pattern(d.ws.back().p, d.ws.back().bytes, pw);
        d.ss.emplace_back(std::max<size_t>(size_t(d.sbytes), 1));
        fill_pattern(d.ss.back().p, d.ss.back().bytes, ps);
        d.xs.emplace_back(xn * (x_f32 ? 4 : 2));
        fill_pattern(d.xs.back().p, d.xs.back().bytes, px);
        d.ys.emplace_back(size_t(Bmax) * rows * 2);
    }
    return d;
}

json bench_gemv_on(const GemvData& d, const GemvShape& sh, int B, int variant, int reps, double copy_gbs,
                   cudaStream_t s) {
    const int64_t rows = int64_t(sh.groups) * sh.N;
    DenseGemvArgs a;
    a.format = sh.fmt;
    a.x_f32 = d.x_f32;
    a.n_tokens = B;
    a.N = sh.N;
    a.K = sh.K;
    a.groups = sh.groups;
    a.variant = variant;
    const Timing t = time_graph(s, int(d.ws.size()), reps, [&](int r) {
        DenseGemvArgs x = a;
        x.x = d.xs[r].p;
        x.w = d.ws[r].p;
        x.w_scale = d.ss[r].as<uint8_t>();
        x.y = d.ys[r].p;
        check_status(dense_gemv_launch(x, s), sh.name);
    });
    const double bytes = d.wbytes + d.sbytes + double(B) * sh.groups * sh.K * (d.x_f32 ? 4 : 2) + double(B) * rows * 2;
    json j = point(t, bytes, copy_gbs);
    j["name"] = sh.name;
    j["batch"] = B;
    j["x_f32"] = d.x_f32;
    j["tflops"] = 2.0 * B * rows * sh.K / (t.med_us * 1e-6) / 1e12;
    j["variant"] = dense_gemv_variant_name(dense_gemv_select_variant(a));
    return j;
}

json bench_gemv(const GemvShape& sh, int B, int variant, int reps, double copy_gbs, cudaStream_t s, std::mt19937& g) {
    return bench_gemv_on(make_gemv_data(sh, B, false, g), sh, B, variant, reps, copy_gbs, s);
}

// The pre-K-chunk heuristic (ledger E5), for the "old" column of the gemv_sweep: CUDA cores for
// n_tokens <= 4 and for matrices under 4096 rows, else the whole-K tensor-core kernel with 16
// tokens per pass (8 when 16 does not fit shared memory or n_tokens <= 8).
int old_gemv_default(const DenseGemvArgs& a) {
    auto find = [&](const std::string& name) {
        for (int i = 0; i < dense_gemv_variant_count(); ++i)
            if (dense_gemv_variant_name(i) == name && dense_gemv_legal(i, a)) return i;
        return -1;
    };
    int v = -1;
    if (a.n_tokens <= 4)
        v = find(a.n_tokens <= 1 ? "dense_gemv.bt1_bh2_w8_s4.sm90" : "dense_gemv.bt4_bh2_w8_s4.sm90");
    else if (a.groups * a.N >= 4096) {
        if (a.n_tokens > 8) v = find("dense_gemv_mma.bt16_bh16_w4_s2.sm90");
        if (v < 0) v = find("dense_gemv_mma.bt8_bh16_w4_s2.sm90");
    }
    if (v < 0) v = find("dense_gemv.bt8_bh2_w8_s2.sm90");
    return v;
}

}  // namespace

void run_gemv_sections(DecodeBenchRun& run) {
    // Short local names for the run's pieces, as the sections below use them.
    const DecodeBenchOptions& o = run.o;
    const cudaStream_t s = run.s;
    const double copy = run.copy;
    std::mt19937& g = run.g;
    json& J = run.J;
    std::vector<std::string>& table = run.table;
    auto save = [&run] { run.save(); };
    if (has(o.sections, "gemv_sweep")) {
        // Default: wq_b, wo_b, wkv at batches 1, 8, 32, 128 over every legal variant, bf16 x.
        // --gemv-sweep-shapes=<names> takes those shapes at --batches with f32 x (the
        // runtime's form) and the columns "old" (pre-K-chunk heuristic), "new" (the heuristic
        // now) and every legal variant named in --gemv-sweep-variants (all when empty).
        const std::string shape_list = o.gemv_sweep_shapes, only = "," + o.gemv_sweep_variants + ",";
        std::vector<GemvShape> shapes;
        std::vector<int> batches{1, 8, 32, 128};
        if (shape_list.empty()) {
            shapes = {kGemvShapes[1], kGemvShapes[4], kGemvShapes[2]};  // wq_b, wo_b, wkv
        } else {
            std::stringstream ss(shape_list);  // in the order given
            for (std::string name; std::getline(ss, name, ',');)
                for (const GemvShape& sh : kGemvShapes)
                    if (name == sh.name) shapes.push_back(sh);
            batches = o.batches;
        }
        // --gemv-sweep-x-bf16 gives the named shapes bf16 x instead (the form a caller that
        // writes bf16 activations would pass); the "old" / "new" columns are then the heuristics' picks for bf16 x.
        const bool x_f32 = !shape_list.empty() && !o.gemv_sweep_x_bf16;
        for (const GemvShape& sh : shapes) {
            const GemvData data = make_gemv_data(sh, *std::max_element(batches.begin(), batches.end()), x_f32, g);
            for (int B : batches) {
                DenseGemvArgs probe;
                probe.format = sh.fmt;
                probe.x_f32 = x_f32;
                probe.N = sh.N;
                probe.K = sh.K;
                probe.groups = sh.groups;
                probe.n_tokens = B;
                std::vector<std::pair<std::string, int>> cols;
                if (!shape_list.empty()) {
                    cols.push_back({"old", old_gemv_default(probe)});
                    cols.push_back({"new", dense_gemv_select_variant(probe)});
                }
                for (int v = 0; v < dense_gemv_variant_count(); ++v) {
                    const std::string name = dense_gemv_variant_name(v);
                    if (!dense_gemv_legal(v, probe)) continue;
                    if (only != ",," && only.find("," + name + ",") == std::string::npos) continue;
                    cols.push_back({name.substr(11), v});
                }
                json pt;
                const int n = int(cols.size());
                for (int r = 0; r < o.rounds; ++r)
                    for (int i = 0; i < n; ++i) {
                        const auto& [name, v] = cols[(r % 2) ? n - 1 - i : i];
                        if (v < 0) continue;
                        json j = bench_gemv_on(data, sh, B, v, o.reps, copy, s);
                        pt[name]["median_us"].push_back(j["median_us"]);
                        pt[name]["pct_copy"].push_back(j["pct_copy"]);
                        pt[name]["variant"] = dense_gemv_variant_name(v);
                    }
                J["gemv_sweep"].push_back(json{{"name", sh.name}, {"batch", B}, {"x_f32", x_f32}, {"configs", pt}});
                std::string line = std::string("sweep gemv ") + sh.name + " B=" + std::to_string(B) + ":";
                for (const auto& [name, v] : cols) {
                    if (!pt.contains(name)) continue;
                    const json& m = pt[name]["median_us"];
                    const RoundSpread r = round_spread(m);
                    char b[200];
                    if (name == "old" || name == "new")
                        std::snprintf(b, sizeof b, " %s(%s)=%.1f[%.1f-%.1f]", name.c_str(),
                                      dense_gemv_variant_name(v).substr(11).c_str(), r.mean, r.lo, r.hi);
                    else
                        std::snprintf(b, sizeof b, " %s=%.1f[%.1f-%.1f]", name.c_str(), r.mean, r.lo, r.hi);
                    line += b;
                }
                std::printf("%s\n", line.c_str());  // as it comes: a cut-off run keeps its lines
                std::fflush(stdout);
                table.push_back(line);
                save();
            }
        }
    }
    if (has(o.sections, "gemv")) {
        for (const GemvShape& sh : kGemvShapes)
            for (int B : o.batches) {
                json j = bench_gemv(sh, B, -1, o.reps, copy, s, g);
                J["gemv"].push_back(j);
                char line[256];
                std::snprintf(line, sizeof line, "gemv %-14s B=%-3d %8.1f us %6.0f GB/s %5.1f%% copy %5.1f TFLOP/s",
                              sh.name, B, j["median_us"].get<double>(), j["gb_s"].get<double>(),
                              j["pct_copy"].get<double>(), j["tflops"].get<double>());
                table.push_back(line);
            }
        save();
    }
}

}  // namespace dsv4::cli
