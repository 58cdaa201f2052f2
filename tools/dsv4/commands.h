// Subcommands of the single `dsv4` executable. Each lives in its own cmd_*.cpp and registers
// itself on the CLI11 app; the callback it installs sets `exit_code`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace dsv4::cli {

struct CommandContext {
    int exit_code = 0;
    std::string command_line;  // argv joined by spaces (for records that name their command)
};

void register_generate(CLI::App& app, CommandContext& ctx);
void register_bench(CLI::App& app, CommandContext& ctx);
// `dsv4 bench series`, a subcommand of `bench` (cmd_bench_series.cpp); returns it so that
// `bench` can tell when it ran instead of a sweep.
CLI::App* register_bench_series(CLI::App& bench, CommandContext& ctx);
void register_tokenize(CLI::App& app, CommandContext& ctx);
void register_serve(CLI::App& app, CommandContext& ctx);
void register_decode_bench(CLI::App& app, CommandContext& ctx);
void register_proxy_bench(CLI::App& app, CommandContext& ctx);
void register_plan(CLI::App& app, CommandContext& ctx);
void register_make_checkpoint(CLI::App& app, CommandContext& ctx);
void register_tune(CLI::App& app, CommandContext& ctx);

}  // namespace dsv4::cli
