// Standalone `dsv4-proxy-bench`: the same benchmark as `dsv4 proxy-bench`, linked without the
// tokenizer/server (no PCRE2), so it can be built here and carried to the GPU machine on its own.
#include "tools/dsv4/commands.h"

int main(int argc, char** argv) {
    CLI::App app{"dsv4-proxy-bench: decode throughput of the DeepSeek-V4-Flash proxy through the CUDA runner"};
    app.require_subcommand(1);
    dsv4::cli::CommandContext ctx;
    dsv4::cli::register_proxy_bench(app, ctx);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    return ctx.exit_code;
}
