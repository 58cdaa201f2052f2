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

// Three sequences: a 300-token prefill each (past the 128-row window; 75 CSA rows), then 6 decode steps
// (CUDA graphs) whose ~200 rows make 7 tiles of 32: room for several split-KV splits.
std::vector<std::vector<float>> run(const std::shared_ptr<const RefModel>& model, const RuntimeOptions& rt) {
    CudaRunnerOptions o;
    o.rt = rt;
    o.max_seqs = 4;
    o.max_step_tokens = 1024;
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
        std::vector<std::vector<int32_t>> toks(3);  // the chunks view them
        for (int s = 0; s < 3; ++s) {
            toks[size_t(s)].resize(step == 0 ? 300 : 1);
            for (auto& t : toks[size_t(s)]) t = int32_t(g() % uint32_t(V));
            SeqChunk c;
            c.seq_id = s + 1;
            c.tokens = toks[size_t(s)];
            c.start_pos = step == 0 ? 0 : 299 + step;
            c.want_logits = true;
            c.page_table = tables[size_t(s)];
            b.seqs.push_back(c);
        }
        std::vector<std::vector<float>> out;
        const Status s = runner.forward(b, out);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        all.insert(all.end(), out.begin(), out.end());
    }
    return all;
}

// The last sparse_decode variant legal for fp8 rows and `heads`, when it is not the heuristic's (the
// first legal one); -1 otherwise.
int another_legal_variant(int heads) {
    int first = -1, last = -1;
    for (int i = 0; i < cuda::sparse_decode_variant_count(); ++i)
        if (cuda::sparse_decode_variant_legal(i, cuda::KvFormat::kFp8, heads)) {
            if (first < 0) first = i;
            last = i;
        }
    return last != first ? last : -1;
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
    // 64 heads x 512 (Flash's attention geometry): several sparse_decode variants are legal.
    const ModelConfig cfg = flash_geometry_config();
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights::random(cfg, 23), RefNumerics{});
    const int v = another_legal_variant(cfg.n_heads);
    ASSERT_GE(v, 0) << "the registry has one legal sparse_decode variant for 64 heads: nothing to choose";
    const std::string name = cuda::sparse_decode_variant_name(v);

    // Target 6 CTAs: one split for 3 sequences x 2 head blocks (the default, 2 x SMs, splits the rows).
    RuntimeOptions forced;
    forced.attn_variant = name;
    forced.split_kv_target_ctas = 6;
    RuntimeOptions ruled;
    ruled.tuning_file = "test.json";
    ruled.tuning_rules = {sparse_rule(1, 4, name, 6)};  // 3 sequences
    RuntimeOptions missed;
    missed.tuning_file = "test.json";
    missed.tuning_rules = {sparse_rule(5, 64, name, 6)};

    const auto a = run(model, forced), b = run(model, ruled), c = run(model, missed), d = run(model, RuntimeOptions{});
    ASSERT_EQ(a.size(), 21u);
    ASSERT_EQ(b.size(), a.size());
    ASSERT_EQ(c.size(), a.size());
    ASSERT_EQ(d.size(), a.size());
    // The first 3 rows are the prefill step's (no rule applies there); the decode rows must show that
    // the forced choice changes the bits, or the comparison below proves nothing.
    size_t differ = 0;
    for (size_t i = 3; i < a.size(); ++i) differ += a[i] != d[i];
    ASSERT_GT(differ, 0u) << "forcing " << name << " with target 6 gave the default's bits";
    // The prefill step runs sparse_prefill (fp8 rows), which neither the option nor the rule touches.
    for (size_t i = 0; i < 3; ++i) ASSERT_EQ(a[i], d[i]) << "the forced option changed the prefill step";
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(b[i], a[i]) << "row " << i << ": the rule's step differs from the forced option's";
        EXPECT_EQ(c[i], d[i]) << "row " << i << ": a rule for 5-64 sequences changed a 3-sequence step";
    }
}

// Decode graphs captured when the runner starts (every bucket, under the heuristics and under a rule
// for 1-4 sequences) replay to the same bits as graphs captured on first use.
TEST(CudaTuning, GraphsCapturedAtStartGiveTheBitsOfFirstUseCaptures) {
    SKIP_WITHOUT_GPU();
    const ModelConfig cfg = flash_geometry_config();
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights::random(cfg, 29), RefNumerics{});
    const int v = another_legal_variant(cfg.n_heads);
    ASSERT_GE(v, 0);
    for (bool with_rule : {false, true}) {
        RuntimeOptions early, late;
        if (with_rule) {
            early.tuning_file = late.tuning_file = "test.json";
            early.tuning_rules = late.tuning_rules = {sparse_rule(1, 4, cuda::sparse_decode_variant_name(v), 6)};
        }
        early.capture_graphs_at_start = true;
        late.capture_graphs_at_start = false;
        const auto a = run(model, early), b = run(model, late);
        ASSERT_EQ(a.size(), 21u);
        ASSERT_EQ(b.size(), a.size());
        for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "row " << i << (with_rule ? " (rule)" : "");
    }
}

TEST(CudaTuning, UnknownOrIllegalVariantsStopTheStartUp) {
    SKIP_WITHOUT_GPU();
    const ModelConfig cfg = small512_config();
    auto model = std::make_shared<const RefModel>(cfg, ModelWeights::random(cfg, 23), RefNumerics{});
    CudaRunnerOptions o;
    o.max_seqs = 4;
    o.max_step_tokens = 64;
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
