#include "tools/dsv4/runtime_cli.h"

#include <cstdio>

namespace dsv4::cli {

void add_runtime_option_flag(CLI::App* cmd, std::vector<std::string>* settings) {
    std::string keys;
    for (const OptionInfo& i : runtime_option_infos()) keys += (keys.empty() ? "" : ", ") + std::string(i.key);
    cmd->add_option("--option", *settings,
                    "run-time switch KEY=VALUE, repeatable; overrides the DSV4_* variable (docs/env.md). Keys: " + keys)
        ->take_all()
        ->allow_extra_args(false);
}

Result<RuntimeOptions> resolve_runtime_options(const std::vector<std::string>& settings, bool print) {
    OptionOrigins origins;
    DSV4_ASSIGN_OR_RETURN(RuntimeOptions o, load_runtime_options(settings, &origins));
    if (print) std::fprintf(stderr, "%s", runtime_options_table(o, origins).c_str());
    return o;
}

}  // namespace dsv4::cli
