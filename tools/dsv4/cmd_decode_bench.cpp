// `dsv4 decode-bench` flag parsing; the work is in cmd_decode_bench_cuda.cpp (CUDA builds) or
// cmd_decode_bench_nocuda.cpp.
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
    cmd->add_option("--out", opts->out, "JSON output file");
    cmd->add_option("--batches", *batches, "comma-separated batch sizes");
    cmd->add_option("--contexts", *contexts, "comma-separated context lengths");
    cmd->add_option("--sections", *sections,
                    "attn,moe,gemv,attn_sweep,moe_sweep,gemv_sweep (and moe_gemm: GEMV vs grouped GEMM at --batches)");
    cmd->add_option("--reps", opts->reps, "graph replays per point");
    cmd->add_option("--rounds", opts->rounds, "A/B rounds in the sweeps");
    cmd->add_flag("--skewed", opts->skewed, "skewed MoE routing (experts 0..31 favoured)");
    cmd->callback([&ctx, opts, batches, contexts, sections] {
        opts->batches = split_list<int>(*batches);
        opts->contexts = split_list<int>(*contexts);
        opts->sections = split_list<std::string>(*sections);
        ctx.exit_code = run_decode_bench(*opts);
    });
}

}  // namespace dsv4::cli
