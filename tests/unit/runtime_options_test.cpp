// The run-time options structure (runtime/runtime_options.h): precedence, parsing, errors, table.
#include "runtime/runtime_options.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

// A fake environment: the process's own is never read by these tests.
auto env_of(const std::map<std::string, std::string>& m) {
    return [m](const char* k) -> const char* {
        auto it = m.find(k);
        return it == m.end() ? nullptr : it->second.c_str();
    };
}

TEST(RuntimeOptions, DefaultsAreTheDocumentedOnes) {
    const RuntimeOptions o;
    EXPECT_EQ(o.kv_rows, "fp8");
    EXPECT_TRUE(o.fast_kernels && o.fast_attention && o.cuda_graphs && o.side_streams && o.fuse_mhc);
    EXPECT_EQ(o.x_bf16_min_tokens, 32);
    EXPECT_EQ(o.moe_layout, "pair-rotated");
    EXPECT_EQ(o.split_kv_target_ctas, 0);
    EXPECT_TRUE(o.batched_prefill);
    EXPECT_EQ(o.prefill_query_block, 1024);
    EXPECT_EQ(o.prefill_gemm_min_tokens, 128);
    EXPECT_EQ(o.moe_gemm_min_tokens, 128);
    EXPECT_EQ(o.decode_gemm_min_tokens, 256);
    EXPECT_EQ(o.decode_moe_gemm_min_tokens, 0);
    EXPECT_FALSE(o.op_profile);
    EXPECT_EQ(o.fault_inject_step, 0);
}

TEST(RuntimeOptions, EnvironmentThenCommandLine) {
    RuntimeOptions o;
    OptionOrigins orig;
    ASSERT_TRUE(apply_runtime_env(o, &orig,
                                  env_of({{"DSV4_KV_ROWS", "bf16"},
                                          {"DSV4_CUDA_GRAPHS", "0"},
                                          {"DSV4_X_BF16", "0"},
                                          {"DSV4_SPLIT_KV_TARGET", "512"},
                                          {"DSV4_GEMV_VARIANT", "dense_gemm_kc.bt32_bh16_w4_s0.sm90"}}))
                    .is_ok());
    EXPECT_EQ(o.kv_rows, "bf16");
    EXPECT_FALSE(o.cuda_graphs);
    EXPECT_EQ(o.x_bf16_min_tokens, 0);
    EXPECT_EQ(o.split_kv_target_ctas, 512);
    EXPECT_EQ(o.gemv_variant, "dense_gemm_kc.bt32_bh16_w4_s0.sm90");
    ASSERT_TRUE(apply_runtime_settings(o, &orig,
                                       {"kv_rows=f32", "cuda_graphs=on", "side_streams=false", "batched_prefill=0",
                                        "prefill_query_block=64"})
                    .is_ok());
    EXPECT_FALSE(o.batched_prefill);
    EXPECT_EQ(o.prefill_query_block, 64);
    EXPECT_EQ(o.kv_rows, "f32");  // the command line wins over the environment
    EXPECT_TRUE(o.cuda_graphs);
    EXPECT_FALSE(o.side_streams);
    const std::string table = runtime_options_table(o, orig);
    EXPECT_NE(table.find("kv_rows"), std::string::npos);
    EXPECT_NE(table.find("command line"), std::string::npos);
    EXPECT_NE(table.find("environment DSV4_SPLIT_KV_TARGET"), std::string::npos);
    EXPECT_NE(table.find("default"), std::string::npos);
}

TEST(RuntimeOptions, FastKernelsVariableAlsoTurnsOffFastAttention) {
    RuntimeOptions o;
    ASSERT_TRUE(apply_runtime_env(o, nullptr, env_of({{"DSV4_FAST_KERNELS", "0"}})).is_ok());
    EXPECT_FALSE(o.fast_kernels);
    EXPECT_FALSE(o.fast_attention);
    RuntimeOptions p;  // an explicit DSV4_FAST_ATTENTION keeps its own value
    ASSERT_TRUE(
        apply_runtime_env(p, nullptr, env_of({{"DSV4_FAST_KERNELS", "0"}, {"DSV4_FAST_ATTENTION", "1"}})).is_ok());
    EXPECT_FALSE(p.fast_kernels);
    EXPECT_TRUE(p.fast_attention);
    RuntimeOptions q;  // the option itself touches only linears and MoE
    ASSERT_TRUE(apply_runtime_settings(q, nullptr, {"fast_kernels=0"}).is_ok());
    EXPECT_FALSE(q.fast_kernels);
    EXPECT_TRUE(q.fast_attention);
}

TEST(RuntimeOptions, BadInputNamesWhatIsWrong) {
    RuntimeOptions o;
    Status s = set_runtime_option(o, "kv_row", "fp8");
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("unknown option 'kv_row'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("kv_rows"), std::string::npos) << "the known keys are listed";
    s = set_runtime_option(o, "kv_rows", "fp16");
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("fp16"), std::string::npos);
    EXPECT_NE(s.message().find("fp8, bf16, f32"), std::string::npos) << s.message();
    EXPECT_FALSE(set_runtime_option(o, "cuda_graphs", "maybe").is_ok());
    EXPECT_FALSE(set_runtime_option(o, "x_bf16_min_tokens", "-3").is_ok());
    EXPECT_FALSE(set_runtime_option(o, "x_bf16_min_tokens", "12abc").is_ok());
    EXPECT_FALSE(set_runtime_option(o, "moe_layout", "rotated").is_ok());
    EXPECT_FALSE(apply_runtime_settings(o, nullptr, {"kv_rows"}).is_ok());
    EXPECT_FALSE(apply_runtime_settings(o, nullptr, {"=fp8"}).is_ok());
    s = apply_runtime_env(o, nullptr, env_of({{"DSV4_CUDA_GRAPHS", "nope"}}));
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("DSV4_CUDA_GRAPHS=nope"), std::string::npos) << s.message();
    EXPECT_EQ(o.kv_rows, "fp8") << "a rejected value leaves the option unchanged";
}

// The fault hook (issue 21) has no variable: only --option sets it, whatever the environment says.
TEST(RuntimeOptions, FaultInjectStepIsCommandLineOnly) {
    RuntimeOptions o;
    ASSERT_TRUE(apply_runtime_env(o, nullptr, env_of({{"DSV4_FAULT_INJECT_STEP", "3"}})).is_ok());
    EXPECT_EQ(o.fault_inject_step, 0);
    ASSERT_TRUE(apply_runtime_settings(o, nullptr, {"fault_inject_step=3"}).is_ok());
    EXPECT_EQ(o.fault_inject_step, 3);
    EXPECT_FALSE(apply_runtime_settings(o, nullptr, {"fault_inject_step=-1"}).is_ok());
}

TEST(RuntimeOptions, EveryKeyRoundTrips) {
    for (const OptionInfo& i : runtime_option_infos()) {
        RuntimeOptions o;
        const std::string v = runtime_option_value(o, i.key);
        if (v.empty()) continue;  // variant names: "" is the heuristic
        EXPECT_TRUE(set_runtime_option(o, i.key, v).is_ok()) << i.key << "=" << v;
        EXPECT_EQ(runtime_option_value(o, i.key), v) << i.key;
        if (i.env) {  // null: --option only
            EXPECT_EQ(std::string(i.env).rfind("DSV4_", 0), 0u) << i.key;
        }
    }
}

// E58: verify-shaped steps (<= 4 tokens per sequence) take the decode experts' threshold, prompt
// chunks keep moe_gemm_min_tokens; the dense linears follow decode-only vs the rest.
TEST(RuntimeOptions, StepGemmThresholdsByTokensPerSequence) {
    RuntimeOptions o;
    o.prefill_gemm_min_tokens = 100;
    o.moe_gemm_min_tokens = 128;
    o.decode_gemm_min_tokens = 256;
    o.decode_moe_gemm_min_tokens = 0;
    const StepGemmThresholds d = step_gemm_thresholds(o, 1);
    EXPECT_EQ(d.dense_min_tokens, 256);
    EXPECT_EQ(d.moe_min_tokens, 256);
    EXPECT_TRUE(d.decode_step);
    for (int max_t = 2; max_t <= StepGemmThresholds::kVerifyShapedMaxTokens; ++max_t) {
        const StepGemmThresholds v = step_gemm_thresholds(o, max_t);
        EXPECT_EQ(v.dense_min_tokens, 100) << max_t;
        EXPECT_EQ(v.moe_min_tokens, 256) << max_t;
        EXPECT_FALSE(v.decode_step) << max_t;
    }
    const StepGemmThresholds p = step_gemm_thresholds(o, StepGemmThresholds::kVerifyShapedMaxTokens + 1);
    EXPECT_EQ(p.dense_min_tokens, 100);
    EXPECT_EQ(p.moe_min_tokens, 128);
    EXPECT_FALSE(p.decode_step);
    o.decode_moe_gemm_min_tokens = 64;  // the experts' own decode threshold wins over the shared one
    EXPECT_EQ(step_gemm_thresholds(o, 1).moe_min_tokens, 64);
    EXPECT_EQ(step_gemm_thresholds(o, 3).moe_min_tokens, 64);
    EXPECT_EQ(step_gemm_thresholds(o, 1).dense_min_tokens, 256);
    EXPECT_EQ(step_gemm_thresholds(o, 512).moe_min_tokens, 128);
}

}  // namespace
}  // namespace dsv4
