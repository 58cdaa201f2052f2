// Which tuning file a run uses (issue 16 item 2): the one `--tuning FILE` names, or the default for
// this machine's GPU and the model's shape found in the tuning directories; with warnings when the
// file was made on another driver, CUDA version or build. See docs/tuning.md.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "runtime/tuning_file.h"

namespace dsv4 {

// The model dimensions that fix every op's shape: width, heads, head and rope dims, LoRA ranks, output
// groups, window, indexer, experts, top-k, mHC width. Not the layer count or the layer schedule: a
// file tuned on the 20-layer proxy applies to the 43-layer model. E.g.
// "d4096 h64x512 rope64 q1024 o8x1024 w128 idx64x128k512 e256x2048k6 hc4".
std::string model_shape_key(const ModelConfig& cfg);

// This machine's key for `cfg`: the CUDA device 0 name (gpu "" in a build without CUDA or without a
// visible GPU), the driver version (/proc/driver/nvidia/version), the CUDA runtime version.
TuningKey this_machine_tuning_key(const ModelConfig& cfg);

// The driver release in the first line of /proc/driver/nvidia/version: the first number with a dot
// after "Kernel Module" ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release
// Build ..." -> "580.159.04"; the "x86_64" before it is not one). "" when there is none.
std::string nvidia_driver_version(const std::string& first_line);

// The git commit this binary was configured from ("" when unknown; CMake reads it at configure time).
std::string build_git_sha();

// Directories searched for a default tuning file, in order: $DSV4_TUNING_DIR,
// $XDG_CONFIG_HOME/dsv4/tuning (else $HOME/.config/dsv4/tuning). `env` returns nullptr for unset.
std::vector<std::string> tuning_search_dirs(const std::function<const char*(const char*)>& env);

struct TuningChoice {
    std::optional<TuningFile> file;
    std::vector<std::string> log;  // what was chosen and why, and the key's differences (warnings)
};

// `flag`: a path (read it; a key difference is a warning, never an error: the user asked for it), "none"
// (no file), or "" (the default: among the *.json files of `dirs` whose key matches `here`'s GPU and
// model shape, the one made last by its "made.date", ties broken by file name; none found: no file).
// Errors: an unreadable or invalid file named by the flag; a default candidate that does not parse is
// a warning in the log and skipped.
Result<TuningChoice> choose_tuning_file(const std::string& flag, const TuningKey& here,
                                        const std::vector<std::string>& dirs, const std::string& here_git_sha);

}  // namespace dsv4
