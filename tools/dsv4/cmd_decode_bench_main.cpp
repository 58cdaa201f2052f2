// Standalone `dsv4-decode-bench`: the same benchmark as `dsv4 decode-bench`, linked only against
// the CUDA decode kernels, so it can be built and carried to the GPU machine on its own.
#include "tools/dsv4/commands.h"

int main(int argc, char** argv) {
    CLI::App app{"dsv4-decode-bench: decode kernel benchmarks on DeepSeek-V4-Flash shapes"};
    app.require_subcommand(1);
    dsv4::cli::CommandContext ctx;
    dsv4::cli::register_decode_bench(app, ctx);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    return ctx.exit_code;
}
