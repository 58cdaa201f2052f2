// dsv4: DeepSeek-V4 inference engine. Thin dispatcher over subcommands (see commands.h).
#include <cstdio>
#include <string>

#include "tools/dsv4/commands.h"

int main(int argc, char** argv) {
    CLI::App app{"dsv4: DeepSeek-V4 inference engine and OpenAI-compatible server"};
    app.require_subcommand(1);
    dsv4::cli::CommandContext ctx;
    for (int i = 0; i < argc; ++i) ctx.command_line += (i ? " " : "") + std::string(argv[i]);
    dsv4::cli::register_generate(app, ctx);
    dsv4::cli::register_bench(app, ctx);
    dsv4::cli::register_tokenize(app, ctx);
    dsv4::cli::register_serve(app, ctx);
    dsv4::cli::register_decode_bench(app, ctx);
    dsv4::cli::register_proxy_bench(app, ctx);
    dsv4::cli::register_plan(app, ctx);
    dsv4::cli::register_make_checkpoint(app, ctx);
    dsv4::cli::register_tune(app, ctx);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    return ctx.exit_code;
}
