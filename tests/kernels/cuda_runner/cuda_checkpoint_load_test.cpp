// The runner loaded from a checkpoint file against the synthetic runner (issue 14 item 5): a
// checkpoint written by the synthetic writer (model/synthetic_checkpoint.h, the official layout,
// dtypes and shard index) and loaded through the path a user's download takes
// (make_cuda_runner(cfg, dir, opt): load plan, pinned staging ring, kernel layouts) gives logits
// bitwise identical to make_cuda_runner_synthetic with the same seed and the checkpoint's rounding
// (SyntheticWeightsOptions::bf16_norms), over chunked prefills and decode steps of two sequences
// (decode steps as CUDA graphs). The comparison can fail: the synthetic runner without the
// rounding, or with another seed, differs.
//
// Shapes: every tensor has its Flash shape (d 4096, 64 heads of 512, q/o rank 1024, experts
// 2048 wide, indexer 64 x 128, the 129,280-token vocabulary) but there are 3 layers (sliding with
// hash routing, CSA, HCA: every attention and routing kind) and 16 routed experts instead of 256,
// so the checkpoint (with its mtp.0 block) is ~3.6 GB instead of ~4.2 GB per layer. It is written
// to the temporary directory (TMPDIR) and removed. Label `cuda`; skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "model/synthetic_checkpoint.h"
#include "runtime/cuda_bench_runner.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSeed = 21;

// flash_config_json(3) with the proxy's layer kinds (sliding + hash, CSA, HCA) and 16 experts.
std::string small_flash_json() {
    auto j = nlohmann::ordered_json::parse(flash_config_json(3));
    j["compress_ratios"] = {0, 4, 128, 0};
    j["num_hash_layers"] = 1;
    j["n_routed_experts"] = 16;
    return j.dump(2) + "\n";
}

class TempCheckpoint {
public:
    TempCheckpoint() : dir_(fs::temp_directory_path() / fmt::format("dsv4_ckpt_load_{}", ::getpid())) {
        fs::remove_all(dir_);
    }
    ~TempCheckpoint() { fs::remove_all(dir_); }
    std::string str() const { return dir_.string(); }

private:
    fs::path dir_;
};

CudaRunnerOptions runner_options() {
    CudaRunnerOptions o;
    o.max_seqs = 4;
    o.max_step_tokens = 512;
    o.max_context = 4096;
    o.n_pages = 512;
    o.verbose = false;
    return o;
}

struct Seq {
    int64_t id = 0, pos = 0;
    std::vector<int32_t> table;
};

// Prefills two sequences in chunks (both in each step), then decodes `n_decode` greedy steps of both
// (tokens from `tokens_from`'s logits so both runners see the same inputs); every step's logits rows.
std::vector<std::vector<float>> run(ModelRunner& r, const ModelConfig& cfg, int n_decode,
                                    const std::vector<std::vector<float>>* tokens_from) {
    std::mt19937 g(3);
    std::vector<std::vector<int32_t>> prompts(2);
    for (int s = 0; s < 2; ++s)
        for (int i = 0; i < (s == 0 ? 300 : 170); ++i)
            prompts[size_t(s)].push_back(int32_t(g() % uint32_t(cfg.vocab_size)));
    std::vector<Seq> seqs(2);
    const int64_t per = r.kv_layout().pages_for_tokens(300 + n_decode + 1);
    for (int s = 0; s < 2; ++s) {
        seqs[size_t(s)].id = s + 1;
        for (int64_t i = 0; i < per; ++i) seqs[size_t(s)].table.push_back(int32_t(s * per + i));
    }
    std::vector<std::vector<float>> all;
    size_t last[2] = {0, 0};  // index in `all` of each sequence's latest logits row
    auto step = [&](const std::vector<std::vector<int32_t>>& chunks) {
        ForwardBatch b;
        std::vector<size_t> who;
        for (size_t s = 0; s < chunks.size(); ++s)
            if (!chunks[s].empty()) {
                SeqChunk c;
                c.seq_id = seqs[s].id;
                c.tokens = chunks[s];
                c.start_pos = seqs[s].pos;
                c.page_table = seqs[s].table;
                b.seqs.push_back(c);
                who.push_back(s);
            }
        std::vector<std::vector<float>> out;
        const Status st = r.forward(b, out);
        EXPECT_TRUE(st.is_ok()) << st.to_string();
        EXPECT_EQ(out.size(), who.size());
        for (size_t s = 0; s < chunks.size(); ++s) seqs[s].pos += int64_t(chunks[s].size());
        for (size_t i = 0; i < out.size() && i < who.size(); ++i) {
            last[who[i]] = all.size();
            all.push_back(std::move(out[i]));
        }
    };
    // Prefill chunks of 128 tokens (the window) per sequence and step.
    for (size_t off = 0; off < 300; off += 128) {
        std::vector<std::vector<int32_t>> ch(2);
        for (size_t s = 0; s < 2; ++s)
            if (off < prompts[s].size())
                ch[s].assign(prompts[s].begin() + off, prompts[s].begin() + std::min(prompts[s].size(), off + 128));
        step(ch);
    }
    for (int i = 0; i < n_decode; ++i) {
        const auto& src = tokens_from ? *tokens_from : all;
        std::vector<std::vector<int32_t>> ch(2);
        for (size_t s = 0; s < 2; ++s) {
            const auto& row = src.at(last[s]);
            ch[s] = {int32_t(std::max_element(row.begin(), row.end()) - row.begin())};
        }
        step(ch);
    }
    return all;
}

int64_t differing_rows(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    EXPECT_EQ(a.size(), b.size());
    int64_t n = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        n += a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0;
    return n;
}

TEST(CudaCheckpointLoad, FileRunnerLogitsBitwiseEqualSyntheticRunner) {
    SKIP_WITHOUT_GPU();
    const std::string json = small_flash_json();
    auto cfg = ModelConfig::from_json_text(json);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    TempCheckpoint dir;
    SyntheticCheckpointOptions wo;
    wo.seed = kSeed;
    wo.progress = false;
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(write_synthetic_checkpoint(dir.str(), *cfg, json, wo).is_ok());
    const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t bytes = 0;
    for (const auto& e : fs::directory_iterator(dir.str())) bytes += e.file_size();
    std::printf("[ckpt-load] wrote %.2f GB in %.2f s (%u threads)\n", double(bytes) / 1e9, write_s,
                std::thread::hardware_concurrency());

    const int n_decode = 6;
    std::vector<std::vector<float>> from_file;
    {
        t0 = std::chrono::steady_clock::now();
        auto r = make_cuda_runner(*cfg, dir.str(), runner_options());
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        std::printf("[ckpt-load] loaded in %.2f s\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        from_file = run(**r, *cfg, n_decode, nullptr);
    }
    ASSERT_EQ(from_file.size(), size_t(3 + 2 + 2 * n_decode));  // prefill rows: 3 + 2 chunks
    for (const auto& row : from_file) {
        ASSERT_EQ(row.size(), size_t(cfg->vocab_size));
        for (float x : row) ASSERT_TRUE(std::isfinite(x));
    }
    auto synthetic = [&](uint64_t seed, bool bf16_norms) {
        SyntheticWeightsOptions w;
        w.seed = seed;
        w.bf16_norms = bf16_norms;
        auto r = make_cuda_runner_synthetic(*cfg, w, runner_options());
        EXPECT_TRUE(r.is_ok()) << r.status().to_string();
        return r.is_ok() ? run(**r, *cfg, n_decode, &from_file) : std::vector<std::vector<float>>{};
    };
    EXPECT_EQ(differing_rows(from_file, synthetic(kSeed, true)), 0) << "of " << from_file.size() << " logits rows";
    // The test can fail: without the checkpoint's bf16 norms, or with another seed, rows differ.
    EXPECT_EQ(differing_rows(from_file, synthetic(kSeed, false)), int64_t(from_file.size()));
    EXPECT_EQ(differing_rows(from_file, synthetic(kSeed + 1, true)), int64_t(from_file.size()));
}

}  // namespace
}  // namespace dsv4
