// `dsv4 decode-bench` flag parsing; the work is in cmd_decode_bench_cuda.cpp and the
// decode_bench_{attn,moe,gemv}.cpp families it runs (CUDA builds), or cmd_decode_bench_nocuda.cpp.
#include <sstream>

#include "tools/dsv4/cmd_decode_bench.h"
#include "tools/dsv4/commands.h"

namespace dsv4::cli {
namespace {
template <typename T>
std::vector<T> split_list(const std::string& s) {
    std::vector<T> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) {
            if constexpr (std::is_same_v<T, int>)
                out.push_back(std::stoi(item));
            else
                out.push_back(item);
        }
    return out;
}
}  // namespace

void register_decode_bench(CLI::App& app, CommandContext& ctx) {
    auto* cmd = app.add_subcommand("decode-bench", "Kernel-level decode benchmarks on Flash shapes (GPU)");
    auto opts = std::make_shared<DecodeBenchOptions>();
    auto batches = std::make_shared<std::string>("1,8,32,64,128,256");
    auto contexts = std::make_shared<std::string>("1024,8192,32768");
    auto sections = std::make_shared<std::string>("attn,moe,gemv,attn_sweep,moe_sweep,gemv_sweep");
    auto moe_sweep_batches = std::make_shared<std::string>("1,8,64,256");
    cmd->add_option("--out", opts->out, "JSON output file");
    cmd->add_option("--batches", *batches, "comma-separated batch sizes");
    cmd->add_option("--contexts", *contexts, "comma-separated context lengths");
    cmd->add_option("--sections", *sections,
                    "attn,moe,gemv,attn_sweep,moe_sweep,gemv_sweep (and moe_gemm: GEMV vs grouped GEMM at --batches)");
    cmd->add_option("--reps", opts->reps, "graph replays per point");
    cmd->add_option("--rounds", opts->rounds, "A/B rounds in the sweeps");
    cmd->add_flag("--skewed", opts->skewed, "skewed MoE routing (experts 0..31 favoured)");
    cmd->add_option("--moe-sweep-batches", *moe_sweep_batches,
                    "moe_sweep: comma-separated batch sizes (default 1,8,64,256)");
    cmd->add_option("--moe-sweep-variants", opts->moe_sweep_variants,
                    "moe_sweep: comma-separated MoE expert variant names to run (default: every variant)");
    cmd->add_option("--gemv-sweep-shapes", opts->gemv_sweep_shapes,
                    "gemv_sweep: comma-separated shape names (wq_a, wq_b, wkv, wo_a, wo_b, shared_w13, shared_w1, "
                    "shared_w2, idx_wq_b, router, csa_compressor, lm_head), run in that order at --batches with "
                    "f32 x (the runtime's form) and the columns old (pre-K-chunk heuristic) and new (heuristic "
                    "now); default: wq_b, wo_b, wkv at batches 1,8,32,128 with bf16 x");
    cmd->add_option("--gemv-sweep-variants", opts->gemv_sweep_variants,
                    "gemv_sweep: comma-separated dense GEMV variant names of the explicit variant columns "
                    "(default: every legal variant)");
    cmd->add_flag("--gemv-sweep-x-bf16", opts->gemv_sweep_x_bf16,
                  "gemv_sweep: the --gemv-sweep-shapes shapes take bf16 x instead of f32");
    cmd->callback([&ctx, opts, batches, contexts, sections, moe_sweep_batches] {
        opts->batches = split_list<int>(*batches);
        opts->contexts = split_list<int>(*contexts);
        opts->sections = split_list<std::string>(*sections);
        opts->moe_sweep_batches = split_list<int>(*moe_sweep_batches);
        ctx.exit_code = run_decode_bench(*opts);
    });
}

}  // namespace dsv4::cli
