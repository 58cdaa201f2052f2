// `dsv4 proxy-bench` on the GPU (see cmd_proxy_bench.h). Per point (batch B, context L): B
// sequences pre-filled to L tokens (runtime/synthetic_context.h), one decode step through
// CudaRunner::forward (captures the bucket's graph; logits checked finite), then `reps` replays of
// that graph timed one by one with CUDA events (no host plan or logits work inside), median and
// p10/p90; bytes moved per step from the model of perf-method.md (model/flash_proxy.h); GB/s and %
// of the kernel copy and pure-read bandwidths measured at the start of the same run (the bytes
// floor uses the higher one, docs/perf-method.md); TFLOP/s against the cuBLAS bf16 GEMM peak of
// the same run, and the floor max(bytes floor, FLOP floor) where that peak was measured. Per-layer time = (step -
// non-layer part) / layers, where the non-layer part (embedding, mHC head, LM head) is its own graph timed the same
// way; the 43-layer Flash extrapolation is non-layer + 43 x per-layer.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda/gemm/stream_copy.h"
#include "model/flash_proxy.h"
#include "model/kv_rows.h"
#include "runtime/cuda_bench_runner.h"
#include "runtime/multi_gpu_runner.h"
#include "runtime/synthetic_context.h"
#include "tools/dsv4/cmd_proxy_bench.h"
#include "tools/dsv4/bench_spread.h"
#include "tools/dsv4/cmd_proxy_bench_prefill.h"
#include "tools/dsv4/cmd_proxy_bench_verify.h"
#include "tools/dsv4/runtime_cli.h"

namespace dsv4::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    std::fprintf(stderr, "proxy-bench: %s: %s\n", what, cudaGetErrorString(e));
    return false;
}

// Event-timed replays of a one-launch graph; microseconds per launch.
template <class F>
Spread time_graph(cudaStream_t s, int reps, F&& enqueue) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    if (!ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture")) return {};
    enqueue();
    if (!ok(cudaStreamEndCapture(s, &g), "capture") || !ok(cudaGraphInstantiate(&ge, g, 0), "instantiate")) return {};
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; ++i) cudaGraphLaunch(ge, s);
    cudaStreamSynchronize(s);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        cudaEventRecord(e0, s);
        cudaGraphLaunch(ge, s);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        t.push_back(1000.0 * ms);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return spread(t);
}

// Copy bandwidth (bytes read + written) of the stream_copy kernel over 2 x 2 GiB.
double measure_copy_gbs(cudaStream_t s) {
    const size_t n = size_t(2) << 30;
    void *a = nullptr, *b = nullptr;
    if (!ok(cudaMalloc(&a, n), "cudaMalloc") || !ok(cudaMalloc(&b, n), "cudaMalloc")) return 0;
    cudaMemset(a, 0x5a, n);
    cudaDeviceSynchronize();  // the memset runs on the legacy stream, s does not wait for it
    const Spread t = time_graph(s, 20, [&] { cuda::stream_copy(b, a, n, s); });
    cudaFree(a);
    cudaFree(b);
    return t.med > 0 ? 2.0 * double(n) / (t.med * 1e-6) / 1e9 : 0;
}

// Pure-read bandwidth of the stream_read_xor reduction over 2 GiB (the L2 is 60 MB), 8 CTAs per SM.
double measure_read_gbs(cudaStream_t s) {
    const size_t n = size_t(2) << 30;
    int dev = 0, sms = 132;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    void *a = nullptr, *part = nullptr;
    if (!ok(cudaMalloc(&a, n), "cudaMalloc") || !ok(cudaMalloc(&part, size_t(sms) * 8 * 16), "cudaMalloc")) return 0;
    cudaMemset(a, 0x5a, n);
    cudaDeviceSynchronize();  // the memset runs on the legacy stream, s does not wait for it
    const Spread t = time_graph(s, 20, [&] { cuda::stream_read_xor(a, n, part, sms * 8, s); });
    cudaFree(a);
    cudaFree(part);
    return t.med > 0 ? double(n) / (t.med * 1e-6) / 1e9 : 0;
}

// cuBLAS bf16 GEMM 8192^3 (TFLOP/s), inputs non-zero.
double measure_gemm_tflops(cudaStream_t s) {
    const int n = 8192;
    const size_t bytes = size_t(n) * n * 2;
    void *a = nullptr, *b = nullptr, *c = nullptr;
    if (!ok(cudaMalloc(&a, bytes), "cudaMalloc") || !ok(cudaMalloc(&b, bytes), "cudaMalloc") ||
        !ok(cudaMalloc(&c, bytes), "cudaMalloc"))
        return 0;
    cudaMemset(a, 0x3c, bytes);  // bf16 0x3c3c ~ 0.0115
    cudaMemset(b, 0x3c, bytes);
    cublasHandle_t h;
    double tf = 0;
    if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
        cublasSetStream(h, s);
        const float alpha = 1, beta = 0;
        auto gemm = [&] {
            cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta, c,
                         CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        };
        // Plain launches (no graph capture of cuBLAS), events around each.
        for (int i = 0; i < 3; ++i) gemm();
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        std::vector<double> t;
        for (int r = 0; r < 10; ++r) {
            cudaEventRecord(e0, s);
            gemm();
            cudaEventRecord(e1, s);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            t.push_back(1000.0 * ms);
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        const Spread sp = spread(t);
        if (sp.med > 0) tf = 2.0 * n * double(n) * n / (sp.med * 1e-6) / 1e12;
        cublasDestroy(h);
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return tf;
}

std::string env_or(const char* k, const char* dflt) {
    const char* v = std::getenv(k);
    return v && *v ? v : dflt;
}

}  // namespace

int run_proxy_bench(const ProxyBenchOptions& opt_in) {
    ProxyBenchOptions o = opt_in;
    const auto t_start = Clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t_start).count(); };
    FlashProxySpec spec;
    spec.n_layers = o.layers;
    spec.hash_layers = o.hash_layers;
    if (!o.layer_types.empty()) {
        auto t = parse_layer_types(o.layer_types);
        if (!t) {
            std::fprintf(stderr, "proxy-bench: %s\n", t.status().message().c_str());
            return 2;
        }
        spec.layer_types = *t;
        if (o.layers != int(spec.layer_types.size())) spec.n_layers = int(spec.layer_types.size());
    }
    auto cfg_r = flash_proxy_config(spec);
    if (!cfg_r) {
        std::fprintf(stderr, "proxy-bench: %s\n", cfg_r.status().message().c_str());
        return 2;
    }
    const bool mtp = o.mtp_draft && !o.verify_tokens.empty();
    ModelConfig cfg_m = *cfg_r;
    if (mtp) cfg_m.num_nextn_predict_layers = 1;  // a synthetic mtp.0 for the measured draft step
    const ModelConfig cfg = cfg_m;
    // Run-time options once (defaults < tuning file < environment < --kv-rows < --option); the bench's
    // layout and bytes model follow the resolved kv_rows.
    std::vector<std::string> settings = o.options;
    if (!o.kv_rows.empty()) settings.insert(settings.begin(), "kv_rows=" + o.kv_rows);
    RunnerOptions which;  // only what chooses the tuning file: the backend and the model's shape
    which.backend = "cuda";
    which.synthetic_flash_layers = spec.n_layers;
    auto rt_r = cli::resolve_runtime_options(settings, true, &which, o.tuning);
    if (!rt_r) {
        std::fprintf(stderr, "proxy-bench: %s\n", rt_r.status().message().c_str());
        return 2;
    }
    const RuntimeOptions rt = *rt_r;
    o.kv_rows = rt.kv_rows;
    auto row_fmt = parse_kv_row_format(o.kv_rows);
    if (!row_fmt) {
        std::fprintf(stderr, "proxy-bench: %s\n", row_fmt.status().message().c_str());
        return 2;
    }
    auto rows_r = kv_row_bytes(cfg, o.kv_rows);
    if (!rows_r) {
        std::fprintf(stderr, "proxy-bench: %s\n", rows_r.status().message().c_str());
        return 2;
    }
    const KvRowBytes rows = *rows_r;
    if (!cuda_device_available()) {
        std::fprintf(stderr, "proxy-bench: no CUDA device\n");
        return 2;
    }
    const int G = std::max(o.gpus, 1);
    if (G > 1 && (cfg.n_routed_experts % G != 0 || cuda_device_count() < G)) {
        std::fprintf(stderr, "proxy-bench: --gpus %d: %d experts, %d CUDA device(s)\n", G, cfg.n_routed_experts,
                     cuda_device_count());
        return 2;
    }
    std::vector<int> batches = o.batches, contexts = o.contexts;
    std::sort(batches.begin(), batches.end());
    std::sort(contexts.begin(), contexts.end());
    if (batches.empty() || contexts.empty() || batches.front() <= 0 || contexts.front() < 0 || o.reps <= 0) {
        std::fprintf(stderr, "proxy-bench: need positive batches, contexts >= 0 and reps > 0\n");
        return 2;
    }

    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::string layer_list;
    int n_csa = 0, n_hca = 0, n_swa = 0;
    for (auto t : cfg.layer_types) {
        layer_list += std::string(layer_list.empty() ? "" : ",") + attn_type_name(t);
        n_csa += t == AttnType::kCSA;
        n_hca += t == AttnType::kHCA;
        n_swa += t == AttnType::kSliding;
    }
    const int hot =
        o.skewed ? std::clamp(o.hot_experts, cfg.n_experts_per_tok, cfg.n_routed_experts) : cfg.n_routed_experts;
    std::printf("proxy-bench on %s (%d SMs, %.1f GB, driver %d, runtime %d), git %s\n", prop.name,
                prop.multiProcessorCount, double(prop.totalGlobalMem) / 1e9, driver, runtime,
                env_or("DSV4_GIT_SHA", "unknown").c_str());
    std::printf("proxy: %d layers (%d sliding, %d CSA, %d HCA; first %d hash-routed): %s\n", cfg.n_layers, n_swa, n_csa,
                n_hca, std::min(o.hash_layers, cfg.n_layers), layer_list.c_str());
    std::printf("routing %s; compressed rows %s; reps %d (+%d warm-up) per point\n",
                o.skewed ? ("skewed to " + std::to_string(hot) + " experts").c_str() : "uniform", o.kv_rows.c_str(),
                o.reps, o.warmup);

    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const double copy_gbs = measure_copy_gbs(s);
    const double read_gbs = measure_read_gbs(s);
    // The bytes floor's bandwidth: the higher of the two rates (perf-method.md).
    const double bw_gbs = std::max(copy_gbs, read_gbs);
    const double gemm_tf = o.gemm_peak ? measure_gemm_tflops(s) : 0.0;
    std::printf(
        "ceilings (this run): copy kernel %.0f GB/s (read + write), read kernel %.0f GB/s; bytes floor at "
        "%.0f GB/s; ",
        copy_gbs, read_gbs, bw_gbs);
    if (o.gemm_peak)
        std::printf("cuBLAS bf16 GEMM %.0f TFLOP/s\n", gemm_tf);
    else
        std::printf("GEMM peak not measured\n");
    if (copy_gbs <= 0 || read_gbs <= 0) return 3;

    // Memory plan (per GPU): weights (exact, from the model; routed experts split over the GPUs)
    // + workspace estimate + reserve; the rest is pool (attention and its KV replicated per GPU).
    const ProxyWeightBytes wb = proxy_weight_bytes(cfg);
    ProxyWeightBytes wb_gpu = wb;
    wb_gpu.experts = wb.experts / G;
    auto layout_r = KvLayout::make(cfg, 64, 4, *row_fmt, mtp ? 1 : 0);
    if (!layout_r) {
        std::fprintf(stderr, "proxy-bench: %s\n", layout_r.status().message().c_str());
        return 2;
    }
    const KvLayout& layout = *layout_r;
    int max_b = batches.back(), max_prompt = 0;
    for (int u : o.prefill_users) max_b = std::max(max_b, u);
    for (int L : o.prefill_lens) max_prompt = std::max(max_prompt, L);
    const bool prefill = !o.prefill_lens.empty();
    int max_seqs = 1;
    while (max_seqs < max_b) max_seqs *= 2;
    int max_verify = 1;
    for (int n : o.verify_tokens) max_verify = std::max(max_verify, n);
    const int max_tokens = std::max(prefill ? std::max(max_seqs, o.prefill_step) : max_seqs, max_seqs * max_verify);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    // Workspace: ~0.7 MB of f32 activations per token, logits, split-KV partials (64 heads x 32
    // splits x 512) per sequence; plus 0.5 GB of plan/score buffers and allocator slack.
    const double ws_est = double(max_seqs) * (0.7e6 + 4.0 * double(cfg.vocab_size) + 4.0 * 64 * 32 * 513) +
                          double(max_tokens) * 0.7e6 + 0.5e9;
    const double pool_budget = double(free_b) - double(wb_gpu.total()) - ws_est - o.reserve_gb * 1e9;
    int64_t need_max = 0;
    for (int L : contexts)
        for (int B : batches) need_max = std::max(need_max, int64_t(B) * layout.pages_for_tokens(int64_t(L) + 1));
    for (int L : o.prefill_lens)
        for (int U : o.prefill_users)
            need_max = std::max(need_max, int64_t(U) * layout.pages_for_tokens(int64_t(L) + 1));
    const int64_t n_pages = std::max<int64_t>(
        std::min<int64_t>(need_max, int64_t(pool_budget / double(layout.page_bytes))), layout.pages_for_tokens(1));
    std::printf(
        "memory per GPU (%d GPU%s): %.1f GB free; weights %.2f GB; workspace ~%.1f GB; reserve %.1f GB; pool "
        "%lld pages x %.2f MB = %.1f GB (largest point needs %lld pages)\n",
        G, G > 1 ? "s, expert parallel" : "", double(free_b) / 1e9, double(wb_gpu.total()) / 1e9, ws_est / 1e9,
        o.reserve_gb, (long long)n_pages, double(layout.page_bytes) / 1e6,
        double(n_pages) * double(layout.page_bytes) / 1e9, (long long)need_max);

    CudaRunnerOptions ro;
    ro.page_tokens = 64;
    ro.n_pages = n_pages;
    ro.max_seqs = max_seqs;
    ro.max_step_tokens = max_tokens;
    ro.max_context = std::max<int64_t>(int64_t(contexts.back()) + 64, max_prompt + 64);
    ro.rt = rt;
    ro.verbose = true;
    ro.mtp_blocks = mtp ? 1 : 0;
    SyntheticWeightsOptions wo;
    wo.seed = o.seed;
    wo.skewed = o.skewed;
    wo.hot_experts = hot;
    ProxyWeightBytes got{};
    const auto t_init = Clock::now();
    // One rank per GPU (G 1: the plain runner); each rank generates only its routed experts.
    auto runner_r = make_multi_gpu_runner(
        G, ro, [&](int rank, const CudaRunnerOptions& rop) -> Result<std::unique_ptr<ModelRunner>> {
            DSV4_ASSIGN_OR_RETURN(auto b, make_cuda_runner_synthetic(cfg, wo, rop, rank == 0 ? &got : nullptr));
            return std::unique_ptr<ModelRunner>(std::move(b));
        });
    if (!runner_r) {
        std::fprintf(stderr, "proxy-bench: %s\n", runner_r.status().message().c_str());
        return 3;
    }
    auto& runner = **runner_r;
    std::printf("runner built in %.2f s (synthetic weights generated on the GPU%s); %.2f GB on the device%s\n",
                std::chrono::duration<double>(Clock::now() - t_init).count(), G > 1 ? "s" : "",
                double(runner.device_bytes()) / 1e9, G > 1 ? " (largest GPU)" : "");
    if (got.total() != wb_gpu.total())
        std::printf("WARNING: allocated weight bytes %lld differ from the model's %lld\n", (long long)got.total(),
                    (long long)wb_gpu.total());
    // The bytes model over the whole model (all experts); per GPU below: dense + KV replicated,
    // routed experts / G (the experts a step touches spread evenly over the contiguous blocks).
    std::printf("%s", describe_bytes_model(cfg, wb, rows, hot).c_str());
    if (G > 1)
        std::printf(
            "expert parallel over %d GPUs: bytes and GB/s per GPU = dense + KV + routed experts / %d; "
            "%%copy against GPU 0's copy bandwidth\n",
            G, G);
    // The full Flash model (43 layers) for the extrapolated roofline.
    FlashProxySpec full;
    full.n_layers = 43;
    full.layer_types.push_back(AttnType::kSliding);
    full.layer_types.push_back(AttnType::kSliding);
    full.layer_types.push_back(AttnType::kCSA);
    for (int l = 3; l < 43; ++l) full.layer_types.push_back(l % 2 == 1 ? AttnType::kHCA : AttnType::kCSA);
    const ModelConfig cfg43 = *flash_proxy_config(full);
    const ProxyWeightBytes wb43 = proxy_weight_bytes(cfg43);
    const KvRowBytes rows43 = *kv_row_bytes(cfg43, o.kv_rows);

    json J;
    J["gpu"] = prop.name;
    J["sm_count"] = prop.multiProcessorCount;
    J["cuda_driver"] = driver;
    J["cuda_runtime"] = runtime;
    J["git_sha"] = env_or("DSV4_GIT_SHA", "unknown");
    J["layers"] = cfg.n_layers;
    J["layer_types"] = layer_list;
    J["hash_layers"] = std::min(o.hash_layers, cfg.n_layers);
    J["routing"] = o.skewed ? "skewed" : "uniform";
    J["hot_experts"] = hot;
    J["kv_rows"] = o.kv_rows;
    J["reps"] = o.reps;
    J["warmup"] = o.warmup;
    J["copy_gbs"] = copy_gbs;
    J["read_gbs"] = read_gbs;
    J["bound_gbs"] = bw_gbs;
    J["gemm_bf16_tflops"] = gemm_tf;
    J["timing"] = "CUDA-graph replays of CudaRunner's decode step, CUDA events per replay";
    J["weights"] = {{"streamed", got.streamed}, {"experts", got.experts}, {"embed", got.embed}, {"tables", got.tables}};
    J["gpus"] = G;
    J["weights_per_gpu_note"] = "weights: rank 0's allocation (routed experts = its slice)";
    json jopt = json::object();
    for (const OptionInfo& i : runtime_option_infos()) jopt[i.key] = runtime_option_value(rt, i.key);
    json jrules = json::array();
    for (const TuningRule& r : rt.tuning_rules) jrules.push_back(r.describe());
    J["variants"] = {{"table", runner.variant_table()},
                     {"options", jopt},
                     {"tuning", {{"file", rt.tuning_file}, {"rules", jrules}}}};
    J["pool_pages"] = n_pages;
    J["points"] = json::array();
    std::printf("active kernels:\n%s", runner.variant_table().c_str());

    std::printf("\n%6s %6s %10s %10s %10s %10s %9s %9s %8s %8s %8s %6s %8s %9s %10s %10s %7s\n", "batch", "ctx",
                "step_ms", "p10_ms", "p90_ms", "tok/s", "MB/step", "GB/s", "%copy", "%read", "%floor", "f(B)",
                "TFLOP/s", "head_ms", "layer_ms", "43L_ms", "%roof43");
    std::mt19937 rng(uint32_t(o.seed));
    int exit_code = 0;
    // Batch-major order (every context of a batch, then the next batch), so that a time budget cuts
    // the costly large batches rather than whole contexts. Each point re-fills its B sequences at
    // its context (cheap: the fill writes at HBM speed).
    std::map<int, std::pair<int, double>> last_at;  // context -> (batch, median step us) last measured
    for (int B : batches) {
        for (int L : contexts) {
            if (o.prefill_only) break;
            const int64_t P = layout.pages_for_tokens(int64_t(L) + 1);
            json pt{{"batch", B}, {"context", L}};
            if (int64_t(B) * P > n_pages) {
                std::printf("%6d %6d  skipped: needs %lld pages (%.1f GB of KV pool), the pool has %lld\n", B, L,
                            (long long)(int64_t(B) * P), double(B) * double(P) * double(layout.page_bytes) / 1e9,
                            (long long)n_pages);
                pt["skipped"] = "does not fit the KV pool";
                J["points"].push_back(pt);
                continue;
            }
            // Predicted cost of this point: the last step measured at this context scaled linearly by
            // batch (conservative: weights are shared across the batch), times the launches of a point
            // (forward + warm-up + reps of the step and head graphs, the head counted as a step).
            const auto seen = last_at.find(L);
            const double predict_s = seen == last_at.end() ? 0.0
                                                           : seen->second.second * 1e-6 * double(B) /
                                                                 seen->second.first * (2.0 * (o.reps + o.warmup) + 1.0);
            if (o.time_budget_s > 0 && elapsed() + predict_s > o.time_budget_s) {
                std::printf("%6d %6d  skipped: time budget of %.0f s (%.0f s used, this point ~%.0f s)\n", B, L,
                            o.time_budget_s, elapsed(), predict_s);
                pt["skipped"] = "time budget";
                J["points"].push_back(pt);
                continue;
            }
            const auto t_fill = Clock::now();
            if (Status st = runner.for_each_pool([&](const CudaPoolInfo& pool) {
                    return fill_synthetic_context(pool, layout, cfg, B, L, o.seed * 7919 + uint64_t(L));
                });
                !st.is_ok()) {
                std::fprintf(stderr, "proxy-bench: %s\n", st.message().c_str());
                return 3;
            }
            pt["fill_s"] = std::chrono::duration<double>(Clock::now() - t_fill).count();
            pt["kv_pool_bytes"] = double(B) * double(P) * double(layout.page_bytes);
            std::vector<std::vector<int32_t>> tables(static_cast<size_t>(B)), toks(static_cast<size_t>(B));
            ForwardBatch batch;
            for (int q = 0; q < B; ++q) {
                tables[size_t(q)] = synthetic_page_table(layout, q, L);
                toks[size_t(q)] = {int32_t(rng() % uint32_t(cfg.vocab_size))};
                SeqChunk c;
                c.seq_id = q;
                c.tokens = toks[size_t(q)];
                c.start_pos = L;
                c.want_logits = true;
                c.page_table = tables[size_t(q)];
                batch.seqs.push_back(c);
            }
            // One step through forward(): captures the bucket's graph, returns logits to check.
            std::vector<std::vector<float>> logits;
            if (Status st = runner.forward(batch, logits); !st.is_ok()) {
                std::fprintf(stderr, "proxy-bench: batch %d ctx %d: %s\n", B, L, st.message().c_str());
                return 3;
            }
            int64_t nonfinite = 0;
            for (const auto& r : logits)
                for (float v : r) nonfinite += !std::isfinite(v);
            auto tr = runner.time_decode_graph(batch, o.warmup, o.reps);
            if (!tr) {
                std::fprintf(stderr, "proxy-bench: batch %d ctx %d: %s\n", B, L, tr.status().message().c_str());
                return 3;
            }
            const Spread st = spread(tr->step_us), hd = spread(tr->head_us);
            StepBytesModel m = step_bytes_model(cfg, wb, rows, B, L, hot);
            StepBytesModel m43 = step_bytes_model(cfg43, wb43, rows43, B, L, hot);
            // Per GPU (G 1: unchanged): routed experts / G; the shared expert (FP8, replicated in
            // the model's streamed bytes) is read on rank 0 in ceil(layers / G) layers only.
            auto per_gpu = [&](StepBytesModel& mm, const ModelConfig& c) {
                const double I = c.moe_intermediate_size, d = c.hidden_size;
                const double sh = 3.0 * (I * d + std::ceil(I / 128) * std::ceil(d / 128));
                mm.experts /= G;
                mm.dense -= sh * double(c.n_layers - (c.n_layers + G - 1) / G);
            };
            per_gpu(m, cfg);
            per_gpu(m43, cfg43);
            last_at[L] = {B, st.med};
            const double sec = st.med * 1e-6;
            const double gbs = m.total() / sec / 1e9;
            const double layer_us = (st.med - hd.med) / cfg.n_layers;
            const double us43 = hd.med + 43.0 * layer_us;
            const double roof43_us = m43.total() / (bw_gbs * 1e9) * 1e6;
            const double tflops = m.flops / sec / 1e12;
            // Floor: bytes at the higher bandwidth, or the FLOPs at the GEMM peak when measured and larger.
            const double bytes_floor_us = m.total() / (bw_gbs * 1e9) * 1e6;
            const double flop_floor_us = gemm_tf > 0 ? m.flops / (gemm_tf * 1e12) * 1e6 : 0.0;
            const double floor_us = std::max(bytes_floor_us, flop_floor_us);
            std::printf(
                "%6d %6d %10.3f %10.3f %10.3f %10.0f %9.1f %9.0f %7.1f%% %7.1f%% %7.1f%% %6.3f %8.2f %9.3f "
                "%10.3f %10.2f %6.1f%%%s\n",
                B, L, st.med / 1e3, st.p10 / 1e3, st.p90 / 1e3, B / sec, m.total() / 1e6, gbs, 100.0 * gbs / copy_gbs,
                100.0 * gbs / read_gbs, 100.0 * floor_us / st.med, m.expert_frac, tflops, hd.med / 1e3, layer_us / 1e3,
                us43 / 1e3, 100.0 * roof43_us / us43, nonfinite ? "  NON-FINITE LOGITS" : "");
            std::fflush(stdout);
            if (nonfinite) exit_code = 4;
            pt.update({{"bucket", tr->bucket},
                       {"step_us", {{"median", st.med}, {"p10", st.p10}, {"p90", st.p90}}},
                       {"head_us", {{"median", hd.med}, {"p10", hd.p10}, {"p90", hd.p90}}},
                       {"tokens_per_s", B / sec},
                       {"bytes",
                        {{"total", m.total()},
                         {"dense", m.dense},
                         {"experts", m.experts},
                         {"kv", m.kv},
                         {"kv_per_seq", m.kv_per_seq},
                         {"expert_fraction", m.expert_frac}}},
                       {"gb_s", gbs},
                       {"pct_copy", 100.0 * gbs / copy_gbs},
                       {"pct_read", 100.0 * gbs / read_gbs},
                       {"roofline_us", bytes_floor_us},
                       {"flop_floor_us", flop_floor_us},
                       {"floor_us", floor_us},
                       {"pct_floor", 100.0 * floor_us / st.med},
                       {"flops", m.flops},
                       {"tflops", tflops},
                       {"pct_gemm_peak", gemm_tf > 0 ? 100.0 * tflops / gemm_tf : 0.0},
                       {"per_layer_us", layer_us},
                       {"flash43_us", us43},
                       {"flash43_bytes", m43.total()},
                       {"flash43_roofline_us", roof43_us},
                       {"flash43_pct_roofline", 100.0 * roof43_us / us43},
                       {"nonfinite_logits", nonfinite},
                       {"replays_us", tr->step_us}});
            J["points"].push_back(pt);
        }
    }
    o.op_profile_prefill = rt.op_profile;
    if (!o.verify_tokens.empty() &&
        !run_verify_points(runner, cfg, wb_gpu, rows, layout, o, bw_gbs, gemm_tf, hot, n_pages, J))
        exit_code = 3;
    if (prefill && !run_prefill_points(runner, cfg, wb_gpu, rows, layout, o, gemm_tf, J)) exit_code = 3;
    J["wall_s"] = elapsed();
    std::ofstream f(o.json);
    f << J.dump(1) << "\n";
    std::printf(
        "\nstep = median of %d CUDA-graph replays (p10/p90 shown); bytes per the model above; %%copy, %%read = "
        "achieved GB/s / copy, read kernel GB/s; %%floor = max(bytes / max(copy, read), FLOPs / GEMM peak "
        "when measured) / step; layer_ms = (step - head) / %d; 43L_ms = head + 43 x layer_ms; %%roof43 = "
        "43-layer bytes / max(copy, read) / 43L_ms. JSON: %s (%.0f s)\n",
        o.reps, cfg.n_layers, o.json.c_str(), elapsed());
    cudaStreamDestroy(s);
    return exit_code;
}

}  // namespace dsv4::cli
