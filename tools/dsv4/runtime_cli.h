// The command-line side of the run-time options (runtime/runtime_options.h): `--option KEY=VALUE`
// (repeatable) on every command that builds a runner, resolved once at start-up over the
// environment and printed as a table.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "runtime/runtime_options.h"

namespace dsv4::cli {

// Adds --option to `cmd`, collecting its values into `settings` (the help lists the keys).
void add_runtime_option_flag(CLI::App* cmd, std::vector<std::string>* settings);

// defaults < environment < `settings`; prints the table to stderr when `print`. Errors: an unknown
// key or a bad value (the message names it).
Result<RuntimeOptions> resolve_runtime_options(const std::vector<std::string>& settings, bool print = true);

}  // namespace dsv4::cli
