// Verify-step points of `dsv4 proxy-bench` (cmd_proxy_bench_verify.h).
#include "tools/dsv4/cmd_proxy_bench_verify.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "runtime/synthetic_context.h"
#include "tools/dsv4/bench_spread.h"

namespace dsv4::cli {

StepBytesModel verify_bytes_model(const ModelConfig& cfg, const ProxyWeightBytes& wb, const KvRowBytes& rows, int B,
                                  int n, int64_t L, int hot) {
    StepBytesModel m = step_bytes_model(cfg, wb, rows, B * n, L, hot);
    m.kv_per_seq = step_bytes_model(cfg, wb, rows, 1, L + n - 1, hot).kv_per_seq;
    m.kv = double(B) * m.kv_per_seq;
    return m;
}

bool run_verify_points(CudaBenchRunner& runner, const ModelConfig& cfg, const ProxyWeightBytes& wb,
                       const KvRowBytes& rows, const KvLayout& layout, const ProxyBenchOptions& o, double bw_gbs,
                       double gemm_tflops, int hot, int64_t n_pages, nlohmann::json& J) {
    using Clock = std::chrono::steady_clock;
    std::vector<int> ns{1};
    for (int n : o.verify_tokens) {
        if (n < 1 || n > 16) {
            std::fprintf(stderr, "proxy-bench: --verify-tokens %d: n = k + 1 must be in [1, 16]\n", n);
            return false;
        }
        if (std::find(ns.begin(), ns.end(), n) == ns.end()) ns.push_back(n);
    }
    std::sort(ns.begin(), ns.end());  // ns.back() is the longest chunk
    std::printf(
        "\nverify steps: n = k + 1 tokens per sequence (the last sampled token + k drafts) at its decode "
        "position, through forward_sampled (greedy on the device); wall time per step, median of %d rounds "
        "(n values alternated in each round, after %d warm-up rounds)\n",
        o.reps, o.warmup);
    std::printf("%6s %6s %3s %10s %10s %10s %8s %9s %8s %9s %10s %10s\n", "batch", "ctx", "n", "step_ms", "p10_ms",
                "p90_ms", "x_n1", "MB/step", "%floor", "draft_ms", "tpot@a_ms", "tpot@n_ms");
    std::mt19937 rng(uint32_t(o.seed) + 17);
    for (int B : o.batches) {
        for (int L : o.contexts) {
            const int64_t P = layout.pages_for_tokens(int64_t(L) + ns.back());
            nlohmann::json pt{{"batch", B}, {"context", L}};
            if (P != layout.pages_for_tokens(int64_t(L) + 1) || int64_t(B) * P > n_pages) {
                std::printf("%6d %6d  skipped: %s\n", B, L,
                            int64_t(B) * P > n_pages ? "the pool is too small"
                                                     : "the verify chunk crosses a page (the context fill covers one)");
                pt["skipped"] = "pages";
                J["verify"].push_back(pt);
                continue;
            }
            if (Status st = runner.for_each_pool([&](const CudaPoolInfo& pool) {
                    return fill_synthetic_context(pool, layout, cfg, B, L, o.seed * 7919 + uint64_t(L));
                });
                !st.is_ok()) {
                std::fprintf(stderr, "proxy-bench: %s\n", st.message().c_str());
                return false;
            }
            std::vector<std::vector<int32_t>> tables(static_cast<size_t>(B)), toks(static_cast<size_t>(B));
            for (int q = 0; q < B; ++q) {
                tables[size_t(q)] = synthetic_page_table(layout, q, L);
                for (int i = 0; i < ns.back(); ++i)
                    toks[size_t(q)].push_back(int32_t(rng() % uint32_t(cfg.vocab_size)));
            }
            auto batch_of = [&](int n) {
                ForwardBatch b;
                for (int q = 0; q < B; ++q) {
                    SeqChunk c;
                    c.seq_id = q;
                    c.tokens = std::span<const int32_t>(toks[size_t(q)]).first(size_t(n));
                    c.start_pos = L;
                    c.want_logits = true;
                    c.sample = DeviceSample::kGreedy;
                    c.page_table = tables[size_t(q)];
                    b.seqs.push_back(c);
                }
                return b;
            };
            std::map<int, std::vector<double>> ms;
            for (int r = 0; r < o.warmup + o.reps; ++r)
                for (int n : ns) {
                    const ForwardBatch b = batch_of(n);
                    StepOutput out;
                    const auto t0 = Clock::now();
                    if (Status st = runner.forward_sampled(b, out); !st.is_ok()) {
                        std::fprintf(stderr, "proxy-bench: verify batch %d ctx %d n %d: %s\n", B, L, n,
                                     st.message().c_str());
                        return false;
                    }
                    const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
                    if (r >= o.warmup) ms[n].push_back(t);
                }
            const double t1 = spread(ms[1]).med;
            // A draft step of the MTP block: one decoder layer plus the head (hc_head, norm, LM head) of the
            // decode-graph point at this batch and context, plus what the served path adds to a graph
            // replay (this one-token step minus that point's replay), as if each draft were its own
            // launch; without a decode point, a whole one-token step.
            double draft_ms = t1, overhead = 0.0;
            const char* draft_from = "one-token step (no decode point)";
            for (const auto& d : J["points"])
                if (d.value("batch", -1) == B && d.value("context", -1) == L && d.contains("per_layer_us")) {
                    overhead = std::max(0.0, t1 - d["step_us"]["median"].get<double>() / 1e3);
                    draft_ms =
                        (d["head_us"]["median"].get<double>() + d["per_layer_us"].get<double>()) / 1e3 + overhead;
                    draft_from = "head + one layer of the decode point + the served path's overhead";
                }
            if (o.mtp_draft) {  // measured: the MTP block's graph (block, head, greedy pick) at this batch
                auto tm = runner.time_mtp_draft(batch_of(1), o.warmup + 3, std::max(o.reps, 10));
                if (!tm.is_ok()) {
                    std::fprintf(stderr, "proxy-bench: MTP draft step, batch %d ctx %d: %s\n", B, L,
                                 tm.status().message().c_str());
                    return false;
                }
                const Spread dsp = spread(*tm);
                pt["mtp_draft_graph_us"] = *tm;
                draft_ms = dsp.med / 1e3 + overhead;
                draft_from = overhead > 0 ? "MTP block graph, measured, + the served path's overhead"
                                          : "MTP block graph, measured (no decode point for the served overhead)";
            }
            pt["draft_ms"] = draft_ms;
            pt["draft_from"] = draft_from;
            for (int n : ns) {
                const StepBytesModel m = verify_bytes_model(cfg, wb, rows, B, n, L, hot);
                const Spread sp = spread(ms[n]);
                const double med = sp.med;
                const double floor_ms =
                    std::max(m.total() / (bw_gbs * 1e9), gemm_tflops > 0 ? m.flops / (gemm_tflops * 1e12) : 0.0) * 1e3;
                // Time per output token, a projection from measured steps: a verify step of n tokens plus
                // k = n - 1 draft steps of draft_ms, over the accept length a (tokens emitted per verify
                // step): at the published a = 2.5 (capped at n) and at a = n (every draft accepted).
                const double a = std::min(2.5, double(n));
                const double cycle = med + double(n - 1) * draft_ms;
                std::printf("%6d %6d %3d %10.3f %10.3f %10.3f %8.2f %9.1f %7.1f%% %9.3f %10.3f %10.3f\n", B, L, n, med,
                            sp.p10, sp.p90, med / t1, m.total() / 1e6, 100.0 * floor_ms / med, draft_ms,
                            n > 1 ? cycle / a : med, n > 1 ? cycle / n : med);
                pt["n" + std::to_string(n)] = {{"step_ms", ms[n]},
                                               {"median_ms", med},
                                               {"ratio_to_n1", med / t1},
                                               {"bytes", m.total()},
                                               {"flops", m.flops},
                                               {"floor_ms", floor_ms},
                                               {"pct_floor", 100.0 * floor_ms / med},
                                               {"projected_tpot_ms_at_accept_2_5", n > 1 ? cycle / a : med},
                                               {"projected_tpot_ms_all_accepted", n > 1 ? cycle / n : med}};
            }
            if (o.op_profile_prefill)  // option op_profile: where a verify step's time goes (eager, marked)
                for (int n : ns) {
                    if (n == 1) continue;
                    auto t = runner.profile_step(batch_of(n));
                    if (t)
                        std::printf("op profile, verify step of %d tokens x %d sequences at %d:\n%s", n, B, L,
                                    t->c_str());
                    else
                        std::printf("op profile: %s\n", t.status().message().c_str());
                }
            std::fflush(stdout);
            J["verify"].push_back(pt);
        }
    }
    std::printf(
        "x_n1 = step / one-token step; %%floor = max(bytes / max(copy, read), FLOPs / GEMM peak) / step, "
        "bytes counting each sequence's KV once (a lower bound: the n tokens' windows and CSA selections "
        "differ) and the experts B x n tokens touch; the step computes the LM head and the greedy pick for "
        "the last token of each chunk only (a verify step needs all n: B x (n - 1) more head rows, whose "
        "weights the step reads anyway); tpot@a = (verify step + k draft steps) / min(2.5, n), tpot@n = the "
        "same / n (every draft accepted), a draft step = head + one layer of the decode point at the same "
        "batch and context + the served path's overhead over a graph replay (the MTP block is one layer and "
        "the head; a whole one-token step when decode points were not run): projections from measured "
        "steps, not measured speculative decoding.\n");
    return true;
}

}  // namespace dsv4::cli
