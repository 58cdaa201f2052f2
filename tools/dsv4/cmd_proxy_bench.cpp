// `dsv4 proxy-bench` flag parsing; the work is in cmd_proxy_bench_cuda.cpp (CUDA builds) or
// cmd_proxy_bench_nocuda.cpp.
#include <sstream>

#include "tools/dsv4/cmd_proxy_bench.h"
#include "tools/dsv4/runtime_cli.h"
#include "tools/dsv4/commands.h"

namespace dsv4::cli {
namespace {
std::vector<int> int_list(const std::string& s) {
    std::vector<int> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(std::stoi(item));
    return out;
}
}  // namespace

void register_proxy_bench(CLI::App& app, CommandContext& ctx) {
    auto* cmd = app.add_subcommand(
        "proxy-bench", "Decode throughput of the Flash proxy through the CUDA runner (GPU; synthetic weights)");
    auto o = std::make_shared<ProxyBenchOptions>();
    auto batches = std::make_shared<std::string>("1,8,32,64,128,256,512");
    auto contexts = std::make_shared<std::string>("1024,8192,32768");
    cmd->add_option("--json", o->json, "JSON output file");
    cmd->add_option("--layers", o->layers, "decoder layers (default 20)");
    cmd->add_option("--layer-types", o->layer_types,
                    "comma-separated sliding|csa|hca, one per layer (default: 2 sliding, then csa/hca alternating)");
    cmd->add_option("--hash-layers", o->hash_layers, "first N layers hash-routed (default 3)");
    cmd->add_option("--batches", *batches, "comma-separated batch sizes");
    cmd->add_option("--contexts", *contexts, "comma-separated context lengths (tokens before the decoded one)");
    cmd->add_option("--reps", o->reps, "timed graph replays per point");
    cmd->add_option("--warmup", o->warmup, "untimed replays per point");
    cmd->add_flag("--skewed", o->skewed, "skewed routing: only --hot-experts experts are used");
    cmd->add_option("--hot-experts", o->hot_experts, "experts used with --skewed (default 32)");
    cmd->add_option(
        "--kv-rows", o->kv_rows,
        "KV row storage of the runner: fp8 (reference 584-byte rows, default), bf16 or f32 (= --option kv_rows=...)");
    add_runtime_option_flag(cmd, &o->options, &o->tuning);
    cmd->add_option("--seed", o->seed, "weights/context seed");
    cmd->add_option("--reserve-gb", o->reserve_gb, "device memory kept free (GB)");
    cmd->add_option("--time-budget", o->time_budget_s, "seconds; later points are skipped once exceeded (0: none)");
    cmd->add_flag("!--no-gemm-peak", o->gemm_peak, "skip the cuBLAS bf16 GEMM peak measurement");
    cmd->add_option("--gpus", o->gpus, "expert parallel over this many GPUs (NCCL; default 1)");
    auto plens = std::make_shared<std::string>(), pusers = std::make_shared<std::string>("1");
    cmd->add_option("--prefill-lens", *plens, "comma-separated prompt lengths of the prefill points (none by default)");
    cmd->add_option("--prefill-users", *pusers, "comma-separated concurrent prompts per prefill point (default 1)");
    cmd->add_option("--prefill-chunk", o->prefill_chunk, "prefill: tokens of one sequence per step (default 8192)");
    cmd->add_option("--prefill-step", o->prefill_step, "prefill: tokens of all sequences per step (default 8192)");
    cmd->add_option("--prefill-reps", o->prefill_reps, "prefill: timed repetitions per point (default 3)");
    cmd->add_flag("--prefill-only", o->prefill_only, "prefill points only (no decode points)");
    auto vtoks = std::make_shared<std::string>();
    cmd->add_option("--verify-tokens", *vtoks,
                    "comma-separated n = k + 1: speculative-decoding verify steps of n tokens per sequence at every "
                    "batch and context, beside the one-token step (none by default)");
    cmd->add_flag("--mtp-draft", o->mtp_draft,
                  "with --verify-tokens: add a synthetic MTP block and time the draft step as its graph (else the "
                  "draft step is estimated from a decode point)");
    cmd->callback([&ctx, o, batches, contexts, plens, pusers, vtoks] {
        o->verify_tokens = int_list(*vtoks);
        o->batches = int_list(*batches);
        o->contexts = int_list(*contexts);
        o->prefill_lens = int_list(*plens);
        o->prefill_users = int_list(*pusers);
        ctx.exit_code = run_proxy_bench(*o);
    });
}

}  // namespace dsv4::cli
