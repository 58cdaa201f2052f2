// `dsv4 decode-bench` on the GPU: Flash-shape kernel benchmarks with honest ceilings.
// Every point: a CUDA graph of n_rot launches over rotated input sets (together > L2), replayed
// `reps` times, timed with events; median and p10/p90 per launch; bytes moved by the model of
// perf-method.md; GB/s and % of the device-to-device copy bandwidth measured at the start of the
// same run (bytes read + written), plus the cuBLAS bf16 GEMM peak. Inputs are random, never zeros.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "kernels/cuda/attention/sparse_decode.h"
#include "kernels/cuda/gemm/dense_gemv.h"
#include "kernels/cuda/gemm/stream_copy.h"
#include "kernels/cuda/moe/moe.h"
#include "tools/dsv4/cmd_decode_bench.h"
#include "tools/dsv4/decode_bench_util.h"

namespace dsv4::cli {
namespace {

using nlohmann::json;
using namespace dsv4::cuda;
using namespace dbench;

// ---------------------------------------------------------------- decode attention
struct KvPool {
    KvFormat fmt;
    Buf pool;
    int64_t rows = 0, elems_per_row = 0, row_bytes = 0;
};

KvPool make_pool(KvFormat fmt, size_t bytes, std::mt19937& g) {
    KvPool p{fmt, Buf(bytes)};
    p.row_bytes = fmt == KvFormat::kBf16 ? 1024 : kKvFp8RowBytes;
    p.elems_per_row = fmt == KvFormat::kBf16 ? 512 : kKvFp8RowBytes;
    p.rows = int64_t(bytes / p.row_bytes);
    if (fmt == KvFormat::kBf16)
        fill_pattern(p.pool.p, bytes, pat_bf16(size_t(32) << 20, g, 1.0f));
    else
        fill_pattern(p.pool.p, bytes, pat_fp8_rows(64 * 1024, g));  // pattern length is a whole row count
    return p;
}

int attn_rows(const std::string& kind, int ctx) {
    if (kind == "csa") return 128 + std::min(512, ctx / 4);
    if (kind == "hca") return 128 + ctx / 128;
    return 128;  // swa
}

struct AttnPoint {
    json j;
    double us = 0;
};

AttnPoint bench_attn(const KvPool& pool, int B, int rows, int variant, int target, int reps, double copy_gbs,
                     cudaStream_t s, uint32_t seed) {
    const int NR = 4, H = 64, D = 512;
    std::mt19937_64 g(seed);
    std::uniform_int_distribution<int64_t> pick(0, pool.rows - 1);
    std::vector<Buf> offs, starts, qs;
    for (int r = 0; r < NR; ++r) {
        std::vector<int64_t> o(size_t(B) * rows);
        for (auto& x : o) x = pick(g) * pool.elems_per_row;
        std::vector<int32_t> st(B + 1);
        for (int b = 0; b <= B; ++b) st[b] = b * rows;
        offs.emplace_back(o.size() * 8);
        starts.emplace_back(st.size() * 4);
        qs.emplace_back(size_t(B) * H * D * 2);
        BENCH_CHECK(cudaMemcpy(offs.back().p, o.data(), o.size() * 8, cudaMemcpyHostToDevice));
        BENCH_CHECK(cudaMemcpy(starts.back().p, st.data(), st.size() * 4, cudaMemcpyHostToDevice));
        std::mt19937 gq(uint32_t(seed + r));
        fill_pattern(qs.back().p, qs.back().bytes, pat_bf16(std::min<size_t>(size_t(B) * H * D, 1 << 20), gq, 1.0f));
    }
    std::vector<float> sink_h(H, 0.5f);
    Buf sink(H * 4), out(size_t(B) * H * D * 2);
    BENCH_CHECK(cudaMemcpy(sink.p, sink_h.data(), H * 4, cudaMemcpyHostToDevice));
    SparseDecodeArgs a;
    a.kv_pool = pool.pool.p;
    a.sink = sink.as<float>();
    a.out = out.p;
    a.format = pool.fmt;
    a.batch = B;
    a.n_heads = H;
    a.max_rows = rows;
    a.scale = 1.0f / std::sqrt(512.0f);
    a.target_ctas = target;
    a.variant = variant;
    const int splits = sparse_decode_splits_for(a);
    Buf ws(sparse_decode_workspace_floats(B, H, splits) * 4);
    a.workspace = ws.as<float>();
    const Timing t = time_graph(s, NR, reps, [&](int r) {
        SparseDecodeArgs x = a;
        x.q = qs[r].p;
        x.row_offsets = offs[r].as<int64_t>();
        x.row_start = starts[r].as<int32_t>();
        check_status(sparse_decode_launch(x, s), "sparse_decode");
    });
    const double kv = double(B) * rows * pool.row_bytes;
    const double qo = 2.0 * B * H * D * 2;
    const double wsb = splits > 1 ? 2.0 * B * splits * H * (D + 2) * 4 : 0.0;
    AttnPoint p;
    p.j = point(t, kv + qo + wsb, copy_gbs);
    p.j["bytes_model"] = kv + qo;
    p.j["gb_s_model"] = (kv + qo) / (t.med_us * 1e-6) / 1e9;
    p.j["pct_copy_model"] = 100.0 * p.j["gb_s_model"].get<double>() / copy_gbs;
    p.j["splits"] = splits;
    p.j["rows"] = rows;
    p.j["variant"] = sparse_decode_variant_name(sparse_decode_select_variant(a));
    p.j["tflops"] = 4.0 * B * H * D * double(rows) / (t.med_us * 1e-6) / 1e12;
    p.us = t.med_us;
    return p;
}

// ---------------------------------------------------------------- MoE
constexpr int kE = 256, kTopK = 6, kHidden = 4096, kInter = 2048;
constexpr double kExpertBytes = 2.0 * kInter * kHidden / 2 + 2.0 * kInter * kHidden / 32 +
                                double(kHidden) * kInter / 2 + double(kHidden) * kInter / 32;

struct MoeLayer {
    Buf w1, s1, w3, s3, w2, s2;
};
MoeLayer make_moe_layer(std::mt19937& g) {
    const size_t wb = size_t(kE) * kInter * kHidden / 2, sb = size_t(kE) * kInter * kHidden / 32;
    MoeLayer L{Buf(wb), Buf(sb), Buf(wb), Buf(sb), Buf(wb), Buf(sb)};
    const auto pw = pat_bytes(size_t(64) << 20, g, 0, 255), ps = pat_bytes(size_t(8) << 20, g, 118, 121);
    for (Buf* b : {&L.w1, &L.w3, &L.w2}) fill_pattern(b->p, b->bytes, pw);
    for (Buf* b : {&L.s1, &L.s3, &L.s2}) fill_pattern(b->p, b->bytes, ps);
    return L;
}

struct MoeSet {
    Buf x, logits, bias, ids, w, cnt, off, ptok, pdst, pw, h, y, shared, out, act, nact;
    double active = 0;
};

struct MoePoint {
    json j;
    double us = 0;
};

// mode 0: full routed path (route+permute fused where small, gate-up, down, combine); 1: expert
// GEMVs only; 2: full routed path with route and permute as two kernels (the pre-moe-b1 path).
// gemm_variant >= 0: the expert GEMMs run as that grouped GEMM variant (moe_grouped_launch) instead
// of the GEMV `variant`.
MoePoint bench_moe(const std::vector<MoeLayer>& layers, int B, int variant, bool skewed, int mode, int reps,
                   double copy_gbs, cudaStream_t s, uint32_t seed, int gemm_variant = -1) {
    const int NR = 4;
    std::vector<MoeSet> sets;
    std::mt19937 g(seed);
    for (int r = 0; r < NR; ++r) {
        const size_t rows = size_t(B) * kTopK;
        MoeSet m{Buf(size_t(B) * kHidden * 2),
                 Buf(size_t(B) * kE * 4),
                 Buf(kE * 4),
                 Buf(rows * 4),
                 Buf(rows * 4),
                 Buf(kE * 4),
                 Buf((kE + 1) * 4),
                 Buf(rows * 4),
                 Buf(rows * 4),
                 Buf(rows * 4),
                 Buf(rows * kInter * 2),
                 Buf(rows * kHidden * 4),
                 Buf(size_t(B) * kHidden * 2),
                 Buf(size_t(B) * kHidden * 2),
                 Buf(kE * 4),
                 Buf(4)};
        fill_pattern(m.x.p, m.x.bytes, pat_bf16(size_t(B) * kHidden, g, 1.0f));
        fill_pattern(m.shared.p, m.shared.bytes, pat_bf16(size_t(B) * kHidden, g, 0.1f));
        std::normal_distribution<float> nd(0.f, 1.f);
        std::vector<float> lg(size_t(B) * kE), bias(kE);
        for (size_t i = 0; i < lg.size(); ++i) lg[i] = nd(g) + ((skewed && (i % kE) < 32) ? 2.0f : 0.0f);
        for (auto& b : bias) b = 0.01f * nd(g);
        BENCH_CHECK(cudaMemcpy(m.logits.p, lg.data(), lg.size() * 4, cudaMemcpyHostToDevice));
        BENCH_CHECK(cudaMemcpy(m.bias.p, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice));
        sets.push_back(std::move(m));
    }
    Buf tiles(size_t(moe_grouped_max_tiles(B * kTopK, kE) + 2) * 4);
    auto route = [&](MoeSet& m) {
        MoeRouteArgs ra;
        ra.logits = m.logits.as<float>();
        ra.bias = m.bias.as<float>();
        ra.topk_ids = m.ids.as<int32_t>();
        ra.topk_w = m.w.as<float>();
        ra.n_tokens = B;
        MoePermuteArgs pa;
        pa.topk_ids = m.ids.as<int32_t>();
        pa.topk_w = m.w.as<float>();
        pa.expert_count = m.cnt.as<int32_t>();
        pa.expert_offset = m.off.as<int32_t>();
        pa.perm_token = m.ptok.as<int32_t>();
        pa.perm_dst = m.pdst.as<int32_t>();
        pa.perm_w = m.pw.as<float>();
        pa.active_experts = m.act.as<int32_t>();
        pa.n_active = m.nact.as<int32_t>();
        pa.n_tokens = B;
        if (mode == 2) {
            check_status(moe_route_launch(ra, s), "moe_route");
            check_status(moe_permute_launch(pa, s), "moe_permute");
        } else {
            check_status(moe_route_permute_launch(ra, pa, s), "moe_route_permute");
        }
    };
    auto experts = [&](MoeSet& m, const MoeLayer& L) {
        MoeExpertArgs gu;
        gu.mode = MoeExpertMode::kGateUp;
        gu.x = m.x.p;
        gu.w1 = L.w1.as<uint8_t>();
        gu.w1_scale = L.s1.as<uint8_t>();
        gu.w3 = L.w3.as<uint8_t>();
        gu.w3_scale = L.s3.as<uint8_t>();
        gu.expert_count = m.cnt.as<int32_t>();
        gu.expert_offset = m.off.as<int32_t>();
        gu.perm_token = m.ptok.as<int32_t>();
        gu.perm_dst = m.pdst.as<int32_t>();
        gu.perm_w = m.pw.as<float>();
        gu.active_experts = m.act.as<int32_t>();
        gu.n_active = m.nact.as<int32_t>();
        gu.max_active = std::min(kE, B * kTopK);
        gu.n_rows = B * kTopK;
        gu.out = m.h.p;
        gu.N = kInter;
        gu.K = kHidden;
        gu.variant = variant;
        // The weights are uniform random bytes, so they are equally valid codes in either layout
        // and the kernels' work does not depend on them: a forced variant gets its own layout.
        gu.layout = variant >= 0 ? moe_expert_variant_layout(variant) : MoeWeightLayout::kCheckpoint;
        const bool grouped = gemm_variant >= 0;
        if (grouped) {
            gu.variant = gemm_variant;
            gu.layout = moe_grouped_variant_layout(gemm_variant);
            gu.x_kperm = moe_grouped_variant_is_wgmma(gemm_variant);  // random x: any layout times the same
            gu.n_tiles = tiles.as<int32_t>();
            gu.tile_list = gu.n_tiles + 2;
        }
        auto launch = [&](const MoeExpertArgs& a) {
            return grouped ? moe_grouped_launch(a, s) : moe_expert_launch(a, s);
        };
        check_status(launch(gu), "moe gate-up");
        MoeExpertArgs dn = gu;
        dn.mode = MoeExpertMode::kDown;
        dn.x = m.h.p;
        dn.w1 = L.w2.as<uint8_t>();
        dn.w1_scale = L.s2.as<uint8_t>();
        dn.w3 = nullptr;
        dn.w3_scale = nullptr;
        dn.out = m.y.p;
        dn.N = kHidden;
        dn.K = kInter;
        check_status(launch(dn), "moe down");
    };
    auto combine = [&](MoeSet& m) {
        MoeCombineArgs ca;
        ca.y = m.y.as<float>();
        ca.shared = m.shared.p;
        ca.out = m.out.p;
        ca.n_tokens = B;
        check_status(moe_combine_launch(ca, s), "moe_combine");
    };
    // Routing once outside the graph to count active experts (and prime the workspaces).
    for (auto& m : sets) {
        route(m);
        BENCH_CHECK(cudaStreamSynchronize(s));
        std::vector<int32_t> cnt(kE);
        BENCH_CHECK(cudaMemcpy(cnt.data(), m.cnt.p, kE * 4, cudaMemcpyDeviceToHost));
        m.active = double(std::count_if(cnt.begin(), cnt.end(), [](int c) { return c > 0; }));
    }
    const Timing t = time_graph(s, NR, reps, [&](int r) {
        if (mode != 1) route(sets[r]);
        experts(sets[r], layers[r % layers.size()]);
        if (mode != 1) combine(sets[r]);
    });
    double active = 0;
    for (auto& m : sets) active += m.active / NR;
    const double rows = double(B) * kTopK;
    const double act = double(B) * kHidden * 2 + rows * kInter * 2 * 2 + rows * kHidden * 4 * (mode != 1 ? 2 : 1) +
                       (mode != 1 ? double(B) * kHidden * 2 * 2 : 0.0);
    const double bytes = active * kExpertBytes + act;
    MoePoint p;
    p.j = point(t, bytes, copy_gbs);
    p.j["active_experts"] = active;
    p.j["f_B_model"] = 1.0 - std::pow(1.0 - 6.0 / 256.0, B);
    p.j["tflops"] = rows * 2.0 * 3.0 * kHidden * kInter / (t.med_us * 1e-6) / 1e12;
    MoeExpertArgs probe;
    probe.N = kInter;
    probe.K = kHidden;
    probe.variant = variant;
    probe.layout = variant >= 0 ? moe_expert_variant_layout(variant) : MoeWeightLayout::kCheckpoint;
    probe.n_rows = B * kTopK;
    probe.active_experts = sets[0].act.as<int32_t>();  // compact grid, as launched
    probe.n_active = sets[0].nact.as<int32_t>();
    probe.max_active = std::min(kE, B * kTopK);
    probe.mode = MoeExpertMode::kGateUp;
    if (gemm_variant >= 0) {
        p.j["variant"] = moe_grouped_variant_name(gemm_variant);
        p.us = t.med_us;
        return p;
    }
    std::string vname = moe_expert_variant_name(moe_expert_select_variant(probe));
    probe.mode = MoeExpertMode::kDown;
    probe.N = kHidden;
    probe.K = kInter;
    const std::string vdown = moe_expert_variant_name(moe_expert_select_variant(probe));
    if (vdown != vname) vname += " / down " + vdown;
    p.j["variant"] = vname;
    p.us = t.med_us;
    return p;
}

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

std::string env_or(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

// Batch sizes of the MoE sweep: env DSV4_MOE_SWEEP_BATCHES (comma-separated), else 1,8,64,256.
std::vector<int> sweep_batches() {
    std::string v = env_or("DSV4_MOE_SWEEP_BATCHES");
    if (v.empty()) v = "1,8,64,256";
    std::vector<int> out;
    for (size_t i = 0; i < v.size();) {
        size_t j = v.find(',', i);
        if (j == std::string::npos) j = v.size();
        if (j > i) out.push_back(std::atoi(v.substr(i, j - i).c_str()));
        i = j + 1;
    }
    return out;
}

bool has(const std::vector<std::string>& v, const char* s) { return std::find(v.begin(), v.end(), s) != v.end(); }

}  // namespace

int run_decode_bench(const DecodeBenchOptions& o) {
    cudaStream_t s;
    BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    json J;
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
    const double gemm = measure_gemm(s);
    J["copy_gb_s"] = copy;
    J["copy_memcpy_d2d_gb_s"] = copy_memcpy;
    J["bf16_gemm_tflops"] = gemm;
    std::printf("copy bandwidth %.0f GB/s (kernel, read+write; cudaMemcpy D2D %.0f GB/s), bf16 GEMM %.0f TFLOP/s\n",
                copy, copy_memcpy, gemm);
    std::fflush(stdout);
    std::mt19937 g(1234);
    std::vector<std::string> table;
    auto save = [&] {
        std::ofstream f(o.out);
        f << J.dump(1) << "\n";
    };

    if (has(o.sections, "attn") || has(o.sections, "attn_sweep")) {
        KvPool fp8 = make_pool(KvFormat::kFp8, size_t(1) << 30, g);
        KvPool bf16 = make_pool(KvFormat::kBf16, size_t(1) << 30, g);
        if (has(o.sections, "attn")) {
            for (const KvPool* pool : {&fp8, &bf16})
                for (const char* kind : {"csa", "hca", "swa"})
                    for (int ctx : o.contexts) {
                        if (std::string(kind) == "swa" && ctx != o.contexts.front()) continue;
                        for (int B : o.batches) {
                            AttnPoint p = bench_attn(*pool, B, attn_rows(kind, ctx), -1, 0, o.reps, copy, s, 77 + B);
                            p.j["kind"] = kind;
                            p.j["format"] = pool->fmt == KvFormat::kFp8 ? "fp8" : "bf16";
                            p.j["batch"] = B;
                            p.j["context"] = ctx;
                            J["attention"].push_back(p.j);
                            char line[256];
                            std::snprintf(
                                line, sizeof line,
                                "attn %-4s %-4s B=%-3d ctx=%-5d rows=%-4d sp=%-2d %8.1f us %6.0f GB/s %5.1f%% copy",
                                kind, p.j["format"].get<std::string>().c_str(), B, ctx, p.j["rows"].get<int>(),
                                p.j["splits"].get<int>(), p.us, p.j["gb_s"].get<double>(),
                                p.j["pct_copy"].get<double>());
                            table.push_back(line);
                        }
                    }
            save();
        }
        if (has(o.sections, "attn_sweep")) {
            // A/B sweeps for the ledger: variants at the default target, targets at the default variant.
            struct Cfg {
                std::string name;
                int variant, target;
            };
            for (const KvPool* pool : {&fp8, &bf16})
                for (auto [kind, ctx] : {std::pair{"csa", 8192}, std::pair{"hca", 32768}})
                    for (int B : {1, 8, 64, 256}) {
                        std::vector<Cfg> cfgs;
                        for (int v = 0; v < sparse_decode_variant_count(); ++v)
                            if (sparse_decode_variant_legal(v, pool->fmt, 64))
                                cfgs.push_back({sparse_decode_variant_name(v), v, 0});
                        for (int t : {128, 256, 512}) cfgs.push_back({"target" + std::to_string(t), 0, t});
                        json pt;
                        for (int r = 0; r < o.rounds; ++r)
                            for (size_t i = 0; i < cfgs.size(); ++i) {
                                const Cfg& c = cfgs[(r % 2) ? cfgs.size() - 1 - i : i];
                                AttnPoint p = bench_attn(*pool, B, attn_rows(kind, ctx), c.variant, c.target, o.reps,
                                                         copy, s, 900 + r);
                                pt[c.name]["median_us"].push_back(p.us);
                                pt[c.name]["splits"] = p.j["splits"];
                                pt[c.name]["pct_copy"].push_back(p.j["pct_copy"]);
                            }
                        json e{{"kind", kind},
                               {"format", pool->fmt == KvFormat::kFp8 ? "fp8" : "bf16"},
                               {"batch", B},
                               {"context", ctx},
                               {"configs", pt}};
                        J["attention_sweep"].push_back(e);
                        std::string line = std::string("sweep attn ") + kind + " " + e["format"].get<std::string>() +
                                           " B=" + std::to_string(B) + ":";
                        for (auto& [name, v] : pt.items()) {
                            auto m = v["median_us"];
                            double lo = 1e30, hi = 0, sum = 0;
                            for (auto& x : m) {
                                lo = std::min(lo, x.get<double>());
                                hi = std::max(hi, x.get<double>());
                                sum += x.get<double>();
                            }
                            char b[128];
                            std::snprintf(b, sizeof b, " %s(sp%d)=%.1f[%.1f-%.1f]", name.c_str(),
                                          v["splits"].get<int>(), sum / m.size(), lo, hi);
                            line += b;
                        }
                        table.push_back(line);
                        save();
                    }
        }
    }

    if (has(o.sections, "moe") || has(o.sections, "moe_sweep") || has(o.sections, "moe_gemm")) {
        std::vector<MoeLayer> layers;
        layers.push_back(make_moe_layer(g));
        layers.push_back(make_moe_layer(g));
        if (has(o.sections, "moe"))
            for (int B : o.batches)
                for (int mode : {0, 2, 1}) {
                    MoePoint p = bench_moe(layers, B, -1, o.skewed, mode, o.reps, copy, s, 500 + B);
                    p.j["batch"] = B;
                    p.j["what"] = mode == 0 ? "routed_path" : mode == 2 ? "routed_unfused" : "expert_gemvs";
                    p.j["skewed"] = o.skewed;
                    J["moe"].push_back(p.j);
                    char line[384];
                    std::snprintf(line, sizeof line,
                                  "moe  %-14s B=%-3d experts=%5.1f %8.1f us [%.1f-%.1f] %6.0f GB/s %5.1f%% copy %s",
                                  p.j["what"].get<std::string>().c_str(), B, p.j["active_experts"].get<double>(), p.us,
                                  p.j["p10_us"].get<double>(), p.j["p90_us"].get<double>(), p.j["gb_s"].get<double>(),
                                  p.j["pct_copy"].get<double>(), p.j["variant"].get<std::string>().c_str());
                    table.push_back(line);
                    std::printf("%s\n", line);  // also as it comes, in case the call is cut short
                    std::fflush(stdout);
                }
        save();
        // Prefill-sized steps (issue 22): the tensor-core GEMV on pair-rotated weights against every
        // grouped GEMM variant of that layout, rounds alternating the order, at each --batches size.
        if (has(o.sections, "moe_gemm"))
            for (int B : o.batches) {
                MoeExpertArgs probe;
                probe.layout = MoeWeightLayout::kPairRotated;
                probe.N = kInter;
                probe.K = kHidden;
                probe.n_rows = B * kTopK;
                const int gemv = moe_expert_select_variant(probe);
                std::vector<std::pair<std::string, int>> cands{{moe_expert_variant_name(gemv), -1}};
                for (int i = 0; i < moe_grouped_variant_count(); ++i)
                    if (moe_grouped_variant_layout(i) == MoeWeightLayout::kPairRotated)
                        cands.emplace_back(moe_grouped_variant_name(i), i);
                json pt;
                const int n = int(cands.size());
                for (int r = 0; r < o.rounds; ++r)
                    for (int i = 0; i < n; ++i) {
                        const auto& [name, gv] = cands[(r % 2) ? n - 1 - i : i];
                        MoePoint p = bench_moe(layers, B, gv < 0 ? gemv : -1, false, 1, o.reps, copy, s, 700 + r, gv);
                        pt[name]["median_us"].push_back(p.us);
                        pt[name]["tflops"].push_back(p.j["tflops"]);
                    }
                J["moe_gemm"].push_back(json{{"batch", B}, {"configs", pt}});
                for (auto& [name, v] : pt.items()) {
                    double lo = 1e30, hi = 0, sum = 0, tf = 0;
                    for (auto& x : v["median_us"]) {
                        lo = std::min(lo, x.get<double>());
                        hi = std::max(hi, x.get<double>());
                        sum += x.get<double>();
                    }
                    for (auto& x : v["tflops"]) tf = std::max(tf, x.get<double>());
                    char line[256];
                    std::snprintf(line, sizeof line, "moe_gemm B=%-5d %-34s %9.1f us [%.1f-%.1f] %6.1f TFLOP/s", B,
                                  name.c_str(), sum / v["median_us"].size(), lo, hi, tf);
                    table.push_back(line);
                    std::printf("%s\n", line);
                }
                std::fflush(stdout);
                save();
            }
        if (has(o.sections, "moe_sweep"))
            for (int B : sweep_batches()) {
                json pt;
                // Env DSV4_MOE_SWEEP (comma-separated canonical names) limits the sweep to those
                // variants, to save device time; unset = every variant.
                std::vector<int> vs;
                std::string only = env_or("DSV4_MOE_SWEEP");
                only.insert(only.begin(), ',');
                only.push_back(',');
                for (int i = 0; i < moe_expert_variant_count(); ++i) {
                    std::string key = moe_expert_variant_name(i);
                    key.insert(key.begin(), ',');
                    key.push_back(',');
                    if (only == ",," || only.find(key) != std::string::npos) vs.push_back(i);
                }
                const int n = int(vs.size());
                for (int r = 0; r < o.rounds; ++r)
                    for (int i = 0; i < n; ++i) {
                        const int v = vs[(r % 2) ? n - 1 - i : i];
                        MoePoint p = bench_moe(layers, B, v, false, 1, o.reps, copy, s, 600 + r);
                        pt[moe_expert_variant_name(v)]["median_us"].push_back(p.us);
                        pt[moe_expert_variant_name(v)]["pct_copy"].push_back(p.j["pct_copy"]);
                    }
                J["moe_sweep"].push_back(json{{"batch", B}, {"configs", pt}});
                std::string line = "sweep moe B=" + std::to_string(B) + ":";
                for (auto& [name, v] : pt.items()) {
                    double lo = 1e30, hi = 0, sum = 0;
                    for (auto& x : v["median_us"]) {
                        lo = std::min(lo, x.get<double>());
                        hi = std::max(hi, x.get<double>());
                        sum += x.get<double>();
                    }
                    char b[160];
                    std::snprintf(b, sizeof b, " %s=%.1f[%.1f-%.1f]", name.substr(10).c_str(),
                                  sum / v["median_us"].size(), lo, hi);
                    line += b;
                }
                table.push_back(line);
                std::printf("%s\n", line.c_str());
                std::fflush(stdout);
                save();
            }
    }

    if (has(o.sections, "gemv_sweep")) {
        // Default: wq_b, wo_b, wkv at batches 1, 8, 32, 128 over every legal variant, bf16 x.
        // Env DSV4_GEMV_SWEEP_SHAPES=<names> takes those shapes at --batches with f32 x (the
        // runtime's form) and the columns "old" (pre-K-chunk heuristic), "new" (the heuristic
        // now) and every legal variant named in env DSV4_GEMV_SWEEP (all when unset).
        const std::string shape_env = env_or("DSV4_GEMV_SWEEP_SHAPES"), only = "," + env_or("DSV4_GEMV_SWEEP") + ",";
        std::vector<GemvShape> shapes;
        std::vector<int> batches{1, 8, 32, 128};
        if (shape_env.empty()) {
            shapes = {kGemvShapes[1], kGemvShapes[4], kGemvShapes[2]};  // wq_b, wo_b, wkv
        } else {
            std::stringstream ss(shape_env);  // in the order given
            for (std::string name; std::getline(ss, name, ',');)
                for (const GemvShape& sh : kGemvShapes)
                    if (name == sh.name) shapes.push_back(sh);
            batches = o.batches;
        }
        // Env DSV4_GEMV_SWEEP_XBF16=1 gives the named shapes bf16 x instead (the form a caller that
        // writes bf16 activations would pass); the "old" / "new" columns are then the heuristics' picks for bf16 x.
        const bool x_f32 = !shape_env.empty() && env_or("DSV4_GEMV_SWEEP_XBF16") != "1";
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
                if (!shape_env.empty()) {
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
                    double lo = 1e30, hi = 0, sum = 0;
                    for (auto& x : m) {
                        lo = std::min(lo, x.get<double>());
                        hi = std::max(hi, x.get<double>());
                        sum += x.get<double>();
                    }
                    char b[200];
                    if (name == "old" || name == "new")
                        std::snprintf(b, sizeof b, " %s(%s)=%.1f[%.1f-%.1f]", name.c_str(),
                                      dense_gemv_variant_name(v).substr(11).c_str(), sum / m.size(), lo, hi);
                    else
                        std::snprintf(b, sizeof b, " %s=%.1f[%.1f-%.1f]", name.c_str(), sum / m.size(), lo, hi);
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
    save();
    std::printf("\n== summary (median per launch; %% of copy bandwidth %.0f GB/s measured in this run) ==\n", copy);
    for (const auto& l : table) std::printf("%s\n", l.c_str());
    cudaStreamDestroy(s);
    return 0;
}

}  // namespace dsv4::cli
