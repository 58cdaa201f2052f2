// Every run-time switch of the runners and kernels in one structure (issue 16, item 1).
//
// Filled once at start-up, in rising precedence, from the defaults below, a tuning file (its
// "options" and its per-shape rules, runtime/tuning_file.h), the environment (DSV4_* variables,
// docs/env.md) and the command line
// (`--option KEY=VALUE`, repeatable); printed as a table; then passed down by value: RunnerOptions ->
// CudaRunnerOptions -> the ops' argument structures (WeightDesc, MoeArgs, SparseDecodeArgs, ...).
// Nothing below the runner factory reads the environment. Tests set fields directly.
//
// Host-only; no CUDA types. Kernel variant names are checked against the variant registries by the
// CUDA runner at init (an unknown name is an error there, since only a CUDA build knows them).
#pragma once

#include <array>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runtime/tuning_file.h"

namespace dsv4 {

struct RuntimeOptions {
    // K=V row storage on the GPU (window ring + main compressed rows, model/kv_rows.h): "fp8" (the
    // reference 584-byte layout), "bf16" or "f32" (exact).
    std::string kv_rows = "fp8";
    // FP8/BF16 linears and MXFP4 MoE layers on the fast decode kernels where legal (bf16
    // activations); false: the correct-first f32 kernels for every op.
    bool fast_kernels = true;
    // Decode attention through sparse_decode (sm90 mma) where legal; false: the CUDA-core attn_decode.
    bool fast_attention = true;
    bool cuda_graphs = true;  // decode steps replayed as CUDA graphs
    // With cuda_graphs: capture every batch bucket's decode graph (and each sparse_decode rule's) when
    // the runner starts, as vLLM and SGLang do, so that no step waits for a capture and the memory the
    // graphs take is in use before the first request; false: each on its first use. Ledger E43: the
    // 20-layer proxy's 16 buckets in 0.09 s; the same bits as first-use captures (CudaTuning test).
    bool capture_graphs_at_start = true;
    // Decode graph buckets: 1, 2, 4, 8, 16, then multiples of 16 to 128, of 32 to 256, of 64 above (a
    // batch pads by at most 1/4 above 16 sequences: 130 runs as 144, not 256); false: powers of two.
    bool fine_graph_buckets = true;
    // With cuda_graphs: steps in which every sequence runs the same number n of tokens, 2 <= n <=
    // StepGemmThresholds::kVerifyShapedMaxTokens (speculative decoding's verify steps: the last token
    // and n - 1 drafts), replay a graph per (decode batch bucket, n), captured on first use; false:
    // such steps launch eagerly (ledger E59: the graphs take 11-14% off such steps at batch 1, 3-7% at
    // batch 8-64).
    bool verify_graphs = true;
    // With cuda_graphs: in a step that replays a graph, speculative decoding's work before it (the
    // rollback, the MTP block's catch-up pass over each sequence's k + 1 pending positions, the k - 1
    // recursive draft passes, the picks) replays a graph too, per (decode batch bucket, the cycle's
    // shape), captured on first use; false: launched eagerly (several hundred launches per step; ledger
    // E61: the graph takes 1-2% off a served speculating step and 70% off the host's time per step).
    bool spec_graphs = true;
    // With cuda_graphs: every captured graph's edges from a kernel to one of dsv4's kernels (its only
    // predecessor) become programmatic (runtime/cuda_graph_pdl.h), so the next kernel's CTAs launch
    // while the current one runs and wait for it on the GPU (kernels/cuda/common/pdl.cuh) instead of
    // the graph draining between the two; false: ordinary edges.
    bool graph_pdl = true;
    // With graph_pdl: also the edges from or to a thread-block-cluster launch (dense_gemm_kc's split-K).
    bool graph_pdl_clusters = true;
    // With graph_pdl: decode graphs of batch buckets up to this many sequences (verify graphs: tokens)
    // only; 0: every graph. Ledger E65 (20-layer proxy at 8K, H100): batch 1 -2.7%, batch 8 +2.9%,
    // batch 64 unchanged, so by default the batch-1 graphs only.
    int graph_pdl_max_batch = 1;
    // Greedy picks (device argmax of a vocabulary row) split over up to 64 CTAs per row and joined by a
    // second launch; false: one CTA per row, which E59 measured at 196 us per 129,280-wide row at
    // batch 1. The split form took the MTP draft step from 1.11-1.15 to 0.74-0.76 ms at batch 1
    // (0.91 vs 1.24 at 8, 1.54 vs 1.78-1.83 at 64) and a sampled one-token step from 5.34-5.37 to
    // 5.17-5.18 ms (ledger E60).
    bool split_argmax = true;
    bool side_streams = true;  // independent projections / the shared expert on forked streams
    // At <= 8 tokens the mHC expand also computes the next site's mixing dot products (mhc_post_mix).
    bool fuse_mhc = true;
    // From this many tokens up to max_seqs the large dense projections read one bf16 copy of their
    // input; 0: off (each kernel rounds its f32 input itself; same values).
    int x_bf16_min_tokens = 32;
    // Steps of more than max_seqs tokens (prefill) too: xn and q_lat rounded once into buffers of
    // max_tokens rows instead of once per projection of each (xn feeds seven); false: up to max_seqs.
    bool prefill_x_bf16 = true;
    // Routed experts' MXFP4 code layout on the GPU: "pair-rotated" (bit-repacked at load when the
    // fast kernels are on; docs/perf/ledger.md E17) or "checkpoint" (as in the file).
    std::string moe_layout = "pair-rotated";
    // Forced kernel variants by canonical name ("" = the op's heuristic). attn_variant names either a
    // CUDA-core attention variant (kernels/cuda/attention/attn_variants.cpp) or a sparse_decode variant.
    std::string attn_variant;
    std::string gemv_variant;      // dense_gemv / dense_gemm_kc* (dsv4 decode-bench lists the names)
    std::string moe_variant;       // MXFP4 expert GEMV
    std::string moe_gemm_variant;  // grouped MXFP4 expert GEMM (prefill-sized steps)
    // sparse_decode split-KV: CTAs the splits aim for (batch x head blocks x splits); 0 = 2 x SMs.
    int split_kv_target_ctas = 0;
    // Prefill and mixed steps (more than one token of a sequence) on the fast attention path run
    // the layer's attention for all query tokens at once (prefill_state.cu), in blocks of
    // prefill_query_block tokens; false: kv_step + decode attention token by token (same bits).
    bool batched_prefill = true;
    // On the bf16 q route of prefill steps whose q projection runs as the cuBLAS GEMM: the GEMM writes q
    // as bf16 and the norm and RoPE run in place on it (q rounded before the norm instead of after);
    // false: f32 q, normed, then rounded (twice the bytes of q written and read). Ledger E42: 4K
    // prefill -1.1%, 1K -0.6%, 128 tokens unchanged (no GEMM there).
    bool prefill_q_bf16 = true;
    // Decode steps (one token per sequence) on the fast attention path: q's norm and RoPE write the
    // bf16 q rows sparse_decode reads (norm_rope_to_bf16), instead of f32 q then q_rows_bf16 (same
    // bits, one launch per layer fewer); false: the two-launch form. Off until its GPU test
    // (CudaProxy.DecodeQBf16*) and A/B (ledger E68) have run on a GPU.
    bool decode_q_bf16 = false;
    int prefill_query_block = 1024;  // ledger E33: 1024 vs 256 -2% at 1K-4K
    // From this many tokens in a step the FP8/BF16 dense linears run as cuBLAS bf16 GEMMs
    // (kernels/cuda/ops/prefill_gemm.h; those steps run without side streams); 0: never.
    int prefill_gemm_min_tokens = 128;  // E33 (E28: 512)
    // From this many tokens in a step the routed experts run as the grouped MXFP4 GEMM
    // (kernels/cuda/moe/moe_grouped_sm90.cu; same bits as the GEMV); 0: never.
    int moe_gemm_min_tokens = 128;  // E33 (E29: 512)
    // The grouped expert GEMM on the warpgroup (wgmma) kernel, activations k-permuted
    // (kernels/cuda/moe/moe_wgmma_sm90.cu); false: the mma.sync kernel (bitwise the GEMV's).
    bool moe_gemm_wgmma = true;
    // Batched prefill attention on the warpgroup (wgmma) kernel (kernels/cuda/attention/sparse_prefill_sm90.cu;
    // FP8 rows); false: sparse_decode over the pseudo-sequences (bitwise the token loop's).
    bool prefill_attn_wgmma = true;
    // Batched prefill on a CSA layer whose step reaches this many indexer rows per query: the
    // lightning indexer's exact FP64 scores are computed only for the rows a bf16 tensor-core pass
    // with a proven error bound cannot rule out of the top-k (kernels/cuda/ops/indexer_filter.h; same
    // selection, bit for bit); 0: every row scored exactly.
    int indexer_filter_min_rows = 2048;
    // Both thresholds above for decode-only steps (one token per sequence): there the decode kernels
    // stay ahead longer (E33: 128- and 256-sequence steps 30% and 3% slower on the GEMMs; E44, with the
    // balanced wgmma expert rows: 256 sequences 57.3 vs 55.2 ms, 384 64.0 vs 76.6 ms; E49, with the
    // per-width expert consumers: 256 51.0 vs 55.3 ms, 320 55.8 vs 67.1; below 256 not measured); 0: never.
    int decode_gemm_min_tokens = 256;
    // moe_gemm_min_tokens alone for decode-only steps and steps of at most 4 tokens per sequence
    // (step_gemm_thresholds; the routed experts' grouped GEMM; the dense
    // linears keep decode_gemm_min_tokens): the persistent expert rows stream the weights at decode
    // shapes (kernels/cuda/moe/moe_wgmma_persist_sm90.cu); 0: decode_gemm_min_tokens.
    int decode_moe_gemm_min_tokens = 0;
    // proxy-bench: after timing a point, the per-op table of the captured step (runtime/op_profile.h).
    bool op_profile = false;
    // Test hook (issue 21): > 0 makes the N-th step the runner launches (1 = the first; steps with at
    // least one sequence) fail with a real sticky device error (cuda::inject_device_fault: an illegal
    // address), as a faulty kernel would; the fake model of `dsv4 serve` returns its stand-in
    // (StatusCode::kDeviceLost). 0: off. Command line only (no variable): a variable left set in a
    // deployment would bring every replica down.
    int fault_inject_step = 0;
    // Per-shape kernel choices from the tuning file (tuning_file.h), for the ops whose forced variant
    // and split-KV target the environment and command line leave unset (those win for every shape).
    std::vector<TuningRule> tuning_rules;
    std::string tuning_file;  // where the rules and options came from ("" = none)
};

// The GEMM thresholds one step runs with, from the options and the step's largest number of tokens
// of one sequence (max_t >= 1):
// - decode-only steps (max_t = 1): decode_gemm_min_tokens for the dense linears, the decode experts'
//   threshold (decode_moe_gemm_min_tokens, or decode_gemm_min_tokens when 0) and decode_step;
// - steps of at most kVerifyShapedMaxTokens tokens per sequence (speculative verify steps of k + 1
//   tokens, prompt tails): the dense linears as prefill, the experts on the decode experts' threshold,
//   because their tokens come from many sequences and route like decode tokens (E58: verify steps of
//   128-192 tokens -12% to -17%);
// - other steps (prompt chunks): prefill_gemm_min_tokens and moe_gemm_min_tokens (E58: one prompt's
//   128-255 tokens lose 26-42% on the decode experts' kernels).
struct StepGemmThresholds {
    static constexpr int kVerifyShapedMaxTokens = 4;  // k + 1 for up to 3 drafts (issue 24)
    int dense_min_tokens = 0;  // cuBLAS GEMMs for the dense linears from this many tokens (0: never)
    int moe_min_tokens = 0;    // MoeArgs::grouped_min_tokens
    bool decode_step = false;  // MoeArgs::decode_step: the persistent expert rows are allowed
};
StepGemmThresholds step_gemm_thresholds(const RuntimeOptions& rt, int max_t);

enum class OptionSource { kDefault, kTuningFile, kEnvironment, kCommandLine };
const char* option_source_name(OptionSource s);

// One row of the option table: key, the environment variable that sets it, what it means.
struct OptionInfo {
    const char* key;
    const char* env;  // nullptr: `--option` only
    const char* help;
};
const std::vector<OptionInfo>& runtime_option_infos();

// Where each option's value came from (index = position in runtime_option_infos()).
struct OptionOrigins {
    std::vector<OptionSource> source;
    std::vector<std::string> detail;  // e.g. the variable name or "--option"
    OptionOrigins();
};

// Sets one option from text. Booleans take 1/0, true/false, on/off, yes/no; integers decimal >= 0;
// enumerations their listed values. Errors (kInvalidArgument): an unknown key (the message lists the
// known ones) or a value the option does not take (the message names the key and the accepted values).
Status set_runtime_option(RuntimeOptions& o, std::string_view key, std::string_view value);
// Current value of `key` as text ("" for an unknown key).
std::string runtime_option_value(const RuntimeOptions& o, std::string_view key);

// Applies the DSV4_* variables that `lookup` returns (nullptr = unset). DSV4_FAST_KERNELS=0 turns off
// both fast_kernels and fast_attention (its historical meaning). Errors as set_runtime_option, naming
// the variable.
Status apply_runtime_env(RuntimeOptions& o, OptionOrigins* origins,
                         const std::function<const char*(const char*)>& lookup);
// Applies "KEY=VALUE" settings (the command line's --option values) in order.
Status apply_runtime_settings(RuntimeOptions& o, OptionOrigins* origins, const std::vector<std::string>& settings);

// Applies a tuning file's "options" (source kTuningFile) and keeps its rules. Errors as
// set_runtime_option, naming the file.
Status apply_tuning_file(RuntimeOptions& o, OptionOrigins* origins, const TuningFile& f);
// Drops from o.tuning_rules what a higher layer overrides: a rule's variant when the op's forced
// variant option (attn_variant, gemv_variant, moe_variant, moe_gemm_variant) came from the
// environment or command line, its split-KV target when split_kv_target_ctas did; then rules left
// with nothing. Returns one line per rule changed (for the start-up log).
std::vector<std::string> drop_overridden_tuning(RuntimeOptions& o, const OptionOrigins& origins);

// defaults < `tuning` (when not null) < environment (the process's, read here once) < command-line
// settings; `tuning_notes` (when not null) gets drop_overridden_tuning's lines.
Result<RuntimeOptions> load_runtime_options(const std::vector<std::string>& cli_settings, OptionOrigins* origins,
                                            const TuningFile* tuning = nullptr,
                                            std::vector<std::string>* tuning_notes = nullptr);

// Table for the start-up log: key, value, source, one row per option.
std::string runtime_options_table(const RuntimeOptions& o, const OptionOrigins& origins);

}  // namespace dsv4
