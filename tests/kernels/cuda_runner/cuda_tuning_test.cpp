// The CUDA runner under a tuning file's per-shape rules (runtime/tuning_file.h,
// runtime/cuda_runner_tuning.cpp): a rule gives the same bits as forcing its variant and split-KV
// target by option for the steps it covers and leaves other steps on the heuristic; a variant the
// build lacks, or one illegal for the model's shapes, stops the runner's start-up with an error that
// names the file and the rule.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention/sparse_decode.h"
#include "model/config.h"
#include "model/weights.h"
#include "runtime/cuda_runner.h"
#include "runtime/ref_runner.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"
#include "tests/kernels/cuda_runner/small512_config.h"

namespace dsv4 {
namespace {

// Three sequences: a 40-token prefill each (past the 32-row window), then 6 decode steps (CUDA graphs).
std::vector<std::vector<float>> run(const std::shared_ptr<const RefModel>& model, const RuntimeOptions& rt) {
    CudaRunnerOptions o;
    o.rt = rt;
    o.max_seqs = 4;
    o.max_tokens = 256;
    o.max_context = 512;
    o.n_pages = 2000;
    o.verbose = false;
    auto r = make_cuda_runner(model, "", o);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r.is_ok()) return {};
    ModelRunner& runner = **r;
    const int64_t V = model->config().vocab_size;
    SimplePagePool pool(runner.n_pages());
    std::vector<std::vector<int32_t>> tables(3);
    for (auto& t : tables) EXPECT_TRUE(pool.grow(t, runner.kv_layout().pages_for_tokens(512)));
    std::mt19937 g(7);
    std::vector<std::vector<float>> all;
    for (int step = 0; step < 7; ++step) {
        ForwardBatch b;
        for (int s = 0; s < 3; ++s) {
            std::vector<int32_t> toks(step == 0 ? 40 : 1);
            for (auto& t : toks) t = int32_t(g() % uint32_t(V));
            b.seqs.push_back(SeqChunk{s + 1, toks, step == 0 ? 0 : 39 + step, true, tables[size_t(s)]});
        }
        std::vector<std::vector<float>> out;
        const Status s = runner.forward(b, out);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        all.insert(all.end(), out.begin(), out.end());
    }
    return all;
}

// A sparse_decode variant legal for fp8 rows and 16 heads other than the heuristic's first choice.
int another_legal_variant(int heads) {
    int n = 0;
    for (int i = cuda::sparse_decode_variant_count() - 1; i >= 0; --i)
        if (cuda::sparse_decode_variant_legal(i, cuda::KvFormat::kFp8, heads) && ++n == 1) return i;
    return -1;
}

TuningRule sparse_rule(int64_t lo, int64_t hi, const std::string& variant, int target) {
    TuningRule r;
    r.op = TunedOp::kSparseDecode;
    r.tokens = {lo, hi};
    r.variant = variant;
    r.split_kv_target_ctas = target;
    return r;
}

TEST(CudaTuning, RuleEqualsTheForcedOptionWhereItAppliesAndTheHeuristicElsewhere) {
    SKIP_WITHOUT_GPU();
    const ModelConfig cfg = small512_config();
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights::random(cfg, 23), RefNumerics{});
    const int v = another_legal_variant(cfg.n_heads);
    ASSERT_GE(v, 0);
    const std::string name = cuda::sparse_decode_variant_name(v);

    RuntimeOptions forced;
    forced.attn_variant = name;
    forced.split_kv_target_ctas = 512;  // past 2 x SMs: the workspace must be sized for it
    RuntimeOptions ruled;
    ruled.tuning_file = "test.json";
    ruled.tuning_rules = {sparse_rule(1, 4, name, 512)};  // 3 sequences: the bucket-4 graph
    RuntimeOptions missed;
    missed.tuning_file = "test.json";
    missed.tuning_rules = {sparse_rule(5, 64, name, 512)};

    const auto a = run(model, forced), b = run(model, ruled), c = run(model, missed), d = run(model, RuntimeOptions{});
    ASSERT_EQ(a.size(), 21u);
    ASSERT_EQ(b.size(), a.size());
    ASSERT_EQ(c.size(), a.size());
    ASSERT_EQ(d.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(b[i], a[i]) << "row " << i << ": the rule's step differs from the forced option's";
        EXPECT_EQ(c[i], d[i]) << "row " << i << ": a rule for 5-64 sequences changed a 3-sequence step";
    }
}

TEST(CudaTuning, UnknownOrIllegalVariantsStopTheStartUp) {
    SKIP_WITHOUT_GPU();
    const ModelConfig cfg = small512_config();
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights::random(cfg, 23), RefNumerics{});
    CudaRunnerOptions o;
    o.max_seqs = 4;
    o.max_tokens = 64;
    o.max_context = 512;
    o.n_pages = 200;
    o.verbose = false;
    o.rt.tuning_file = "my-tuning.json";
    o.rt.tuning_rules = {sparse_rule(1, 8, "sparse_decode.no_such.sm90", 0)};
    auto r = make_cuda_runner(model, "", o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("my-tuning.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("no sparse_decode variant 'sparse_decode.no_such.sm90'"), std::string::npos)
        << r.status().message();

    // A registered variant that cannot run fp8 rows with 16 heads, when the registry has one.
    for (int i = 0; i < cuda::sparse_decode_variant_count(); ++i) {
        if (cuda::sparse_decode_variant_legal(i, cuda::KvFormat::kFp8, cfg.n_heads)) continue;
        o.rt.tuning_rules = {sparse_rule(1, 8, cuda::sparse_decode_variant_name(i), 0)};
        auto bad = make_cuda_runner(model, "", o);
        ASSERT_FALSE(bad.is_ok()) << cuda::sparse_decode_variant_name(i);
        EXPECT_NE(bad.status().message().find("is not legal for 16 heads on fp8 rows"), std::string::npos)
            << bad.status().message();
        break;
    }
}

}  // namespace
}  // namespace dsv4
