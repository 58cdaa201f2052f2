// Tuning files (issue 16 item 2): which kernel variant, with which parameters, each op uses for
// each shape class, as chosen by measurement on one GPU, driver, CUDA version and model shape,
// with the measurement that chose it. `dsv4 serve`, `generate` and `proxy-bench` read one with
// `--tuning FILE` (or find the default for the detected GPU, tools/dsv4/tuning_cli.h); its
// "options" sit between the defaults and the environment (runtime_options.h), its rules go to the
// runner, which resolves the variant names against the build's registries (an unknown name, or a
// variant illegal for a shape the model produces, is an error naming the file and the rule).
//
// Format (JSON, docs/tuning.md):
//   {"schema": "dsv4.tuning.v1",
//    "key": {"gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "model_shape": "..."},
//    "made": {"date": "2026-12-03", "git_sha": "d28aadd", "command": "dsv4 tune ..."},
//    "options": {"split_kv_target_ctas": 256, "moe_gemm_min_tokens": 128},
//    "rules": [{"op": "sparse_decode", "tokens": [1, 8], "context": [0, 8192],
//               "variant": "sparse_decode.bt64_bh32_w4_s2.sm90", "split_kv_target_ctas": 512,
//               "measurement": {...}}]}
// A rule's shape class is the intersection of its ranges (inclusive; an absent range matches any
// value); the first rule of an op whose class holds the call wins. Host-only; no CUDA types.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace dsv4 {

// Inclusive range of a shape dimension.
struct ShapeRange {
    int64_t lo = 0;
    int64_t hi = std::numeric_limits<int64_t>::max();
    bool any() const { return lo == 0 && hi == std::numeric_limits<int64_t>::max(); }
    bool contains(int64_t v) const { return v >= lo && v <= hi; }
};

// The shape of one call, as the runner sees it; -1 for a dimension the op does not have.
struct ShapeQuery {
    int64_t tokens = -1;           // tokens in the step (decode: sequences in the batch)
    int64_t rows_per_expert = -1;  // routed experts: ceil(tokens x top-k / experts), the mean rows per expert
    int64_t context = -1;          // attention: the longest sequence of the step, in tokens
};

// The ops a rule can name and the shape dimensions each one has.
enum class TunedOp { kSparseDecode, kDenseGemv, kMoeExpert, kMoeGrouped };
const char* tuned_op_name(TunedOp op);  // "sparse_decode", "dense_gemv", "moe_expert", "moe_grouped"

struct TuningRule {
    TunedOp op = TunedOp::kDenseGemv;
    ShapeRange tokens, rows_per_expert, context;
    std::string variant;                      // the op's registry name; "" keeps the heuristic (parameters only)
    int split_kv_target_ctas = 0;             // sparse_decode only; 0: the run-time option's value
    std::string measurement_json;             // the measurement that chose it, kept verbatim ("" when absent)
    bool matches(const ShapeQuery& q) const;  // every constrained dimension of q in range
    std::string describe() const;  // "sparse_decode tokens 1-8 context 0-8192 -> NAME, split_kv_target_ctas 512"
};

// What a tuning file was made for.
struct TuningKey {
    std::string gpu;          // the CUDA device name (cudaDeviceProp::name)
    std::string driver;       // the NVIDIA driver version, e.g. "580.159.04" ("" when unknown)
    std::string cuda;         // the CUDA runtime version, e.g. "13.0"
    std::string model_shape;  // model_shape_key() of the model it was tuned on
};

struct TuningFile {
    std::string path;  // where it was read from ("" when built in memory)
    TuningKey key;
    std::string made_date, made_git_sha, made_command;
    std::vector<std::pair<std::string, std::string>> options;  // runtime option key -> value text, by key
    std::vector<TuningRule> rules;
};

// Parses a tuning file's text. `origin` names it in errors. Errors (kInvalidArgument, the message
// names origin and the field, e.g. "rules[2].tokens"): not JSON, another schema, a missing key
// field, an unknown op, a range that is not [lo, hi] with 0 <= lo <= hi, a dimension the op does
// not have (dense_gemv rules take tokens only; moe rules tokens and rows_per_expert; sparse_decode
// tokens and context), a parameter the op does not take, a rule with neither variant nor
// parameter, or two rules of one op whose classes overlap. Option keys and values are checked when
// they are applied (runtime_options.h), variant names by the runner.
Result<TuningFile> parse_tuning_json(std::string_view text, std::string_view origin);
// Reads and parses `path`. Errors: the file cannot be read (kNotFound / kInvalidArgument), as above.
Result<TuningFile> read_tuning_file(const std::string& path);
// The file's JSON text (what `dsv4 tune` writes); parse_tuning_json(tuning_file_json(f)) == f.
std::string tuning_file_json(const TuningFile& f);

// The first rule of `op` whose class holds q, nullptr when none.
const TuningRule* find_tuning_rule(const std::vector<TuningRule>& rules, TunedOp op, const ShapeQuery& q);

// Differences between the key a file was made for and this machine, one line each (empty: none).
// A different GPU or model shape is a mismatch (`mismatch` set: the file should not be used by
// default); a different driver, CUDA version or build (git sha) only a warning.
std::vector<std::string> tuning_key_differences(const TuningFile& f, const TuningKey& here,
                                                std::string_view here_git_sha, bool* mismatch);

}  // namespace dsv4
