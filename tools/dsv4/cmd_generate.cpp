// `dsv4 generate`: placeholder until the reference forward lands.
#include "tools/dsv4/commands.h"

namespace dsv4::cli {
void register_generate(CLI::App& app, CommandContext& ctx) {
    auto* cmd = app.add_subcommand("generate", "Generate tokens from a prompt");
    cmd->callback([&ctx] { ctx.exit_code = 0; });
}
}  // namespace dsv4::cli
