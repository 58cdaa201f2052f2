// Prefill points of `dsv4 proxy-bench` (cmd_proxy_bench_prefill.h).
#include "tools/dsv4/cmd_proxy_bench_prefill.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "runtime/synthetic_context.h"

namespace dsv4::cli {

double prefill_flops(const ModelConfig& cfg, const ProxyWeightBytes& wb, const KvRowBytes& rows, int64_t L, int hot) {
    double f = 0;
    for (int64_t p = 0; p < L; ++p) f += step_bytes_model(cfg, wb, rows, 1, p, hot).flops;
    const double head = 2.0 * double(cfg.vocab_size) * double(cfg.hidden_size);
    return f - double(L - 1) * head;
}

namespace {
using Clock = std::chrono::steady_clock;

struct Spread {
    double med = 0, lo = 0, hi = 0;
};
Spread spread_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {v[v.size() / 2], v.front(), v.back()};
}
}  // namespace

bool run_prefill_points(CudaBenchRunner& runner, const ModelConfig& cfg, const ProxyWeightBytes& wb,
                        const KvRowBytes& rows, const KvLayout& layout, const ProxyBenchOptions& o, double gemm_tflops,
                        nlohmann::json& J) {
    std::printf(
        "\nprefill: steps of <= %d tokens, <= %d tokens of one sequence per step; median of %d repetitions "
        "(after one warm-up), wall time of forward() until the last prompt's logits are on the host\n",
        o.prefill_step, o.prefill_chunk, o.prefill_reps);
    std::printf("%7s %6s %7s %10s %10s %10s %11s %9s %8s %10s\n", "prompt", "users", "steps", "wall_ms", "min_ms",
                "max_ms", "tok/s", "TFLOP/s", "%gemm", "ttft1_ms");
    J["prefill"] = nlohmann::json::array();
    std::mt19937 rng(uint32_t(o.seed) * 31u + 7u);
    for (int L : o.prefill_lens)
        for (int U : o.prefill_users) {
            nlohmann::json pt{{"prompt", L}, {"users", U}};
            if (L <= 0 || U <= 0 || U > o.prefill_step) {
                pt["skipped"] = "bad shape";
                J["prefill"].push_back(pt);
                continue;
            }
            if (int64_t(U) * layout.pages_for_tokens(int64_t(L) + 1) > runner.n_pages() || L > runner.max_positions()) {
                std::printf("%7d %6d  skipped: needs %lld pages / %d positions (pool %lld, max context %lld)\n", L, U,
                            (long long)(int64_t(U) * layout.pages_for_tokens(int64_t(L) + 1)), L,
                            (long long)runner.n_pages(), (long long)runner.max_positions());
                pt["skipped"] = "does not fit";
                J["prefill"].push_back(pt);
                continue;
            }
            std::vector<std::vector<int32_t>> prompt(static_cast<size_t>(U)), table(static_cast<size_t>(U));
            for (int u = 0; u < U; ++u) {
                prompt[size_t(u)].resize(size_t(L));
                for (auto& t : prompt[size_t(u)]) t = int32_t(rng() % uint32_t(cfg.vocab_size));
                table[size_t(u)] = synthetic_page_table(layout, u, L);
            }
            std::vector<double> wall, ttft1;
            int n_steps = 0;
            bool ok = true;
            for (int rep = 0; rep <= o.prefill_reps && ok; ++rep) {
                std::vector<int64_t> done(size_t(U), 0);
                const auto t0 = Clock::now();
                double first = 0;
                n_steps = 0;
                for (int left = U; left > 0;) {
                    ForwardBatch b;
                    int budget = o.prefill_step;
                    for (int u = 0; u < U && budget > 0; ++u) {
                        const int64_t rest = int64_t(L) - done[size_t(u)];
                        if (rest <= 0) continue;
                        const int n = int(std::min<int64_t>({rest, int64_t(o.prefill_chunk), int64_t(budget)}));
                        SeqChunk c;
                        c.seq_id = u;
                        c.tokens = std::span<const int32_t>(prompt[size_t(u)].data() + done[size_t(u)], size_t(n));
                        c.start_pos = done[size_t(u)];
                        c.want_logits = done[size_t(u)] + n == L;
                        c.page_table = table[size_t(u)];
                        b.seqs.push_back(std::move(c));
                        budget -= n;
                    }
                    std::vector<std::vector<float>> logits;
                    if (Status s = runner.forward(b, logits); !s.is_ok()) {
                        std::fprintf(stderr, "proxy-bench: prefill %d x %d: %s\n", U, L, s.message().c_str());
                        ok = false;
                        break;
                    }
                    ++n_steps;
                    for (const SeqChunk& c : b.seqs) {
                        done[size_t(c.seq_id)] += int64_t(c.tokens.size());
                        if (done[size_t(c.seq_id)] == L) {
                            --left;
                            if (first == 0)
                                first = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
                        }
                    }
                }
                if (rep == 0) continue;  // warm-up
                wall.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
                ttft1.push_back(first);
            }
            if (!ok) return false;
            const Spread w = spread_of(wall), f = spread_of(ttft1);
            const double tok_s = double(U) * L / (w.med * 1e-3);
            const double flops = double(U) * prefill_flops(cfg, wb, rows, L, cfg.n_routed_experts);
            const double tflops = flops / (w.med * 1e-3) / 1e12;
            std::printf("%7d %6d %7d %10.1f %10.1f %10.1f %11.0f %9.1f %7.1f%% %10.1f\n", L, U, n_steps, w.med, w.lo,
                        w.hi, tok_s, tflops, gemm_tflops > 0 ? 100.0 * tflops / gemm_tflops : 0.0, f.med);
            std::fflush(stdout);
            pt.update({{"steps", n_steps},
                       {"wall_ms", {{"median", w.med}, {"min", w.lo}, {"max", w.hi}}},
                       {"wall_ms_reps", wall},
                       {"ttft_first_ms", {{"median", f.med}, {"min", f.lo}, {"max", f.hi}}},
                       {"tokens_per_s", tok_s},
                       {"flops", flops},
                       {"tflops", tflops},
                       {"pct_gemm_peak", gemm_tflops > 0 ? 100.0 * tflops / gemm_tflops : 0.0}});
            if (o.op_profile_prefill && U == 1) {
                // The first step of one prompt again, with event marks between op classes, and, when the
                // prompt takes several steps, its last step: the indexer and the compressed rows grow
                // with the position, so the last chunk of a long prompt is where they cost most. The
                // pages still hold the measured run's rows; only the positions matter for the timing.
                // One prompt is split as the timed runs split it (chunks of o.prefill_chunk from 0).
                const int64_t chunk = std::min(L, o.prefill_chunk), last = (int64_t(L) - 1) / chunk * chunk;
                for (int64_t start : {int64_t(0), last}) {
                    ForwardBatch b;
                    SeqChunk c;
                    c.seq_id = 0;
                    c.tokens = std::span<const int32_t>(prompt[0].data() + start,
                                                        size_t(std::min<int64_t>(chunk, int64_t(L) - start)));
                    c.start_pos = start;
                    c.page_table = table[0];
                    b.seqs.push_back(c);
                    auto t = runner.profile_step(b);
                    if (!t) {
                        std::printf("op profile: %s\n", t.status().message().c_str());
                        break;
                    }
                    std::printf("op profile, %s prefill step of one %d-token prompt (positions %lld-%lld):\n%s",
                                start == 0 ? "first" : "last", L, (long long)start,
                                (long long)(start + int64_t(c.tokens.size()) - 1), t->c_str());
                    if (last == 0) break;
                }
            }
            J["prefill"].push_back(pt);
        }
    std::printf(
        "FLOPs per prompt: sum over its positions of one token's decode FLOPs (2 x dense + 6 routed expert "
        "matrix elements, attention over window + compressed rows, indexer), LM head once\n");
    return true;
}

}  // namespace dsv4::cli
