// The MTP block of the CPU reference (RefModel::mtp_forward, spec §2.11) and its weights: chunking
// invariance across the block's own 128-token window, the main model untouched by the MTP state,
// loading mtp.0 from a checkpoint, and the errors. Its values against a second implementation are in
// tests/golden (GoldenTest.MtpLogitsMatchSpecBlockOnTransformersModules).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/checkpoint.h"
#include "model/kv_layout.h"
#include "model/ref_model.h"
#include "model/synthetic_checkpoint.h"
#include "tests/unit/tiny_ref_model.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// One sequence's state for a RefModel: a page pool and its page table (state pages first).
struct SeqState {
    KvLayout layout;
    std::vector<float> state, pool;
    std::vector<int32_t> token_pages;
    SeqState(const ModelConfig& cfg, int mtp_blocks, int64_t max_tokens) {
        layout = *KvLayout::make(cfg, 16, 4, KvRowFormat::kF32, mtp_blocks);
        const int64_t pages = (max_tokens + 15) / 16;
        state.assign(size_t(layout.state_elems), 0.0f);
        pool.assign(size_t(pages * layout.page_elems), 0.0f);
        for (int64_t i = pages - 1; i >= 0; --i) token_pages.push_back(int32_t(i));  // scattered order
    }
    SeqStateView view() { return SeqStateView{&layout, state.data(), pool.data(), token_pages}; }
};

using testing_tiny::max_abs_diff;
using testing_tiny::random_token_ids;
const RefModel& tiny_model() { return testing_tiny::tiny_ref_model(); }

// Main model over ids (one shot), returning its final streams [N, n, d].
std::vector<float> main_streams(const RefModel& m, SeqState& s, const std::vector<int32_t>& ids) {
    std::vector<float> streams, logits;
    RefForwardOptions opt;
    opt.want_logits = false;
    opt.streams_out = &streams;
    EXPECT_TRUE(m.forward(s.view(), ids, 0, opt, logits).is_ok());
    return streams;
}

TEST(RefMtp, TinyModelHasOneBlock) {
    EXPECT_EQ(tiny_model().mtp_blocks(), 1);
    EXPECT_EQ(tiny_model().config().num_nextn_predict_layers, 1);
}

// 300 positions cross the block's 128-token window twice; any split gives the one-shot logits
// (projections are batched per chunk, so BLAS blocking may move the last bits).
TEST(RefMtp, ChunkedEqualsOneShot) {
    const RefModel& m = tiny_model();
    const ModelConfig& cfg = m.config();
    const int N = 301, n = cfg.hc_mult, d = cfg.hidden_size;
    const auto ids = random_token_ids(N, 11);
    SeqState s(cfg, 1, N);
    const std::vector<float> streams = main_streams(m, s, ids);
    ASSERT_EQ(streams.size(), size_t(N) * n * d);
    const std::span<const int32_t> next(ids.data() + 1, size_t(N - 1));
    RefForwardOptions all;
    all.all_logits = true;
    std::vector<float> one;
    ASSERT_TRUE(
        m.mtp_forward(0, s.view(), std::span<const float>(streams).first(size_t(N - 1) * n * d), next, 0, all, one)
            .is_ok());
    ASSERT_EQ(one.size(), size_t(N - 1) * cfg.vocab_size);
    std::vector<float> chunked;
    int64_t pos = 0;
    for (int64_t c : {1, 127, 1, 2, 169}) {
        std::vector<float> part;
        ASSERT_TRUE(m.mtp_forward(0, s.view(),
                                  std::span<const float>(streams).subspan(size_t(pos) * n * d, size_t(c) * n * d),
                                  next.subspan(size_t(pos), size_t(c)), pos, all, part)
                        .is_ok());
        chunked.insert(chunked.end(), part.begin(), part.end());
        pos += c;
    }
    ASSERT_EQ(pos, N - 1);
    EXPECT_LT(max_abs_diff(one, chunked), 1e-5);
    double ss = 0;
    for (float v : one) ss += double(v) * v;
    EXPECT_TRUE(std::isfinite(ss) && ss > 0);
    // The last-row form is the last row of the all-rows form.
    std::vector<float> last;
    ASSERT_TRUE(m.mtp_forward(0, s.view(),
                              std::span<const float>(streams).subspan(size_t(N - 2) * n * d, size_t(n) * d),
                              next.subspan(size_t(N - 2), 1), N - 2, {}, last)
                    .is_ok());
    EXPECT_LT(max_abs_diff(last, std::vector<float>(one.end() - cfg.vocab_size, one.end())), 1e-5);
}

// The MTP block reads the streams and the next token: changing either changes its logits, and its
// window ring holds rows of earlier positions (a different history changes a later position).
TEST(RefMtp, DependsOnStreamsNextTokenAndItsWindow) {
    const RefModel& m = tiny_model();
    const ModelConfig& cfg = m.config();
    const int N = 40, n = cfg.hc_mult, d = cfg.hidden_size;
    const auto ids = random_token_ids(N + 1, 12);
    SeqState s(cfg, 1, N + 1);
    const std::vector<float> streams = main_streams(m, s, ids);
    const std::span<const int32_t> next(ids.data() + 1, size_t(N));
    auto run = [&](const std::vector<float>& st, std::span<const int32_t> nx) {
        std::vector<float> logits;
        EXPECT_TRUE(
            m.mtp_forward(0, s.view(), std::span<const float>(st).first(size_t(N) * n * d), nx, 0, {}, logits).is_ok());
        return logits;
    };
    const auto base = run(streams, next);
    std::vector<int32_t> other_next(next.begin(), next.end());
    other_next.back() = (other_next.back() + 1) % int32_t(cfg.vocab_size);
    EXPECT_GT(max_abs_diff(base, run(streams, other_next)), 1e-4);
    std::vector<int32_t> other_early(next.begin(), next.end());
    other_early[3] = (other_early[3] + 1) % int32_t(cfg.vocab_size);
    EXPECT_GT(max_abs_diff(base, run(streams, other_early)), 1e-6);  // through the window only
    std::vector<float> other_streams = streams;
    other_streams[size_t(N - 1) * n * d + 5] += 1.0f;
    EXPECT_GT(max_abs_diff(base, run(other_streams, next)), 1e-6);
}

// The MTP state follows every decoder block's in the state area: the main model's logits are the same
// bits with and without it.
TEST(RefMtp, MainModelUnchangedByMtpState) {
    const RefModel& m = tiny_model();
    const auto ids = random_token_ids(150, 13);
    std::vector<float> a, b;
    SeqState s0(m.config(), 0, 150), s1(m.config(), 1, 150);
    EXPECT_EQ(s1.layout.layers.size(), s0.layout.layers.size() + 1);
    EXPECT_GT(s1.layout.state_elems, s0.layout.state_elems);
    ASSERT_TRUE(m.forward(s0.view(), ids, 0, {}, a).is_ok());
    ASSERT_TRUE(m.forward(s1.view(), ids, 0, {}, b).is_ok());
    EXPECT_EQ(a, b);
}

TEST(RefMtp, ErrorsSayWhatIsWrong) {
    const RefModel& m = tiny_model();
    const ModelConfig& cfg = m.config();
    const int n = cfg.hc_mult, d = cfg.hidden_size;
    std::vector<float> streams(size_t(2) * n * d, 0.5f), logits;
    std::vector<int32_t> next = {5, 6};
    SeqState with(cfg, 1, 4), without(cfg, 0, 4);
    Status s = m.mtp_forward(1, with.view(), streams, next, 0, {}, logits);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("MTP block 1"), std::string::npos) << s.to_string();
    s = m.mtp_forward(0, with.view(), streams, next, -1, {}, logits);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("negative"), std::string::npos) << s.to_string();
    s = m.mtp_forward(0, without.view(), streams, next, 0, {}, logits);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("no state for MTP block 0"), std::string::npos) << s.to_string();
    next[1] = int32_t(cfg.vocab_size);
    s = m.mtp_forward(0, with.view(), streams, next, 0, {}, logits);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
    EXPECT_NE(s.message().find("position 2"), std::string::npos) << s.to_string();  // the token's own position
    next[1] = 6;
    s = m.mtp_forward(0, with.view(), std::span<const float>(streams).first(size_t(n) * d), next, 0, {}, logits);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("streams"), std::string::npos) << s.to_string();
    EXPECT_FALSE(m.mtp_forward(0, with.view(), {}, {}, 0, {}, logits).is_ok());
    // A model without MTP weights.
    const ModelConfig c0 = testing_tiny::tiny_config_without_mtp();
    const RefModel plain(c0, ModelWeights::random(c0, 1));
    EXPECT_EQ(plain.mtp_blocks(), 0);
    SeqState sp(c0, 0, 4);
    s = plain.mtp_forward(0, sp.view(), streams, std::vector<int32_t>{5, 6}, 0, {}, logits);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_FALSE(KvLayout::make(c0, 16, 4, KvRowFormat::kF32, 1).is_ok());  // more MTP blocks than the model has
}

// The MTP blocks are drawn after every main-model tensor: the main model's values do not depend on them.
TEST(RefMtp, RandomMainWeightsDoNotDependOnTheMtpBlock) {
    ModelConfig c0 = tiny_model_config();
    c0.num_nextn_predict_layers = 0;
    const ModelWeights a = ModelWeights::random(c0, 7), b = ModelWeights::random(tiny_model_config(), 7);
    EXPECT_TRUE(a.mtp.empty());
    ASSERT_EQ(b.mtp.size(), 1u);
    EXPECT_EQ(a.embed, b.embed);
    EXPECT_EQ(a.head, b.head);
    EXPECT_EQ(a.hc_head_fn, b.hc_head_fn);
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t l = 0; l < a.layers.size(); ++l) {
        EXPECT_EQ(a.layers[l].wq_b, b.layers[l].wq_b) << l;
        EXPECT_EQ(a.layers[l].tid2eid, b.layers[l].tid2eid) << l;
        EXPECT_EQ(a.layers[l].experts.back().w2, b.layers[l].experts.back().w2) << l;
    }
}

// With packed rows too, the MTP state leaves every decoder block's offsets and the page size as they were.
TEST(RefMtp, LayoutWithMtpStateKeepsTheDecoderOffsets) {
    for (KvRowFormat f : {KvRowFormat::kF32, KvRowFormat::kFp8}) {
        auto a = KvLayout::make(tiny_model_config(), 16, 4, f, 0), b = KvLayout::make(tiny_model_config(), 16, 4, f, 1);
        ASSERT_TRUE(a.is_ok() && b.is_ok()) << kv_row_format_name(f);
        EXPECT_EQ(a->page_elems, b->page_elems);
        EXPECT_EQ(b->layers.size(), a->layers.size() + 1);
        EXPECT_GT(b->state_elems, a->state_elems);
        for (size_t l = 0; l < a->layers.size(); ++l) {
            EXPECT_EQ(a->layers[l].ring_offset, b->layers[l].ring_offset);
            EXPECT_EQ(a->layers[l].comp_kv_offset, b->layers[l].comp_kv_offset);
            EXPECT_EQ(a->layers[l].idx_row_offset, b->layers[l].idx_row_offset);
        }
        EXPECT_GE(b->layers.back().ring_offset, a->state_elems);
        EXPECT_EQ(b->layers.back().ratio, 0);
    }
}

// An official compress_ratios list carries the MTP blocks' entries after the decoder's; they are kept
// apart, and one other than 0 (not implemented) leaves the main model loadable.
TEST(RefMtp, ConfigKeepsTheMtpRatiosApart) {
    nlohmann::json j = nlohmann::json::parse(flash_config_json(4));
    auto c = ModelConfig::from_json_text(j.dump());
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->compress_ratios.size(), 4u);
    EXPECT_EQ(c->mtp_compress_ratios, std::vector<int>{0});
    j["compress_ratios"].back() = 4;
    c = ModelConfig::from_json_text(j.dump());
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(c->mtp_compress_ratios, std::vector<int>{4});
}

std::string read_text(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

struct TempDir {
    fs::path p;
    explicit TempDir(const std::string& tag)
        : p(fs::temp_directory_path() / ("dsv4_mtp_" + tag + "_" + std::to_string(::getpid()))) {
        fs::create_directories(p);
    }
    ~TempDir() { fs::remove_all(p); }
};

// mtp.0 from a checkpoint in the official layout: loaded when the config asks for it; a block the
// checkpoint lacks is an error that names its first tensor; a checkpoint without any mtp.* loads
// without the block.
TEST(RefMtp, LoadedFromCheckpoint) {
    nlohmann::json j =
        nlohmann::json::parse(read_text(std::string(DSV4_SOURCE_DIR) + "/tests/data/golden/tiny_quant/config.json"));
    j["num_nextn_predict_layers"] = 1;
    const std::string json = j.dump();
    auto cfg = ModelConfig::from_json_text(json);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    TempDir t("full");
    SyntheticCheckpointOptions o;
    o.threads = 2;
    o.progress = false;
    ASSERT_TRUE(write_synthetic_checkpoint(t.p.string(), *cfg, json, o).is_ok());
    {
        auto ck = Checkpoint::open(t.p.string());
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        auto w = ModelWeights::load(*cfg, *ck);
        ASSERT_TRUE(w.is_ok()) << w.status().to_string();
        ASSERT_EQ(w->mtp.size(), 1u);
        EXPECT_EQ(w->mtp[0].e_proj.size(), size_t(cfg->hidden_size) * cfg->hidden_size);
        EXPECT_EQ(w->mtp[0].block.experts.size(), size_t(cfg->n_routed_experts));
        EXPECT_FALSE(w->mtp[0].block.gate_bias.empty());  // learned routing, never hash
        EXPECT_FALSE(w->mtp[0].block.has_compressor);
        double ss = 0;
        for (float v : w->mtp[0].h_proj) ss += double(v) * v;
        EXPECT_TRUE(std::isfinite(ss) && ss > 0);
    }
    // A config asking for a second block the checkpoint lacks: the first missing tensor is named.
    {
        ModelConfig two = *cfg;
        two.num_nextn_predict_layers = 2;
        auto ck = Checkpoint::open(t.p.string());
        ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
        auto w = ModelWeights::load(two, *ck);
        ASSERT_FALSE(w.is_ok());
        EXPECT_NE(w.status().message().find("mtp.1."), std::string::npos) << w.status().to_string();
    }
    // A checkpoint without mtp.*: the main model alone.
    TempDir t2("plain");
    o.mtp = false;
    ASSERT_TRUE(write_synthetic_checkpoint(t2.p.string(), *cfg, json, o).is_ok());
    auto ck = Checkpoint::open(t2.p.string());
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    auto w = ModelWeights::load(*cfg, *ck);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    EXPECT_TRUE(w->mtp.empty());
}

}  // namespace
}  // namespace dsv4
