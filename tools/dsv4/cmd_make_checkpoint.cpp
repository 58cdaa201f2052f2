// `dsv4 make-checkpoint --synthetic-flash --layers N --out DIR`: writes a synthetic checkpoint in
// the official DeepSeek-V4-Flash layout (model/synthetic_checkpoint.h), streamed to disk, as a
// full-size fixture for the checkpoint loading path.
#include <chrono>
#include <cstdio>
#include <memory>

#include "model/synthetic_checkpoint.h"
#include "tools/dsv4/commands.h"

namespace dsv4::cli {
namespace {

struct MakeCheckpointOptions {
    bool synthetic_flash = false;
    std::string out;
    SyntheticCheckpointOptions w;
    double shard_gb = 4.0;
};

int run_make_checkpoint(MakeCheckpointOptions o) {
    if (!o.synthetic_flash) {
        std::fprintf(stderr, "dsv4 make-checkpoint: only --synthetic-flash is implemented\n");
        return 2;
    }
    o.w.shard_bytes = uint64_t(o.shard_gb * 1e9);
    const auto t0 = std::chrono::steady_clock::now();
    if (Status s = write_synthetic_flash_checkpoint(o.out, o.w); !s.is_ok()) {
        std::fprintf(stderr, "dsv4 make-checkpoint: %s\n", s.to_string().c_str());
        return 1;
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("dsv4 make-checkpoint: %d-layer synthetic Flash checkpoint in %s (%.1f s)\n", o.w.n_layers,
                o.out.c_str(), sec);
    return 0;
}

}  // namespace

void register_make_checkpoint(CLI::App& app, CommandContext& ctx) {
    auto o = std::make_shared<MakeCheckpointOptions>();
    auto* cmd = app.add_subcommand("make-checkpoint", "write a synthetic checkpoint in the official layout");
    cmd->add_flag("--synthetic-flash", o->synthetic_flash, "DeepSeek-V4-Flash shapes, names, dtypes (spec §4.1)");
    cmd->add_option("--layers", o->w.n_layers, "num_hidden_layers (43: full depth)");
    cmd->add_option("--out", o->out, "output directory")->required();
    cmd->add_option("--seed", o->w.seed, "generator seed");
    cmd->add_option("--shard-gb", o->shard_gb, "shard size in GB");
    cmd->add_option("--threads", o->w.threads, "generator threads (0: all cores)");
    cmd->add_option("--parallel-shards", o->w.parallel_shards,
                    "shard files written at once (0: one per thread); the bytes do not depend on it");
    cmd->callback([o, &ctx] { ctx.exit_code = run_make_checkpoint(*o); });
}

}  // namespace dsv4::cli
