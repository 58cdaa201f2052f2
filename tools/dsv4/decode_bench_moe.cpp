// `dsv4 decode-bench`, MoE: the routed expert path of one Flash MoE layer (route, permute,
// MXFP4 expert GEMVs, combine) at each batch ("moe"), the expert GEMV against the grouped expert
// GEMMs at prefill-sized steps ("moe_gemm"), and the A/B sweep of the GEMV variants ("moe_sweep").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda/moe/moe.h"
#include "tools/dsv4/decode_bench_sections.h"
#include "tools/dsv4/decode_bench_util.h"

namespace dsv4::cli {
namespace {

using nlohmann::json;
using namespace dsv4::cuda;
using namespace dbench;

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

}  // namespace

void run_moe_sections(DecodeBenchRun& run) {
    // Short local names for the run's pieces, as the sections below use them.
    const DecodeBenchOptions& o = run.o;
    const cudaStream_t s = run.s;
    const double copy = run.copy;
    std::mt19937& g = run.g;
    json& J = run.J;
    std::vector<std::string>& table = run.table;
    auto save = [&run] { run.save(); };
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
                    const RoundSpread r = round_spread(v["median_us"]);
                    const double tf = round_spread(v["tflops"]).hi;
                    char line[256];
                    std::snprintf(line, sizeof line, "moe_gemm B=%-5d %-34s %9.1f us [%.1f-%.1f] %6.1f TFLOP/s", B,
                                  name.c_str(), r.mean, r.lo, r.hi, tf);
                    table.push_back(line);
                    std::printf("%s\n", line);
                }
                std::fflush(stdout);
                save();
            }
        if (has(o.sections, "moe_sweep"))
            for (int B : o.moe_sweep_batches) {
                json pt;
                // --moe-sweep-variants (comma-separated canonical names) limits the sweep to those
                // variants, to save device time; empty = every variant.
                std::vector<int> vs;
                std::string only = o.moe_sweep_variants;
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
                    const RoundSpread r = round_spread(v["median_us"]);
                    char b[160];
                    std::snprintf(b, sizeof b, " %s=%.1f[%.1f-%.1f]", name.substr(10).c_str(), r.mean, r.lo, r.hi);
                    line += b;
                }
                table.push_back(line);
                std::printf("%s\n", line.c_str());
                std::fflush(stdout);
                save();
            }
    }
}

}  // namespace dsv4::cli
