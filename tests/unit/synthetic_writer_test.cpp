// The synthetic checkpoint writer's parallel shard writing (model/generated_shard.h): chunk cuts
// cover the data region and start every piece on an element, and the files do not depend on the
// number of threads, the chunk size or how many shards are written at once (tiny shapes of the tiny_quant schedule,
// odd-sized tensors such as the 12-byte hc_*_scale included).
#include "model/generated_shard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "model/config.h"
#include "model/synthetic_checkpoint.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(GeneratedShard, ChunkCutsCoverAndStartOnElements) {
    // Tensor sizes with odd lengths and empty tensors; every chunk size from 1 to 80 bytes.
    const std::vector<uint64_t> sizes{12, 3, 0, 1000, 8, 5, 0, 0, 4096, 2, 77};
    std::vector<uint64_t> starts{0};
    for (uint64_t s : sizes) starts.push_back(starts.back() + s);
    for (uint64_t chunk = 1; chunk <= 80; ++chunk) {
        const auto cuts = chunk_cuts(starts, chunk);
        ASSERT_GE(cuts.size(), 2u);
        EXPECT_EQ(cuts.front(), 0u);
        EXPECT_EQ(cuts.back(), starts.back());
        const uint64_t step = std::max<uint64_t>(chunk & ~uint64_t(7), 8);
        for (size_t i = 1; i < cuts.size(); ++i) {
            EXPECT_GT(cuts[i], cuts[i - 1]) << "chunk " << chunk;
            EXPECT_LE(cuts[i] - cuts[i - 1], step) << "chunk " << chunk;
            // The tensor the cut falls in (the last non-empty one starting at or before it).
            size_t t = 0;
            for (size_t j = 0; j < sizes.size(); ++j)
                if (starts[j] <= cuts[i] && cuts[i] < starts[j + 1]) t = j;
            if (cuts[i] < starts.back()) {
                EXPECT_EQ((cuts[i] - starts[t]) % 8, 0u) << "chunk " << chunk << " cut " << cuts[i];
            }
        }
    }
    EXPECT_EQ(chunk_cuts(std::vector<uint64_t>{0}, 8), std::vector<uint64_t>{0});
}

TEST(GeneratedShard, BytesDoNotDependOnThreadsChunkSizeOrParallelShards) {
    const std::string json = [] {
        std::ifstream in(std::string(DSV4_SOURCE_DIR) + "/tests/data/golden/tiny_quant/config.json");
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }();
    auto cfg = ModelConfig::from_json_text(json);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    const fs::path base = fs::temp_directory_path() / fmt::format("dsv4_writer_{}", ::getpid());
    fs::remove_all(base);
    struct Run {
        int threads;
        uint64_t chunk;
        int files;  // shards written at once
    };
    const std::vector<Run> runs{{1, uint64_t(8) << 20, 1}, {3, 1000, 3}, {4, 24, 2}};
    for (size_t r = 0; r < runs.size(); ++r) {
        SyntheticCheckpointOptions o;
        o.shard_bytes = 1 << 20;
        o.threads = runs[r].threads;
        o.chunk_bytes = runs[r].chunk;
        o.parallel_shards = runs[r].files;
        o.progress = false;
        ASSERT_TRUE(write_synthetic_checkpoint((base / std::to_string(r)).string(), *cfg, json, o).is_ok());
    }
    int files = 0;
    for (const auto& e : fs::directory_iterator(base / "0")) {
        const std::string a = read_file(e.path());
        ASSERT_FALSE(a.empty()) << e.path();
        for (size_t r = 1; r < runs.size(); ++r)
            EXPECT_TRUE(a == read_file(base / std::to_string(r) / e.path().filename()))
                << e.path().filename() << " differs with " << runs[r].threads << " threads, chunk " << runs[r].chunk
                << ", " << runs[r].files << " files at once";
        ++files;
    }
    EXPECT_GE(files, 5);  // config, generation config, index and several shards
    fs::remove_all(base);
}

TEST(GeneratedShard, UnwritableDirectoryIsAnErrorNamingTheFile) {
    GeneratedTensor t{
        "x", DType::kF32, {4}, 16, [](std::span<uint8_t> b, uint64_t) { std::fill(b.begin(), b.end(), 0); }};
    const GeneratedTensor* ts[] = {&t};
    const Status s = write_generated_shard("/nonexistent-dir-dsv4/shard.safetensors", ts, {});
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.to_string().find("/nonexistent-dir-dsv4/shard.safetensors.tmp"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace dsv4
