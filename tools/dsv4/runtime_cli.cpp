#include "tools/dsv4/runtime_cli.h"

#include <cstdio>
#include <cstdlib>

#include "runtime/tuning_select.h"

namespace dsv4::cli {

void add_runtime_option_flag(CLI::App* cmd, std::vector<std::string>* settings, std::string* tuning) {
    std::string keys;
    for (const OptionInfo& i : runtime_option_infos()) keys += (keys.empty() ? "" : ", ") + std::string(i.key);
    cmd->add_option("--option", *settings,
                    "run-time switch KEY=VALUE, repeatable; overrides the DSV4_* variable (docs/env.md) and the "
                    "tuning file. Keys: " +
                        keys)
        ->take_all()
        ->allow_extra_args(false);
    if (tuning)
        cmd->add_option("--tuning", *tuning,
                        "tuning file (docs/tuning.md): kernel variants per op and shape class, with the measurements "
                        "that chose them; "
                        "default: the newest file for this GPU and model shape in $DSV4_TUNING_DIR or "
                        "~/.config/dsv4/tuning; 'none': no file (the heuristics)");
}

Result<RuntimeOptions> resolve_runtime_options(const std::vector<std::string>& settings, bool print,
                                               const RunnerOptions* runner, const std::string& tuning) {
    std::optional<TuningFile> file;
    if (runner && runner->backend == "cuda") {
        DSV4_ASSIGN_OR_RETURN(const ModelConfig cfg, runner_model_config(*runner));
        const TuningKey here = this_machine_tuning_key(cfg);
        // The tuning directories are start-up configuration, read here with the other variables.
        DSV4_ASSIGN_OR_RETURN(
            TuningChoice choice,
            choose_tuning_file(tuning, here, tuning_search_dirs([](const char* k) { return std::getenv(k); }),
                               build_git_sha()));
        if (print)
            for (const std::string& line : choice.log) std::fprintf(stderr, "%s\n", line.c_str());
        file = std::move(choice.file);
    } else if (!tuning.empty() && tuning != "none" && print) {
        std::fprintf(stderr, "warning: --tuning %s ignored: tuning files choose CUDA kernels (--backend cuda)\n",
                     tuning.c_str());
    }
    OptionOrigins origins;
    std::vector<std::string> notes;
    DSV4_ASSIGN_OR_RETURN(RuntimeOptions o, load_runtime_options(settings, &origins, file ? &*file : nullptr, &notes));
    if (print) {
        std::fprintf(stderr, "%s", runtime_options_table(o, origins).c_str());
        for (const std::string& n : notes) std::fprintf(stderr, "%s\n", n.c_str());
    }
    return o;
}

}  // namespace dsv4::cli
