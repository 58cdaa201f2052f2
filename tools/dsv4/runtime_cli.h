// The command-line side of the run-time options (runtime/runtime_options.h): `--option KEY=VALUE`
// (repeatable) and `--tuning FILE` on every command that builds a runner, resolved once at start-up
// over the tuning file and the environment and printed as a table.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "runtime/runner_factory.h"
#include "runtime/runtime_options.h"

namespace dsv4::cli {

// Adds --option to `cmd`, collecting its values into `settings` (the help lists the keys), and, when
// `tuning` is not null, --tuning FILE (a path, or "none").
void add_runtime_option_flag(CLI::App* cmd, std::vector<std::string>* settings, std::string* tuning = nullptr);

// defaults < tuning file < environment < `settings`; prints the table (and which tuning file, with
// its warnings) to stderr when `print`. The tuning file is looked for only when `runner` is given and
// its backend is cuda: the one `tuning` names, or the default for the GPU and model
// (runtime/tuning_select.h). Errors: an unknown key or a bad value (the message names it), an
// unreadable or invalid tuning file named by --tuning.
Result<RuntimeOptions> resolve_runtime_options(const std::vector<std::string>& settings, bool print = true,
                                               const RunnerOptions* runner = nullptr, const std::string& tuning = "");

}  // namespace dsv4::cli
