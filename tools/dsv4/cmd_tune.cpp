// `dsv4 tune` flag parsing; the work is in cmd_tune_cuda.cpp (CUDA builds) or cmd_tune_nocuda.cpp.
#include <memory>

#include "tools/dsv4/cmd_tune.h"
#include "tools/dsv4/commands.h"
#include "tools/dsv4/runtime_cli.h"

namespace dsv4::cli {

void register_tune(CLI::App& app, CommandContext& ctx) {
    auto* cmd = app.add_subcommand(
        "tune", "Choose kernel variants by measurement on this GPU (Flash proxy decode steps); writes a tuning file");
    auto o = std::make_shared<TuneCliOptions>();
    cmd->add_option("--op", o->op, "sparse_decode | dense_gemv | moe_expert | moe_grouped | all")
        ->check(CLI::IsMember({"sparse_decode", "dense_gemv", "moe_expert", "moe_grouped", "all"}))
        ->capture_default_str();
    cmd->add_option(
           "--variants", o->variants,
           "candidates: all | default-tile (sparse_decode: the heuristic's tile, other warps/stages) | NAME,NAME")
        ->capture_default_str();
    cmd->add_option("--split-kv-targets", o->split_kv_targets,
                    "sparse_decode split-KV targets (CTAs) to try with each variant; 0 = the option's")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--batches", o->batches, "batch sizes; batch b_i stands for (b_{i-1}, b_i], the last for all above")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--contexts", o->contexts, "contexts (tokens before the decoded one), classes as for batches")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--layers", o->layers, "proxy layers")->capture_default_str();
    cmd->add_option("--pairs", o->pairs, "end-to-end ABBA pairs per candidate and class (>= 2)")->capture_default_str();
    cmd->add_option("--reps", o->reps, "graph replays per end-to-end measurement (their median)")
        ->capture_default_str();
    cmd->add_option("--warmup", o->warmup, "untimed replays before each measurement")->capture_default_str();
    cmd->add_option("--confidence", o->confidence, "1 - the family-wise error rate over the run's comparisons")
        ->capture_default_str();
    cmd->add_option("--max-logit-error", o->max_logit_error,
                    "correctness gate of ops without an fp64 op check (sparse_decode has one): max |logit "
                    "difference| from the heuristics / their sd")
        ->capture_default_str();
    cmd->add_option("--min-effect", o->min_effect,
                    "a faster/slower verdict also needs |step ratio - 1| >= this (and --calibrate uses it too)")
        ->capture_default_str();
    cmd->add_option("--kernel-keep", o->kernel_keep,
                    "kernel stage: drop a candidate whose op takes more than this x the heuristics'")
        ->capture_default_str();
    cmd->add_option("--time-budget", o->time_budget_s, "seconds; candidates not started by then are skipped (0: none)");
    cmd->add_option("--out", o->out,
                    "tuning file to write (merged with its rules for other ops); default: in $DSV4_TUNING_DIR or "
                    "~/.config/dsv4/tuning, named for the GPU and model shape");
    cmd->add_option("--ledger", o->ledger, "machine-written ledger, JSON lines (appended)")->capture_default_str();
    cmd->add_option("--ledger-md", o->ledger_md, "its Markdown section (appended)")->capture_default_str();
    cmd->add_option("--kv-rows", o->kv_rows, "KV row storage: fp8 (default), bf16 or f32");
    add_runtime_option_flag(cmd, &o->options);
    cmd->add_option("--calibrate", o->calibrate,
                    "instead of tuning: N A/A comparisons and N against a deliberately slowed step at the first "
                    "batch and context; false-verdict and detection rates with Wilson intervals to the ledger");
    cmd->add_option("--slowdown", o->slowdown, "--calibrate: the slowed step's extra time, a fraction of the step")
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "weights/context seed")->capture_default_str();
    cmd->add_option("--reserve-gb", o->reserve_gb, "device memory kept free (GB)")->capture_default_str();
    cmd->callback([&ctx, o] {
        o->command = ctx.command_line;
        ctx.exit_code = run_tune_cmd(*o);
    });
}

}  // namespace dsv4::cli
