// `dsv4 decode-bench`, decode attention: sparse_decode over random FP8 and bf16 KV pools at the
// Flash CSA / HCA / SWA row counts ("attn"), and the A/B sweep of its variants and CTA targets
// ("attn_sweep").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda/attention/sparse_decode.h"
#include "tools/dsv4/decode_bench_sections.h"
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

}  // namespace

void run_attn_sections(DecodeBenchRun& run) {
    // Short local names for the run's pieces, as the sections below use them.
    const DecodeBenchOptions& o = run.o;
    const cudaStream_t s = run.s;
    const double copy = run.copy;
    std::mt19937& g = run.g;
    json& J = run.J;
    std::vector<std::string>& table = run.table;
    auto save = [&run] { run.save(); };
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
                            const RoundSpread r = round_spread(m);
                            char b[128];
                            std::snprintf(b, sizeof b, " %s(sp%d)=%.1f[%.1f-%.1f]", name.c_str(),
                                          v["splits"].get<int>(), r.mean, r.lo, r.hi);
                            line += b;
                        }
                        table.push_back(line);
                        save();
                    }
        }
    }
}

}  // namespace dsv4::cli
