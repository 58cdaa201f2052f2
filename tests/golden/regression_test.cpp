// Model-level regression cases on the CPU reference (../shared/docs/regression-cases.md):
// B02 (short and first-block prompts alone and packed with other sequences), B11 (token ids and
// tid2eid entries out of range are errors), plus the built-in tiny model's determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "model/checkpoint.h"
#include "model/ref_model.h"
#include "model/safetensors_writer.h"
#include "runtime/ref_runner.h"
#include "runtime/runner_factory.h"

namespace dsv4 {
namespace {

const std::string kDir = std::string(DSV4_GOLDEN_DIR) + "/tiny_f32";

std::shared_ptr<const RefModel> golden_model() {
    static std::shared_ptr<const RefModel> m = [] {
        auto r = load_ref_model(kDir, 0);
        EXPECT_TRUE(r.is_ok()) << r.status().to_string();
        return r.is_ok() ? *r : nullptr;
    }();
    return m;
}

TEST(RegressionB02, ShortPromptsAlonePackedAndAgainstTransformers) {
    auto model = golden_model();
    ASSERT_TRUE(model);
    auto expected = Checkpoint::open(kDir + "/expected.safetensors");
    ASSERT_TRUE(expected.is_ok());
    auto ids = load_i32(*expected, "input_ids", std::vector<int64_t>{2200});
    auto lengths = load_i32(*expected, "logits.lengths", std::vector<int64_t>{131});
    auto gold = load_f32(*expected, "logits", std::vector<int64_t>{131, 512});
    ASSERT_TRUE(ids.is_ok() && lengths.is_ok() && gold.is_ok());
    auto runner = RefRunner::create(model, 16, 400);
    ASSERT_TRUE(runner.is_ok());
    RefRunner& R = **runner;
    SimplePagePool pool(R.n_pages());
    std::vector<int32_t> other7(ids->begin() + 1000, ids->begin() + 1007);
    std::vector<int32_t> other300(ids->begin() + 1100, ids->begin() + 1400);
    double worst = 0;
    for (int64_t L : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 126, 127, 128, 129, 130, 131}) {
        const std::vector<int32_t> prompt(ids->begin(), ids->begin() + L);
        // (a) alone
        std::vector<int32_t> ta;
        ASSERT_TRUE(pool.grow(ta, R.kv_layout().pages_for_tokens(L)));
        ForwardBatch alone;
        alone.seqs.push_back(SeqChunk{1, prompt, 0, true, ta});
        std::vector<std::vector<float>> la;
        ASSERT_TRUE(R.forward(alone, la).is_ok());
        // (b) packed between two other sequences
        std::vector<int32_t> t1, t2, t3;
        ASSERT_TRUE(pool.grow(t1, R.kv_layout().pages_for_tokens(7)));
        ASSERT_TRUE(pool.grow(t2, R.kv_layout().pages_for_tokens(L)));
        ASSERT_TRUE(pool.grow(t3, R.kv_layout().pages_for_tokens(300)));
        ForwardBatch packed;
        packed.seqs.push_back(SeqChunk{2, other7, 0, true, t1});
        packed.seqs.push_back(SeqChunk{3, prompt, 0, true, t2});
        packed.seqs.push_back(SeqChunk{4, other300, 0, true, t3});
        std::vector<std::vector<float>> lb;
        ASSERT_TRUE(R.forward(packed, lb).is_ok());
        ASSERT_EQ(lb.size(), 3u);
        EXPECT_EQ(la[0], lb[1]) << "length " << L << ": packed differs from alone";
        const auto it = std::find(lengths->begin(), lengths->end(), int32_t(L));
        ASSERT_NE(it, lengths->end());
        const float* g = gold->data() + (it - lengths->begin()) * 512;
        int arg_ours = 0, arg_gold = 0;
        for (int v = 0; v < 512; ++v) {
            worst = std::max(worst, double(std::fabs(la[0][v] - g[v])));
            if (la[0][v] > la[0][arg_ours]) arg_ours = v;
            if (g[v] > g[arg_gold]) arg_gold = v;
        }
        EXPECT_EQ(arg_ours, arg_gold) << "length " << L;
        for (auto* t : {&ta, &t1, &t2, &t3}) pool.release(*t);
    }
    EXPECT_LT(worst, 1e-4);
    std::printf("[B02] max |logit error| vs transformers over lengths 1-10, 126-131: %.3g\n", worst);
}

TEST(RegressionB04, UniformChunkSizesGiveTheSameLogitsAndContinuation) {
    // A ~1,800-token prompt prefilled in uniform chunks of many sizes gives the same final logits
    // as one pass, no NaN, and the same 16-token greedy continuation.
    auto model = golden_model();
    ASSERT_TRUE(model);
    auto expected = Checkpoint::open(kDir + "/expected.safetensors");
    ASSERT_TRUE(expected.is_ok());
    auto ids = load_i32(*expected, "input_ids", std::vector<int64_t>{2200});
    ASSERT_TRUE(ids.is_ok());
    const int64_t P = 1800;
    auto runner = RefRunner::create(model, 16, 400);
    ASSERT_TRUE(runner.is_ok());
    RefRunner& R = **runner;
    std::vector<float> whole;
    std::vector<int32_t> reference_cont;
    for (int64_t cs : {int64_t(1800), int64_t(1024), int64_t(512), int64_t(500), int64_t(257), int64_t(129),
                       int64_t(128), int64_t(127), int64_t(5)}) {
        SimplePagePool pool(R.n_pages());
        std::vector<int32_t> table;
        ASSERT_TRUE(pool.grow(table, R.kv_layout().pages_for_tokens(P + 16)));
        std::vector<float> logits;
        int64_t pos = 0;
        while (pos < P) {
            const int64_t c = std::min(cs, P - pos);
            ASSERT_TRUE(
                R.forward_seq(SeqChunk{1, std::span<const int32_t>(ids->data() + pos, size_t(c)), pos, true, table}, {},
                              logits)
                    .is_ok());
            pos += c;
        }
        for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << "chunk size " << cs;
        if (whole.empty()) whole = logits;
        double diff = 0;
        for (size_t i = 0; i < logits.size(); ++i) diff = std::max(diff, double(std::fabs(logits[i] - whole[i])));
        EXPECT_LT(diff, 2e-5) << "chunk size " << cs;
        std::vector<int32_t> cont;
        for (int i = 0; i < 16; ++i) {
            const int32_t tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            cont.push_back(tok);
            const std::vector<int32_t> one{tok};
            ASSERT_TRUE(R.forward_seq(SeqChunk{1, one, pos, true, table}, {}, logits).is_ok());
            ++pos;
        }
        if (reference_cont.empty()) reference_cont = cont;
        EXPECT_EQ(cont, reference_cont) << "chunk size " << cs;
    }
}

TEST(RegressionB11, TokenIdsOutsideVocabularyAreErrors) {
    auto model = golden_model();
    ASSERT_TRUE(model);
    auto runner = RefRunner::create(model, 16, 64);
    ASSERT_TRUE(runner.is_ok());
    SimplePagePool pool((*runner)->n_pages());
    for (int32_t bad : {512, -1, 2147483647}) {
        std::vector<int32_t> table, prompt = {5, bad, 7};
        ASSERT_TRUE(pool.grow(table, (*runner)->kv_layout().pages_for_tokens(3)));
        ForwardBatch b;
        b.seqs.push_back(SeqChunk{1, prompt, 0, true, table});
        std::vector<std::vector<float>> logits;
        Status s = (*runner)->forward(b, logits);
        EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
        EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos) << s.message();
        pool.release(table);
    }
}

TEST(RegressionB11, Tid2eidOutOfRangeOrRepeatedIsALoadError) {
    auto ckpt = Checkpoint::open(kDir + "/model.safetensors");
    ASSERT_TRUE(ckpt.is_ok());
    auto cfg = ModelConfig::from_file(kDir + "/config.json");
    ASSERT_TRUE(cfg.is_ok());
    const auto tmp = std::filesystem::temp_directory_path() / "dsv4_b11";
    std::filesystem::create_directories(tmp);
    std::filesystem::copy_file(kDir + "/config.json", tmp / "config.json",
                               std::filesystem::copy_options::overwrite_existing);
    for (int variant = 0; variant < 2; ++variant) {
        SafetensorsWriter w;
        for (const std::string& name : ckpt->names()) {
            auto t = ckpt->get(name);
            ASSERT_TRUE(t.is_ok());
            std::vector<uint8_t> bytes(t->data, t->data + t->nbytes);
            if (name == "layers.1.ffn.gate.tid2eid") {
                int64_t v[2];
                std::memcpy(v, bytes.data() + 8 * 4 * 77, 16);  // row 77
                v[0] = variant == 0 ? 16 : v[1];                // 16 == n_routed_experts; or a repeat
                std::memcpy(bytes.data() + 8 * 4 * 77, v, 16);
            }
            ASSERT_TRUE(w.add(name, t->dtype, t->shape, bytes).is_ok());
        }
        ASSERT_TRUE(w.write((tmp / "model.safetensors").string()).is_ok());
        auto m = load_ref_model(tmp.string(), 0);
        ASSERT_FALSE(m.is_ok());
        EXPECT_NE(m.status().message().find("tid2eid[77]"), std::string::npos) << m.status().message();
    }
    std::filesystem::remove_all(tmp);
}

TEST(TinyModel, SeededAndDeterministic) {
    auto a = load_ref_model("tiny", 0);
    ASSERT_TRUE(a.is_ok());
    auto runner = RefRunner::create(*a, 64, 64);
    ASSERT_TRUE(runner.is_ok());
    SimplePagePool pool(64);
    std::vector<int32_t> t;
    ASSERT_TRUE(pool.grow(t, (*runner)->kv_layout().pages_for_tokens(5)));
    const std::vector<int32_t> prompt = {0, 128803, 19923, 128804, 128822};
    std::vector<float> l1, l2;
    ASSERT_TRUE((*runner)->forward_seq(SeqChunk{1, prompt, 0, true, t}, {}, l1).is_ok());
    ASSERT_TRUE((*runner)->forward_seq(SeqChunk{1, prompt, 0, true, t}, {}, l2).is_ok());
    EXPECT_EQ(l1, l2);
    EXPECT_EQ(int64_t(l1.size()), 129280);
    for (float v : l1) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

TEST(ReferenceNumerics, Fp8KvAndFp4IndexerStayCloseToExact) {
    // The DeepSeek reference's QAT simulation changes the cached values slightly; logits must
    // move (the switch is live) but stay close to the FP32 semantics.
    const std::string dir = std::string(DSV4_GOLDEN_DIR) + "/tiny_real_window";
    auto exact = load_ref_model(dir, 0);
    auto qat = load_ref_model(dir, 0, RefNumerics{true, true});
    ASSERT_TRUE(exact.is_ok() && qat.is_ok());
    auto expected = Checkpoint::open(dir + "/expected.safetensors");
    ASSERT_TRUE(expected.is_ok());
    auto ids = load_i32(*expected, "input_ids", std::vector<int64_t>{2200});
    ASSERT_TRUE(ids.is_ok());
    const std::vector<int32_t> prompt(ids->begin(), ids->begin() + 600);
    std::vector<float> a, b;
    for (auto* m : {&*exact, &*qat}) {
        auto r = RefRunner::create(*m, 128, 64);
        ASSERT_TRUE(r.is_ok());
        SimplePagePool pool(64);
        std::vector<int32_t> t;
        ASSERT_TRUE(pool.grow(t, (*r)->kv_layout().pages_for_tokens(600)));
        ASSERT_TRUE((*r)->forward_seq(SeqChunk{1, prompt, 0, true, t}, {}, m == &*exact ? a : b).is_ok());
    }
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(b[i]));
        diff = std::max(diff, double(std::fabs(a[i] - b[i])));
        scale = std::max(scale, double(std::fabs(a[i])));
    }
    EXPECT_GT(diff, 0.0);
    EXPECT_LT(diff, 0.1 * scale);
    std::printf("[reference numerics] max |logit change| %.3g (logit scale %.3g)\n", diff, scale);
}

}  // namespace
}  // namespace dsv4
