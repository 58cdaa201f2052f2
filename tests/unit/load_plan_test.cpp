// LoadPlan (model/load_plan.h): the golden checkpoints plan completely; each bad checkpoint (a
// missing, extra, mis-typed or mis-shaped tensor, a missing scale, a truncated shard, an index
// naming a missing file, a config disagreeing with the tensors, bad tid2eid / scale values) is an
// error naming the tensor and file, found on the host before any GPU allocation. The bad cases are
// variants of the tiny_quant golden (FP8 + MXFP4, official names), resharded with an index.
#include "model/load_plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/safetensors_writer.h"
#include "model/synthetic_checkpoint.h"
#include "model/weights.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = std::string(DSV4_SOURCE_DIR) + "/tests/data/golden";

class TempDir {
public:
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = fs::temp_directory_path() /
                fmt::format("dsv4_plan_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    std::string str() const { return path_.string(); }

private:
    fs::path path_;
};

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A tensor while a variant is written: the mutation may rename, retype, reshape or drop it.
struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    bool drop = false;
};

// Rewrites checkpoint `src` (a golden directory) into `dir` as `shards` shards with
// model.safetensors.index.json, applying `mutate` to every tensor and `extra` tensors added.
void write_variant(const std::string& src, const std::string& dir, int shards,
                   const std::function<void(Tensor&)>& mutate = {}, std::vector<Tensor> extra = {},
                   const std::function<void(std::string&)>& edit_config = {}) {
    auto ck = Checkpoint::open(src + "/model.safetensors");
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    std::vector<Tensor> all;
    for (const std::string& n : ck->names()) {
        auto v = *ck->get(n);
        Tensor t{n, v.dtype, v.shape, std::vector<uint8_t>(v.data, v.data + v.nbytes)};
        if (mutate) mutate(t);
        if (!t.drop) all.push_back(std::move(t));
    }
    for (auto& t : extra) all.push_back(std::move(t));
    std::vector<SafetensorsWriter> w(static_cast<size_t>(shards));
    std::string index = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
    for (size_t i = 0; i < all.size(); ++i) {
        const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i % shards + 1, shards);
        ASSERT_TRUE(w[i % shards].add(all[i].name, all[i].dtype, all[i].shape, all[i].bytes).is_ok()) << all[i].name;
        index += fmt::format("{}\"{}\": \"{}\"", i ? ", " : "", all[i].name, file);
    }
    index += "}}";
    for (int s = 0; s < shards; ++s)
        ASSERT_TRUE(
            w[size_t(s)].write(fmt::format("{}/model-{:05d}-of-{:05d}.safetensors", dir, s + 1, shards)).is_ok());
    write_text(dir + "/model.safetensors.index.json", index);
    std::string cfg = read_text(src + "/config.json");
    if (edit_config) edit_config(cfg);
    write_text(dir + "/config.json", cfg);
}

// Opens and plans a directory; the status of whichever step failed.
Result<LoadPlan> plan_dir(const std::string& dir, int expert_first = 0, int expert_count = 0) {
    DSV4_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfig::from_file(dir + "/config.json"));
    DSV4_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::open(dir));
    DSV4_ASSIGN_OR_RETURN(LoadPlan p, make_load_plan(cfg, ck, expert_first, expert_count));
    return p;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// The error of planning a variant, checked to name every part in `parts`.
void expect_error(const Result<LoadPlan>& r, StatusCode code, std::initializer_list<std::string_view> parts) {
    ASSERT_FALSE(r.is_ok()) << "the bad checkpoint was accepted";
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    for (auto p : parts) EXPECT_TRUE(contains(r.status().to_string(), p)) << r.status().to_string() << "\nlacks: " << p;
}

// A tensor name of the golden with the given dtype (the first, sorted).
std::string first_of_dtype(DType d) {
    auto ck = std::move(Checkpoint::open(kGolden + "/tiny_quant/model.safetensors")).value();
    for (const auto& n : ck.names())
        if (ck.get(n)->dtype == d) return n;
    return "";
}

TEST(LoadPlan, GoldensPlanEveryTensor) {
    for (const char* g : {"tiny_f32", "tiny_quant", "tiny_real_window"}) {
        const std::string dir = kGolden + "/" + g;
        auto cfg = *ModelConfig::from_file(dir + "/config.json");
        auto ck = std::move(Checkpoint::open(dir + "/model.safetensors")).value();
        auto plan = make_load_plan(cfg, ck);
        ASSERT_TRUE(plan.is_ok()) << g << ": " << plan.status().to_string();
        // The goldens hold the MTP block (mtp.0.*), which the GPU runner skips with its reason.
        size_t mtp = 0;
        for (const auto& n : ck.names()) mtp += n.starts_with("mtp.0.") ? 1 : 0;
        EXPECT_GT(mtp, 0u) << g;
        size_t skipped_tensors = 0;
        for (const auto& s : plan->skipped) {
            EXPECT_TRUE(s.name.starts_with("mtp.0.")) << g << ": " << s.name;
            skipped_tensors += s.name.ends_with(".scale") ? 0 : 1;
        }
        EXPECT_GT(skipped_tensors, 0u) << g;
        size_t scales = 0;
        uint64_t bytes = 0;
        for (const auto& t : plan->tensors) scales += t.scale.nbytes ? 1 : 0;
        for (const auto& n : ck.names())
            if (!n.starts_with("mtp.")) bytes += ck.get(n)->nbytes;
        EXPECT_EQ(plan->tensors.size() + scales + plan->skipped.size(), ck.names().size()) << g;
        EXPECT_EQ(plan->checkpoint_bytes, bytes) << g;
        EXPECT_EQ(plan->expert_count, cfg.n_routed_experts);
    }
}

TEST(LoadPlan, ShardedWithMtpBlockSkipsItWithAReason) {
    TempDir t;
    std::vector<Tensor> extra;
    extra.push_back({"mtp.1.enorm.weight", DType::kBF16, {4}, std::vector<uint8_t>(8, 0)});
    write_variant(kGolden + "/tiny_quant", t.str(), 3, {}, std::move(extra));
    auto plan = plan_dir(t.str());
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    // Every mtp.* tensor (the golden's block and the extra one) is skipped, each with its reason.
    ASSERT_GT(plan->skipped.size(), 1u);
    bool extra_seen = false;
    for (const auto& s : plan->skipped) {
        EXPECT_TRUE(s.name.starts_with("mtp.")) << s.name;
        EXPECT_TRUE(contains(s.reason, "MTP")) << s.reason;
        extra_seen |= s.name == "mtp.1.enorm.weight";
    }
    EXPECT_TRUE(extra_seen);
    std::set<std::string> files;
    for (const auto& p : plan->tensors) files.insert(p.weight.file);
    EXPECT_EQ(files.size(), 3u);
}

// Asked for (speculative decoding), the MTP block is planned like a decoder block plus its projections,
// norms and head mixing: nothing of mtp.0 is skipped, every golden tensor is then consumed, and the
// block's tensors keep their checkpoint formats (FP8 e_proj / h_proj, MXFP4 experts in tiny_quant). A
// missing tensor of the block is an error naming it; more blocks than the config has are refused.
TEST(LoadPlan, MtpBlockPlannedWhenAsked) {
    for (const char* g : {"tiny_f32", "tiny_quant"}) {
        const std::string dir = kGolden + "/" + g;
        auto cfg = *ModelConfig::from_file(dir + "/config.json");
        auto ck = std::move(Checkpoint::open(dir + "/model.safetensors")).value();
        auto plan = make_load_plan(cfg, ck, 0, 0, 1);
        ASSERT_TRUE(plan.is_ok()) << g << ": " << plan.status().to_string();
        EXPECT_EQ(plan->mtp_blocks, 1);
        EXPECT_TRUE(plan->skipped.empty()) << g << ": " << plan->skipped.front().name;
        size_t scales = 0;
        uint64_t bytes = 0;
        for (const auto& t : plan->tensors) scales += t.scale.nbytes ? 1 : 0;
        for (const auto& n : ck.names()) bytes += ck.get(n)->nbytes;
        EXPECT_EQ(plan->tensors.size() + scales, ck.names().size()) << g;
        EXPECT_EQ(plan->checkpoint_bytes, bytes) << g;
        for (const char* name : {"mtp.0.e_proj.weight", "mtp.0.h_proj.weight", "mtp.0.enorm.weight", "mtp.0.hc_head_fn",
                                 "mtp.0.attn.wq_a.weight", "mtp.0.ffn.gate.bias", "mtp.0.ffn.experts.0.w1.weight"})
            EXPECT_NE(plan->find(name), nullptr) << g << ": " << name;
        EXPECT_EQ(plan->find("mtp.0.attn.compressor.wkv.weight"), nullptr);  // ratio 0: window only
        if (std::string(g) == "tiny_quant") {
            EXPECT_EQ(plan->find("mtp.0.e_proj.weight")->fmt, PlanFormat::kFp8E8M0);
            EXPECT_EQ(plan->find("mtp.0.ffn.experts.0.w1.weight")->fmt, PlanFormat::kMxfp4);
        }
        expect_error(make_load_plan(cfg, ck, 0, 0, 2), StatusCode::kInvalidArgument, {"num_nextn_predict_layers"});
    }
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, [](Tensor& x) { x.drop = x.name.starts_with("mtp.0.h_proj."); });
    auto cfg = *ModelConfig::from_file(t.str() + "/config.json");
    auto ck = std::move(Checkpoint::open(t.str())).value();
    expect_error(make_load_plan(cfg, ck, 0, 0, 1), StatusCode::kNotFound, {"mtp.0.h_proj.weight"});
    EXPECT_TRUE(make_load_plan(cfg, ck).is_ok());  // not asked: the partial block is skipped
}

// The CPU reference loads the MTP block all or none: a checkpoint holding some mtp.* tensors but not
// mtp.0.e_proj is an error naming it, not a model silently without the block.
TEST(LoadPlan, PartialMtpBlockIsAnErrorNamingTheMissingTensor) {
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, [](Tensor& x) { x.drop = x.name.starts_with("mtp.0.e_proj."); });
    auto cfg = ModelConfig::from_file(t.str() + "/config.json");
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    ASSERT_EQ(cfg->num_nextn_predict_layers, 1);
    auto ck = Checkpoint::open(t.str());
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    auto w = ModelWeights::load(*cfg, *ck);
    ASSERT_FALSE(w.is_ok());
    EXPECT_TRUE(contains(w.status().message(), "mtp.0.e_proj.weight")) << w.status().to_string();
}

TEST(LoadPlan, UnconsumedTensorIsAnErrorNamingIt) {
    TempDir t;
    std::vector<Tensor> extra;
    extra.push_back({"layers.0.attn.wq_c.weight", DType::kBF16, {2, 2}, std::vector<uint8_t>(8, 0)});
    write_variant(kGolden + "/tiny_quant", t.str(), 2, {}, std::move(extra));
    expect_error(plan_dir(t.str()), StatusCode::kInvalidArgument,
                 {"layers.0.attn.wq_c.weight", ".safetensors", "not used"});
}

TEST(LoadPlan, MisspelledNameIsAMissingTensor) {
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, [](Tensor& x) {
        if (x.name == "layers.1.ffn_norm.weight") x.name = "layers.1.ffn_norm.weights";
    });
    expect_error(plan_dir(t.str()), StatusCode::kNotFound, {"layers.1.ffn_norm.weight"});
}

TEST(LoadPlan, WrongDtypeNamesTensorAndFile) {
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, [](Tensor& x) {
        if (x.name == "layers.0.attn_norm.weight") x.dtype = dtype_size(x.dtype) == 4 ? DType::kI32 : DType::kI16;
    });
    expect_error(plan_dir(t.str()), StatusCode::kInvalidArgument, {"layers.0.attn_norm.weight", ".safetensors"});
}

TEST(LoadPlan, WrongShapeNamesTensorAndFile) {
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, [](Tensor& x) {
        if (x.name == "layers.2.attn.q_norm.weight") {
            x.shape[0] -= 1;
            x.bytes.resize(x.bytes.size() - dtype_size(x.dtype));
        }
    });
    expect_error(plan_dir(t.str()), StatusCode::kInvalidArgument,
                 {"layers.2.attn.q_norm.weight", ".safetensors", "config.json"});
}

TEST(LoadPlan, MissingFp8ScaleNamesTheWeight) {
    const std::string w = first_of_dtype(DType::kF8E4M3);
    ASSERT_FALSE(w.empty());
    const std::string base = w.substr(0, w.size() - 7);
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, [&](Tensor& x) {
        if (x.name == base + ".scale") x.drop = true;
    });
    expect_error(plan_dir(t.str()), StatusCode::kNotFound, {w, "scale"});
}

TEST(LoadPlan, MissingMxfp4ScaleNamesTheWeight) {
    const std::string w = first_of_dtype(DType::kI8);
    ASSERT_FALSE(w.empty());
    const std::string base = w.substr(0, w.size() - 7);
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, [&](Tensor& x) {
        if (x.name == base + ".scale") x.drop = true;
    });
    expect_error(plan_dir(t.str()), StatusCode::kNotFound, {w, "scale"});
}

TEST(LoadPlan, NanUe8m0ScaleIsDataLoss) {
    const std::string w = first_of_dtype(DType::kF8E4M3);
    const std::string base = w.substr(0, w.size() - 7);
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, [&](Tensor& x) {
        if (x.name == base + ".scale") x.bytes[0] = 255;
    });
    expect_error(plan_dir(t.str()), StatusCode::kDataLoss, {base + ".scale", "255"});
}

TEST(LoadPlan, Tid2eidOutOfRangeIsDataLoss) {
    TempDir t;
    std::string name;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, [&](Tensor& x) {
        if (x.name.ends_with("ffn.gate.tid2eid") && name.empty()) {
            name = x.name;
            const int64_t big = 1000;
            std::memcpy(x.bytes.data(), &big, x.dtype == DType::kI64 ? 8 : 4);
        }
    });
    ASSERT_FALSE(name.empty());
    expect_error(plan_dir(t.str()), StatusCode::kDataLoss, {name, "1000"});
}

TEST(LoadPlan, TruncatedShardNamesTheFile) {
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2);
    const std::string shard = t.str() + "/model-00002-of-00002.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 100);
    expect_error(plan_dir(t.str()), StatusCode::kDataLoss, {"model-00002-of-00002.safetensors"});
}

TEST(LoadPlan, IndexNamingAMissingFile) {
    TempDir t;
    write_variant(kGolden + "/tiny_quant", t.str(), 2);
    fs::remove(t.str() + "/model-00001-of-00002.safetensors");
    expect_error(plan_dir(t.str()), StatusCode::kNotFound, {"model-00001-of-00002.safetensors"});
}

TEST(LoadPlan, ConfigWithFewerLayersThanTheCheckpoint) {
    TempDir t;
    auto cfg = *ModelConfig::from_file(kGolden + "/tiny_quant/config.json");
    const int L = cfg.n_layers;
    ASSERT_EQ(L, 5);  // the per-layer lists edited below are those of the 5-layer golden
    write_variant(kGolden + "/tiny_quant", t.str(), 2, {}, {}, [&](std::string& c) {
        // The config of a 4-layer model: its per-layer lists drop their last entry.
        for (auto [from, to] :
             {std::pair<std::string, std::string>{"\"num_hidden_layers\": 5", "\"num_hidden_layers\": 4"},
              {"16,\n    4\n  ]", "16\n  ]"},
              {"\"heavily_compressed_attention\",\n    \"compressed_sparse_attention\"\n  ]",
               "\"heavily_compressed_attention\"\n  ]"},
              {"\"moe\",\n    \"moe\"\n  ]", "\"moe\"\n  ]"}}) {
            ASSERT_NE(c.find(from), std::string::npos) << from;
            c.replace(c.find(from), from.size(), to);
        }
    });
    expect_error(plan_dir(t.str()), StatusCode::kInvalidArgument,
                 {"layers.4.", "num_hidden_layers = 4", ".safetensors"});
}

TEST(LoadPlan, ConfigWithOtherExpertCountDisagreesWithTensors) {
    TempDir t;
    auto cfg = *ModelConfig::from_file(kGolden + "/tiny_quant/config.json");
    const int E = cfg.n_routed_experts;
    write_variant(kGolden + "/tiny_quant", t.str(), 2, {}, {}, [&](std::string& c) {
        const std::string from = fmt::format("\"n_routed_experts\": {}", E);
        ASSERT_NE(c.find(from), std::string::npos);
        c.replace(c.find(from), from.size(), fmt::format("\"n_routed_experts\": {}", 2 * E));
    });
    expect_error(plan_dir(t.str()), StatusCode::kInvalidArgument, {"layers.0.ffn.gate.weight", "config.json"});
}

// A Hugging Face cache snapshot: every file a symlink into ../../blobs/.
TEST(LoadPlan, HuggingFaceSnapshotOfSymlinks) {
    TempDir t;
    const fs::path root(t.str()), blobs = root / "blobs", snap = root / "snapshots" / "0123abcd";
    fs::create_directories(blobs);
    fs::create_directories(snap);
    for (const char* f : {"config.json", "model.safetensors"}) {
        fs::copy_file(kGolden + "/tiny_quant/" + f, blobs / (std::string("blob-") + f));
        fs::create_symlink(fs::path("../../blobs") / (std::string("blob-") + f), snap / f);
    }
    auto plan = plan_dir(snap.string());
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    EXPECT_GT(plan->tensors.size(), 0u);
}

TEST(LoadPlan, ExpertParallelRankPlansOnlyItsExperts) {
    const std::string dir = kGolden + "/tiny_quant";
    auto cfg = *ModelConfig::from_file(dir + "/config.json");
    auto ck = std::move(Checkpoint::open(dir + "/model.safetensors")).value();
    const int E = cfg.n_routed_experts, n = E / 4;
    auto plan = make_load_plan(cfg, ck, n, n);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    int experts = 0;
    for (const auto& t : plan->tensors) {
        if (t.expert_local < 0) continue;
        ++experts;
        EXPECT_LT(t.expert_local, n);
        EXPECT_TRUE(contains(t.name, fmt::format(".experts.{}.", n + t.expert_local))) << t.name;
    }
    EXPECT_EQ(experts, 3 * n * cfg.n_layers);
    auto all = *make_load_plan(cfg, ck);
    EXPECT_LT(plan->checkpoint_bytes, all.checkpoint_bytes);
    EXPECT_FALSE(make_load_plan(cfg, ck, E - 1, 2).is_ok());
}

// The synthetic writer at tiny shapes (the tiny_quant schedule): official names and dtypes, several
// shards + index, mtp.0 skipped with its reason, every other tensor consumed; values finite.
TEST(SyntheticCheckpoint, TinyShapesPlanCompletely) {
    TempDir t;
    const std::string json = read_text(kGolden + "/tiny_quant/config.json");
    auto cfg = *ModelConfig::from_json_text(json);
    SyntheticCheckpointOptions o;
    o.shard_bytes = 1 << 20;
    o.threads = 2;
    o.progress = false;
    ASSERT_TRUE(write_synthetic_checkpoint(t.str(), cfg, json, o).is_ok());
    EXPECT_TRUE(fs::exists(t.str() + "/model.safetensors.index.json"));
    auto ck = Checkpoint::open(t.str());
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    auto plan = make_load_plan(cfg, *ck);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    std::set<std::string> files;
    for (const auto& p : plan->tensors) files.insert(p.weight.file);
    EXPECT_GE(files.size(), 3u);
    ASSERT_FALSE(plan->skipped.empty());
    for (const auto& s : plan->skipped) EXPECT_TRUE(s.name.starts_with("mtp.0.")) << s.name;
    EXPECT_EQ(ck->get("layers.0.attn_norm.weight")->dtype, DType::kBF16);
    EXPECT_EQ(ck->get("layers.0.ffn.gate.tid2eid")->dtype, DType::kI64);
    EXPECT_EQ(ck->get("layers.3.ffn.experts.0.w2.weight")->dtype, DType::kI8);
    EXPECT_EQ(ck->get("layers.2.attn.wq_b.scale")->dtype, DType::kF8E8M0);
    EXPECT_EQ(ck->get("hc_head_fn")->dtype, DType::kF32);
    for (const char* n : {"embed.weight", "layers.2.attn.wq_b.weight", "layers.4.ffn.experts.3.w1.weight"}) {
        const auto shape = plan->find(n)->shape;
        auto v = load_f32(*ck, n, shape);
        ASSERT_TRUE(v.is_ok()) << n << ": " << v.status().to_string();
        double ss = 0;
        for (float x : *v) ss += double(x) * x;
        EXPECT_TRUE(std::isfinite(ss) && ss > 0) << n;
    }
}

TEST(SyntheticCheckpoint, FlashConfigFollowsTheSpec) {
    for (int L : {1, 4, 43}) {
        auto cfg = ModelConfig::from_json_text(flash_config_json(L));
        ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
        EXPECT_EQ(cfg->n_layers, L);
        EXPECT_EQ(cfg->hidden_size, 4096);
        EXPECT_EQ(cfg->vocab_size, 129280);
        EXPECT_EQ(cfg->n_routed_experts, 256);
        EXPECT_EQ(cfg->n_experts_per_tok, 6);
        if (L == 43) {
            EXPECT_EQ(cfg->compress_ratio(2), 4);
            EXPECT_EQ(cfg->compress_ratio(3), 128);
            EXPECT_EQ(cfg->compress_ratio(42), 4);
            EXPECT_EQ(cfg->mlp_types[2], MoeRouting::kHash);
            EXPECT_EQ(cfg->mlp_types[3], MoeRouting::kLearned);
        }
    }
}

}  // namespace
}  // namespace dsv4
