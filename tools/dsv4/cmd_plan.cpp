// `dsv4 plan`: the multi-GPU memory plan (issue 8) — which experts each rank owns, what attention
// weights each holds (data- or tensor-parallel), weight bytes per rank, KV per sequence, and how
// many sequences of a context fit. Sizes the real Flash config by default (no checkpoint needed).
//
//   dsv4 plan --gpus 2                       # 2 x H200, Flash, DP attention, 8K context
//   dsv4 plan --gpus 4 --attn tp --kv-rows fp8 --context 131072
//   dsv4 plan --gpus 2 --model /path/to/ckpt # any config.json (dir or file)
#include <cstdio>
#include <filesystem>
#include <memory>

#include "dist/flash_config.h"
#include "dist/memory_plan.h"
#include "model/weights.h"
#include "tools/dsv4/commands.h"

namespace dsv4::cli {
namespace {

struct PlanArgs {
    int gpus = 2;
    std::string attn = "dp";
    std::string model = "flash";
    int64_t context = 8192;
    int64_t batch = 0;
    std::string kv_rows = "fp8";  // the CUDA runner's default row format
    double gpu_gib = 140.0;
    double reserve_gib = 8.0;
};

Result<ModelConfig> plan_config(const std::string& m) {
    if (m == "flash") return dist::flash_model_config();
    if (m == "tiny") return tiny_model_config();
    namespace fs = std::filesystem;
    const fs::path p = fs::is_directory(m) ? fs::path(m) / "config.json" : fs::path(m);
    return ModelConfig::from_file(p.string());
}

int run_plan(const PlanArgs& a) {
    auto cfg = plan_config(a.model);
    if (!cfg.is_ok()) {
        std::fprintf(stderr, "dsv4 plan: %s\n", cfg.status().to_string().c_str());
        return 2;
    }
    auto attn = dist::parse_attn_scheme(a.attn);
    auto rows = dist::parse_kv_row_format(a.kv_rows);
    for (const Status& s : {attn.status(), rows.status()})
        if (!s.is_ok()) {
            std::fprintf(stderr, "dsv4 plan: %s\n", s.to_string().c_str());
            return 2;
        }
    dist::PlanOptions o;
    o.n_ranks = a.gpus;
    o.attn = *attn;
    o.context = a.context;
    o.batch = a.batch;
    o.kv_rows = *rows;
    o.gpu_bytes = a.gpu_gib * double(1ull << 30);
    o.reserve_bytes = a.reserve_gib * double(1ull << 30);
    // Flash-style storage (FP8 dense, MXFP4 experts) unless the model keeps BF16 experts (tiny).
    o.inventory.dense_fp8 = cfg->expert_format != ExpertFormat::kBf16;
    auto plan = dist::make_memory_plan(*cfg, o);
    if (!plan.is_ok()) {
        std::fprintf(stderr, "dsv4 plan: %s\n", plan.status().to_string().c_str());
        return 2;
    }
    std::fputs(dist::format_memory_plan(*cfg, *plan).c_str(), stdout);
    return plan->fits() ? 0 : 1;
}

}  // namespace

void register_plan(CLI::App& app, CommandContext& ctx) {
    auto args = std::make_shared<PlanArgs>();
    CLI::App* cmd =
        app.add_subcommand("plan", "Multi-GPU memory plan: experts, attention shards, bytes and KV per GPU");
    cmd->add_option("--gpus", args->gpus, "number of GPUs (ranks); must divide the routed experts")
        ->capture_default_str();
    cmd->add_option("--attn", args->attn, "attention scheme: dp (replicated, own sequences) or tp (heads split)")
        ->capture_default_str();
    cmd->add_option("--model", args->model, "flash (built-in config), tiny, or a config.json / checkpoint dir")
        ->capture_default_str();
    cmd->add_option("--context", args->context, "tokens per sequence for the KV capacity")->capture_default_str();
    cmd->add_option("--batch", args->batch, "sequences in flight over all GPUs (0: capacity only)")
        ->capture_default_str();
    cmd->add_option("--kv-rows", args->kv_rows, "KV row format: f32, bf16 or fp8")->capture_default_str();
    cmd->add_option("--gpu-mem-gib", args->gpu_gib, "memory of one GPU in GiB")->capture_default_str();
    cmd->add_option("--reserve-gib", args->reserve_gib, "per GPU: context, activations, workspaces, NCCL buffers")
        ->capture_default_str();
    cmd->callback([args, &ctx] { ctx.exit_code = run_plan(*args); });
}

}  // namespace dsv4::cli
