// Tuning files (runtime/tuning_file.h, runtime/tuning_select.h): parsing and its errors, round trip,
// rule lookup, the options layer's place between defaults and environment, what the environment and
// command line override, and the choice of the default file for a GPU and model shape.
#include "runtime/tuning_file.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "model/flash_proxy.h"
#include "model/weights.h"
#include "runtime/runtime_options.h"
#include "runtime/tuning_select.h"

namespace dsv4 {
namespace {

const char* kFile = R"({
  "schema": "dsv4.tuning.v1",
  "key": {"gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "model_shape": "SHAPE"},
  "made": {"date": "2026-12-03T10:00:00Z", "git_sha": "abc123", "command": "dsv4 tune --op sparse_decode"},
  "options": {"split_kv_target_ctas": 256, "cuda_graphs": true, "kv_rows": "fp8"},
  "rules": [
    {"op": "sparse_decode", "tokens": [1, 8], "context": [0, 8192], "variant": "sd.a",
     "split_kv_target_ctas": 512, "measurement": {"ratio": 0.93, "ci": [0.91, 0.95], "n": 8}},
    {"op": "sparse_decode", "tokens": [9, 64], "split_kv_target_ctas": 128},
    {"op": "dense_gemv", "tokens": [1, 4], "variant": "g.a"},
    {"op": "moe_grouped", "tokens": [128, 100000], "rows_per_expert": [0, 47], "variant": "m.a"},
    {"op": "moe_grouped", "tokens": [128, 100000], "rows_per_expert": [48, 100000], "variant": "m.b"}
  ]
})";

std::string with(std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
}

TEST(TuningFile, ParsesKeyOptionsRulesAndMeasurement) {
    auto f = parse_tuning_json(kFile, "t.json");
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_EQ(f->key.gpu, "NVIDIA H200");
    EXPECT_EQ(f->key.driver, "580.159.04");
    EXPECT_EQ(f->key.model_shape, "SHAPE");
    EXPECT_EQ(f->made_git_sha, "abc123");
    ASSERT_EQ(f->options.size(), 3u);
    // By key; booleans as 1/0, integers as decimal text.
    EXPECT_EQ(f->options[0], (std::pair<std::string, std::string>{"cuda_graphs", "1"}));
    EXPECT_EQ(f->options[2], (std::pair<std::string, std::string>{"split_kv_target_ctas", "256"}));
    ASSERT_EQ(f->rules.size(), 5u);
    EXPECT_EQ(f->rules[0].op, TunedOp::kSparseDecode);
    EXPECT_EQ(f->rules[0].split_kv_target_ctas, 512);
    EXPECT_NE(f->rules[0].measurement_json.find("0.93"), std::string::npos);
    EXPECT_TRUE(f->rules[1].variant.empty());
    EXPECT_EQ(f->rules[0].describe(), "sparse_decode tokens 1-8 context 0-8192 -> sd.a, split_kv_target_ctas 512");
}

TEST(TuningFile, RoundTripsThroughItsJson) {
    auto f = parse_tuning_json(kFile, "t.json");
    ASSERT_TRUE(f.is_ok());
    auto g = parse_tuning_json(tuning_file_json(*f), "again");
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(tuning_file_json(*g), tuning_file_json(*f));
    ASSERT_EQ(g->rules.size(), f->rules.size());
    for (size_t i = 0; i < f->rules.size(); ++i) EXPECT_EQ(g->rules[i].describe(), f->rules[i].describe());
}

TEST(TuningFile, FirstMatchingRuleOfTheOpWins) {
    auto f = parse_tuning_json(kFile, "t.json");
    ASSERT_TRUE(f.is_ok());
    const auto& R = f->rules;
    EXPECT_EQ(find_tuning_rule(R, TunedOp::kSparseDecode, {.tokens = 4, .context = 100}), &R[0]);
    EXPECT_EQ(find_tuning_rule(R, TunedOp::kSparseDecode, {.tokens = 4, .context = 9000}), nullptr);
    EXPECT_EQ(find_tuning_rule(R, TunedOp::kSparseDecode, {.tokens = 64, .context = 1 << 20}), &R[1]);
    EXPECT_EQ(find_tuning_rule(R, TunedOp::kSparseDecode, {.tokens = 65, .context = 1}), nullptr);
    EXPECT_EQ(find_tuning_rule(R, TunedOp::kDenseGemv, {.tokens = 4}), &R[2]);
    EXPECT_EQ(find_tuning_rule(R, TunedOp::kDenseGemv, {.tokens = 5}), nullptr);
    EXPECT_EQ(find_tuning_rule(R, TunedOp::kMoeGrouped, {.tokens = 4096, .rows_per_expert = 96}), &R[4]);
    EXPECT_EQ(find_tuning_rule(R, TunedOp::kMoeGrouped, {.tokens = 512, .rows_per_expert = 12}), &R[3]);
    EXPECT_EQ(find_tuning_rule(R, TunedOp::kMoeExpert, {.tokens = 512, .rows_per_expert = 12}), nullptr);
}

TEST(TuningFile, ErrorsNameTheFileAndTheField) {
    struct Case {
        std::string text, expect;
    };
    const std::vector<Case> cases = {
        {"{not json", "not valid JSON"},
        {with(kFile, "dsv4.tuning.v1", "dsv4.tuning.v0"), "schema 'dsv4.tuning.v0'"},
        {with(kFile, R"("gpu": "NVIDIA H200", )", ""), "key: missing \"gpu\""},
        {with(kFile, R"("op": "dense_gemv")", R"("op": "gemm")"), "rules[2].op: unknown op 'gemm'"},
        {with(kFile, R"("tokens": [1, 4])", R"("tokens": [4, 1])"), "rules[2].tokens: [4, 1] is not 0 <= lo <= hi"},
        {with(kFile, R"("tokens": [1, 4])", R"("tokens": [1, 4], "context": [0, 9])"),
         "rules[2].context: dense_gemv has no context dimension"},
        {with(kFile, R"("tokens": [1, 4])", R"("tokens": [1, 4], "split_kv_target_ctas": 64)"),
         "rules[2].split_kv_target_ctas: dense_gemv takes no split-KV target"},
        {with(kFile, R"("tokens": [1, 4], "variant": "g.a")", R"("tokens": [1, 4])"),
         "rules[2]: names neither a variant nor a parameter"},
        {with(kFile, R"("tokens": [9, 64])", R"("tokens": [8, 64])"), "rules[1] (sparse_decode tokens 8-64"},
        {with(kFile, R"("rows_per_expert": [48, 100000])", R"("rows_per_expert": [47, 100000])"), "overlaps rules[3]"},
        {with(kFile, R"("made")", R"("mode")"), "unknown field \"mode\""},
        {with(kFile, R"("cuda_graphs": true)", R"("cuda_graphs": 1.5)"), "options.cuda_graphs"},
        {with(kFile, R"("variant": "g.a")", R"("variant": "g.a", "warps": 4)"), "rules[2].warps: unknown field"},
    };
    for (const Case& c : cases) {
        auto f = parse_tuning_json(c.text, "bad.json");
        ASSERT_FALSE(f.is_ok()) << c.expect;
        EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(f.status().message().find("bad.json"), std::string::npos) << f.status().message();
        EXPECT_NE(f.status().message().find(c.expect), std::string::npos)
            << "expected '" << c.expect << "' in: " << f.status().message();
    }
    auto missing = read_tuning_file("/nonexistent/dsv4-tuning.json");
    ASSERT_FALSE(missing.is_ok());
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

auto no_env() {
    return [](const char*) -> const char* { return nullptr; };
}

TEST(TuningFile, OptionsSitBetweenDefaultsAndTheEnvironment) {
    auto f = parse_tuning_json(kFile, "t.json");
    ASSERT_TRUE(f.is_ok());
    RuntimeOptions o;
    OptionOrigins orig;
    ASSERT_TRUE(apply_tuning_file(o, &orig, *f).is_ok());
    EXPECT_EQ(o.split_kv_target_ctas, 256);
    EXPECT_EQ(o.tuning_file, "t.json");
    EXPECT_EQ(o.tuning_rules.size(), 5u);
    const std::map<std::string, std::string> env = {{"DSV4_SPLIT_KV_TARGET", "1024"}};
    ASSERT_TRUE(apply_runtime_env(o, &orig, [&](const char* k) -> const char* {
                    auto it = env.find(k);
                    return it == env.end() ? nullptr : it->second.c_str();
                }).is_ok());
    ASSERT_TRUE(apply_runtime_settings(o, &orig, {"gemv_variant=cli.g"}).is_ok());
    EXPECT_EQ(o.split_kv_target_ctas, 1024);
    const std::vector<std::string> notes = drop_overridden_tuning(o, orig);
    // The environment's split-KV target strips the rules' targets (rule 1 had nothing else: dropped);
    // the command line's gemv_variant strips the dense_gemv rule's variant (dropped).
    ASSERT_EQ(o.tuning_rules.size(), 3u);
    EXPECT_EQ(o.tuning_rules[0].describe(), "sparse_decode tokens 1-8 context 0-8192 -> sd.a");
    EXPECT_EQ(o.tuning_rules[1].op, TunedOp::kMoeGrouped);
    EXPECT_EQ(notes.size(), 3u);
    const std::string table = runtime_options_table(o, orig);
    EXPECT_NE(table.find("per-shape kernel rules from t.json (3)"), std::string::npos) << table;
    EXPECT_NE(table.find("tuning file t.json"), std::string::npos) << table;  // cuda_graphs' source
}

TEST(TuningFile, BadOptionInTheFileNamesTheFile) {
    auto f = parse_tuning_json(with(kFile, R"("kv_rows": "fp8")", R"("kv_rows": "fp4")"), "t.json");
    ASSERT_TRUE(f.is_ok());
    RuntimeOptions o;
    const Status s = apply_tuning_file(o, nullptr, *f);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("tuning file t.json: options: option kv_rows: 'fp4'"), std::string::npos) << s.message();
}

TEST(TuningFile, KeyDifferences) {
    auto f = parse_tuning_json(kFile, "t.json");
    ASSERT_TRUE(f.is_ok());
    bool mismatch = true;
    EXPECT_TRUE(
        tuning_key_differences(*f, {"NVIDIA H200", "580.159.04", "13.0", "SHAPE"}, "abc123", &mismatch).empty());
    EXPECT_FALSE(mismatch);
    auto d = tuning_key_differences(*f, {"NVIDIA H200", "590.1", "13.0", "SHAPE"}, "fff", &mismatch);
    EXPECT_FALSE(mismatch);  // another driver or build: a warning only
    ASSERT_EQ(d.size(), 2u);
    EXPECT_NE(d[0].find("driver 580.159.04"), std::string::npos);
    EXPECT_NE(d[1].find("build abc123"), std::string::npos);
    d = tuning_key_differences(*f, {"NVIDIA H100 80GB HBM3", "580.159.04", "13.0", "OTHER"}, "abc123", &mismatch);
    EXPECT_TRUE(mismatch);
    EXPECT_EQ(d.size(), 2u);
}

TEST(TuningSelect, ModelShapeKeyIgnoresTheLayerCount) {
    FlashProxySpec a, b;
    a.n_layers = 20;
    b.n_layers = 43;
    auto ca = flash_proxy_config(a), cb = flash_proxy_config(b);
    ASSERT_TRUE(ca.is_ok() && cb.is_ok());
    EXPECT_EQ(model_shape_key(*ca), model_shape_key(*cb));
    EXPECT_EQ(model_shape_key(*ca), "d4096 h64x512 rope64 q1024 o8x1024 w128 idx64x128k512 e256x2048k6 hc4");
    EXPECT_NE(model_shape_key(tiny_model_config()), model_shape_key(*ca));
}

TEST(TuningSelect, DefaultIsTheNewestMatchingFileAndAnExplicitOneIsRead) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("dsv4-tuning-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
    write("a-old.json", with(kFile, "2026-12-03T10:00:00Z", "2026-11-01T00:00:00Z"));
    write("b-new.json", kFile);
    write("c-other-gpu.json", with(with(kFile, "NVIDIA H200", "NVIDIA B200"), "2026-12-03T10", "2026-12-31T10"));
    write("d-broken.json", "{");
    write("notes.txt", "not a tuning file");
    const TuningKey here{"NVIDIA H200", "580.159.04", "13.0", "SHAPE"};

    auto c = choose_tuning_file("", here, {(dir / "missing").string(), dir.string()}, "abc123");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    ASSERT_TRUE(c->file.has_value());
    EXPECT_EQ(c->file->path, (dir / "b-new.json").string());
    bool warned_broken = false;
    for (const auto& l : c->log) warned_broken |= l.find("d-broken.json") != std::string::npos;
    EXPECT_TRUE(warned_broken);

    c = choose_tuning_file("", {"NVIDIA H100", "", "", "SHAPE"}, {dir.string()}, "");
    ASSERT_TRUE(c.is_ok());
    EXPECT_FALSE(c->file.has_value());

    c = choose_tuning_file("none", here, {dir.string()}, "");
    ASSERT_TRUE(c.is_ok());
    EXPECT_FALSE(c->file.has_value());

    // An explicit file made elsewhere is used, with warnings.
    c = choose_tuning_file((dir / "c-other-gpu.json").string(), here, {}, "abc123");
    ASSERT_TRUE(c.is_ok());
    ASSERT_TRUE(c->file.has_value());
    bool warned_gpu = false;
    for (const auto& l : c->log)
        warned_gpu |= l.find("warning") != std::string::npos && l.find("B200") != std::string::npos;
    EXPECT_TRUE(warned_gpu);

    EXPECT_FALSE(choose_tuning_file((dir / "d-broken.json").string(), here, {}, "").is_ok());
    fs::remove_all(dir);
}

// The driver release, not the "86" of "x86_64" (the open kernel module's line puts the architecture
// before the version; the H200 machine's key read "driver 86" before this).
TEST(TuningSelect, DriverVersionFromTheKernelModuleLine) {
    EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release "
                                    "Build  (dvs-builder@U16-A24-23-2)  Thu Oct  9 20:59:55 UTC 2025"),
              "580.159.04");
    EXPECT_EQ(nvidia_driver_version(
                  "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023"),
              "535.104.05");
    EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX Kernel Module"), "");
    EXPECT_EQ(nvidia_driver_version("something else 1.2.3"), "");
}

TEST(TuningSelect, SearchDirectories) {
    const std::map<std::string, std::string> env = {{"DSV4_TUNING_DIR", "/t"}, {"HOME", "/home/u"}};
    auto look = [&](const char* k) -> const char* {
        auto it = env.find(k);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    EXPECT_EQ(tuning_search_dirs(look), (std::vector<std::string>{"/t", "/home/u/.config/dsv4/tuning"}));
    EXPECT_TRUE(tuning_search_dirs(no_env()).empty());
}

}  // namespace
}  // namespace dsv4
