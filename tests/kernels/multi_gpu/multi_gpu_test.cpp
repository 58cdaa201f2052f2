// Expert-parallel CUDA runner (CudaRunnerOptions::ep_*, runtime/multi_gpu_runner.h) against the
// one-GPU runner: the same prompt prefilled and decoded greedily gives the same greedy tokens and
// logits within tolerance (the MoE output is summed across ranks in another order, nothing else
// differs). Two models: the tiny_quant golden (d 128, I 32: the correct-first f32 MoE kernels) and
// a mid-size synthetic model whose MoE takes the fast MXFP4 kernels (d 1024, I 1024), hash-routed
// with an indexer top-k above the row count so no discrete choice can flip.
//   EpOneGpu.*  : 1 GPU. Two ranks on the same GPU, one thread each, joined by a host all-reduce
//                 (eager steps only: the host sum cannot be captured). Checks the EP MoE math.
//   MultiGpu.*  : 2 GPUs. make_model_runner / make_multi_gpu_runner with NCCL, decode graphs on.
// Every test skips without a GPU (or with fewer than 2 for MultiGpu.*).
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "kernels/cuda/synth/synth.h"
#include "runtime/cuda_bench_runner.h"
#include "runtime/cuda_runner.h"
#include "runtime/multi_gpu_runner.h"
#include "runtime/runner_factory.h"
#include "tests/kernels/cuda_runner/mid_model_config.h"

namespace dsv4 {
namespace {

std::string golden_dir() {
    const char* env = std::getenv("DSV4_GOLDEN_DIR");
    return std::string(env && *env ? env : DSV4_GOLDEN_DIR);
}

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// In-place f32 sum over `n` ranks through host memory, summed in rank order (identical bits on
// every rank). Waits for the stream: eager steps only (not capturable).
class HostAllReduce final : public dist::DeviceAllReduce {
public:
    struct Shared {
        explicit Shared(int n) : bar(n), bufs(size_t(n)) {}
        std::barrier<> bar;
        std::vector<std::vector<float>> bufs;
    };
    HostAllReduce(std::shared_ptr<Shared> s, int rank, int size) : s_(std::move(s)), rank_(rank), size_(size) {}
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    Status sum_f32(float* buf, int64_t count, void* stream) override {
        auto& mine = s_->bufs[size_t(rank_)];
        mine.resize(size_t(count));
        cudaError_t e = cudaMemcpyAsync(mine.data(), buf, size_t(count) * 4, cudaMemcpyDeviceToHost,
                                        static_cast<cudaStream_t>(stream));
        if (e == cudaSuccess) e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
        s_->bar.arrive_and_wait();
        std::vector<float> sum(size_t(count), 0.0f);
        for (int r = 0; r < size_; ++r)
            for (int64_t i = 0; i < count; ++i) sum[size_t(i)] += s_->bufs[size_t(r)][size_t(i)];
        s_->bar.arrive_and_wait();  // nobody refills its buffer before every rank has summed
        // On the runner's own (non-blocking) stream, and waited for: `sum` is pageable and local.
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(buf, sum.data(), size_t(count) * 4, cudaMemcpyHostToDevice,
                                static_cast<cudaStream_t>(stream));
        if (e == cudaSuccess) e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
        if (e != cudaSuccess) return error(StatusCode::kInternal, "host all-reduce: {}", cudaGetErrorString(e));
        return Status::ok();
    }

private:
    std::shared_ptr<Shared> s_;
    int rank_, size_;
};

// Runs f(r) for r in [0, n) on n threads (each with device `device` current) and waits.
void on_threads(int n, int device, const std::function<void(int)>& f) {
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r)
        th.emplace_back([&, r] {
            cudaSetDevice(device);
            f(r);
        });
    for (auto& t : th) t.join();
}

// One sequence: prefill `prompt` in one chunk, then `n_decode` greedy steps. Per step the logits
// of every rank's runner (runners[0] is the reference, one GPU). `step_all` runs one step on all
// of `runners` given the batch and returns their logits rows.
using StepAll = std::function<std::vector<std::vector<float>>(const ForwardBatch&)>;

struct Outcome {
    double worst = 0;      // max |logit diff| vs the reference over all steps
    double max_logit = 0;  // max |logit| of the reference (scale of `worst`)
    int greedy_mismatch = 0;
    int steps = 0;
    double rank_spread = 0;  // max |diff| between EP ranks' logits (0: all ranks hold the same result)
};

Outcome drive(const KvLayout& layout, const std::vector<int32_t>& prompt, int n_decode, const StepAll& ref,
              const StepAll& ep) {
    Outcome o;
    std::vector<int32_t> table;
    const int64_t total = int64_t(prompt.size()) + n_decode;
    for (int64_t i = 0; i < layout.pages_for_tokens(total); ++i) table.push_back(int32_t(i));
    std::vector<int32_t> chunk = prompt;
    int64_t pos = 0;
    for (int s = 0; s <= n_decode; ++s) {
        ForwardBatch b;
        b.seqs.push_back(SeqChunk{1, chunk, pos, true, table});
        const auto r = ref(b);
        const auto e = ep(b);
        if (r.empty() || e.empty() || r[0].empty() || e[0].size() != r[0].size()) {
            ADD_FAILURE() << "step " << s << ": missing logits";
            return o;
        }
        for (size_t i = 0; i < r[0].size(); ++i) {
            o.worst = std::max(o.worst, double(std::fabs(r[0][i] - e[0][i])));
            o.max_logit = std::max(o.max_logit, double(std::fabs(r[0][i])));
        }
        for (size_t k = 1; k < e.size(); ++k)
            for (size_t i = 0; i < e[0].size() && i < e[k].size(); ++i)
                o.rank_spread = std::max(o.rank_spread, double(std::fabs(e[0][i] - e[k][i])));
        o.greedy_mismatch += argmax(r[0]) != argmax(e[0]);
        ++o.steps;
        pos += int64_t(chunk.size());
        chunk = {argmax(r[0])};
    }
    return o;
}

std::vector<int32_t> prompt_ids(int n, int64_t vocab) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(int32_t((i * 37 + 11) % vocab));
    return v;
}

// The mid-size model of cuda_fast_e2e_test (fast MoE and linear paths), flip-free variant.
Result<ModelConfig> mid_config(const std::filesystem::path& dir) {
    DSV4_ASSIGN_OR_RETURN(nlohmann::json j, mid_model_config(golden_dir(), /*flip_free=*/true));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << j.dump(2);
    return ModelConfig::from_file((dir / "config.json").string());
}

CudaRunnerOptions small_options() {
    CudaRunnerOptions o;
    o.n_pages = 256;
    o.max_seqs = 4;
    o.max_step_tokens = 64;
    o.max_context = 1024;
    o.rt.kv_rows = "f32";
    o.verbose = false;
    return o;
}

void report(const char* what, const Outcome& o) {
    std::printf(
        "[%s] %d steps: max |logit diff| vs 1 GPU %.3g (max |logit| %.3g), greedy mismatches %d, "
        "rank spread %.3g\n",
        what, o.steps, o.worst, o.max_logit, o.greedy_mismatch, o.rank_spread);
}

// ---- one GPU, two ranks through the host all-reduce ------------------------------------------

// Builds `n` EP ranks on device 0 with `make(opt)` and steps them eagerly on n threads.
struct HostRanks {
    std::vector<std::unique_ptr<ModelRunner>> r;
    StepAll step() {
        return [this](const ForwardBatch& b) {
            std::vector<std::vector<std::vector<float>>> out(r.size());
            on_threads(int(r.size()), 0, [&](int k) {
                Status s = r[size_t(k)]->forward(b, out[size_t(k)]);
                EXPECT_TRUE(s.is_ok()) << "rank " << k << ": " << s.to_string();
            });
            std::vector<std::vector<float>> rows;
            for (auto& o : out) rows.push_back(o.empty() ? std::vector<float>{} : o[0]);
            return rows;
        };
    }
};

StepAll single(ModelRunner& r) {
    return [&r](const ForwardBatch& b) {
        std::vector<std::vector<float>> out;
        Status s = r.forward(b, out);
        EXPECT_TRUE(s.is_ok()) << s.to_string();
        return out;
    };
}

TEST(EpOneGpu, TinyQuantTwoRanksMatchOneRank) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    auto model = load_ref_model(golden_dir() + "/tiny_quant", 0);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    const std::string ckpt = golden_dir() + "/tiny_quant";
    CudaRunnerOptions o = small_options();
    o.rt.cuda_graphs = false;
    auto ref = make_cuda_runner(*model, ckpt, o);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    auto shared = std::make_shared<HostAllReduce::Shared>(2);
    HostRanks ranks;
    for (int r = 0; r < 2; ++r) {
        CudaRunnerOptions e = o;
        e.ep_rank = r;
        e.ep_size = 2;
        e.ep_all_reduce = std::make_shared<HostAllReduce>(shared, r, 2);
        auto m = make_cuda_runner(*model, ckpt, e);
        ASSERT_TRUE(m.is_ok()) << m.status().to_string();
        ranks.r.push_back(std::move(*m));
    }
    const Outcome out = drive((*ref)->kv_layout(), prompt_ids(19, 512), 8, single(**ref), ranks.step());
    report("ep one-gpu tiny_quant", out);
    EXPECT_EQ(out.steps, 9);
    EXPECT_EQ(out.rank_spread, 0.0);  // every rank holds the same all-reduced result
    EXPECT_LT(out.worst, 2e-3 * std::max(1.0, out.max_logit));
    EXPECT_EQ(out.greedy_mismatch, 0);
}

TEST(EpOneGpu, FastMoeTwoRanksMatchOneRank) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    const auto dir = std::filesystem::temp_directory_path() / ("dsv4_ep_mid_" + std::to_string(::getpid()));
    auto cfg = mid_config(dir);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    CudaRunnerOptions o = small_options();
    o.rt.cuda_graphs = false;
    SyntheticWeightsOptions wo;
    wo.seed = 5;
    auto ref = make_cuda_runner_synthetic(*cfg, wo, o);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    std::printf("%s", (*ref)->variant_table().c_str());  // which MoE kernels ran (fast: mxfp4 decode kernels)
    auto shared = std::make_shared<HostAllReduce::Shared>(2);
    HostRanks ranks;
    for (int r = 0; r < 2; ++r) {
        CudaRunnerOptions e = o;
        e.ep_rank = r;
        e.ep_size = 2;
        e.ep_all_reduce = std::make_shared<HostAllReduce>(shared, r, 2);
        auto m = make_cuda_runner_synthetic(*cfg, wo, e);
        ASSERT_TRUE(m.is_ok()) << m.status().to_string();
        ranks.r.push_back(std::move(*m));
    }
    const Outcome out = drive((*ref)->kv_layout(), prompt_ids(21, cfg->vocab_size), 8, single(**ref), ranks.step());
    report("ep one-gpu fast MoE", out);
    EXPECT_EQ(out.steps, 9);
    EXPECT_EQ(out.rank_spread, 0.0);
    EXPECT_LT(out.worst, 2e-2 * std::max(1.0, out.max_logit));
    EXPECT_EQ(out.greedy_mismatch, 0);
    std::filesystem::remove_all(dir);
}

// A rank's synthetic experts are the byte slice of the one-GPU fill (fill(first = offset)).
TEST(EpOneGpu, SyntheticExpertSliceEqualsFullFill) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    const int64_t n = 1 << 20, off = 3 * (1 << 18);
    uint8_t *full = nullptr, *part = nullptr;
    ASSERT_EQ(cudaMalloc(&full, size_t(n)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&part, size_t(n - off)), cudaSuccess);
    std::vector<uint8_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n - off));
    for (int kind = 0; kind < 2; ++kind) {
        namespace sy = cuda::synth;
        if (kind == 0) {
            ASSERT_EQ(sy::fill_mxfp4(full, n, 11, nullptr), cudaSuccess);
            ASSERT_EQ(sy::fill_mxfp4(part, n - off, 11, nullptr, off), cudaSuccess);
        } else {
            ASSERT_EQ(sy::fill_ue8m0(full, n, 12, 118, 121, nullptr), cudaSuccess);
            ASSERT_EQ(sy::fill_ue8m0(part, n - off, 12, 118, 121, nullptr, off), cudaSuccess);
        }
        ASSERT_EQ(cudaMemcpy(a.data(), full, a.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(b.data(), part, b.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin() + off)) << (kind == 0 ? "mxfp4" : "ue8m0");
        EXPECT_FALSE(std::equal(b.begin(), b.begin() + 4096, a.begin()));  // not the unshifted fill
    }
    cudaFree(full);
    cudaFree(part);
}

TEST(EpOneGpu, RejectsBadRankSetup) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    auto model = load_ref_model(golden_dir() + "/tiny_quant", 0);
    ASSERT_TRUE(model.is_ok());
    CudaRunnerOptions e = small_options();
    e.ep_rank = 0;
    e.ep_size = 2;  // no all-reduce group
    EXPECT_FALSE(make_cuda_runner(*model, golden_dir() + "/tiny_quant", e).is_ok());
    e.ep_size = 3;  // 16 experts do not split in 3
    e.ep_all_reduce = std::make_shared<HostAllReduce>(std::make_shared<HostAllReduce::Shared>(3), 0, 3);
    EXPECT_FALSE(make_cuda_runner(*model, golden_dir() + "/tiny_quant", e).is_ok());
}

// ---- two GPUs, NCCL --------------------------------------------------------------------------

#define SKIP_WITHOUT_TWO_GPUS() \
    if (cuda_device_count() < 2) GTEST_SKIP() << cuda_device_count() << " CUDA device(s), need 2"

TEST(MultiGpu, TinyQuantTwoGpusMatchOneGpu) {
    SKIP_WITHOUT_TWO_GPUS();
    RunnerOptions ro;
    ro.model = golden_dir() + "/tiny_quant";
    ro.backend = "cuda";
    ro.rt.kv_rows = "f32";
    auto one = make_model_runner(ro);
    ASSERT_TRUE(one.is_ok()) << one.status().to_string();
    ro.gpus = 2;
    auto two = make_model_runner(ro);
    ASSERT_TRUE(two.is_ok()) << two.status().to_string();
    const Outcome out = drive((*one)->kv_layout(), prompt_ids(19, 512), 12, single(**one), single(**two));
    report("ep 2 gpus tiny_quant (nccl, graphs)", out);
    EXPECT_EQ(out.steps, 13);
    EXPECT_LT(out.worst, 2e-3 * std::max(1.0, out.max_logit));
    EXPECT_EQ(out.greedy_mismatch, 0);
}

TEST(MultiGpu, FastMoeTwoGpusMatchOneGpu) {
    SKIP_WITHOUT_TWO_GPUS();
    const auto dir = std::filesystem::temp_directory_path() / ("dsv4_ep2_mid_" + std::to_string(::getpid()));
    auto cfg = mid_config(dir);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    CudaRunnerOptions o = small_options();
    SyntheticWeightsOptions wo;
    wo.seed = 5;
    auto ref = make_cuda_runner_synthetic(*cfg, wo, o);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    auto two =
        make_multi_gpu_runner(2, o, [&](int, const CudaRunnerOptions& e) -> Result<std::unique_ptr<ModelRunner>> {
            DSV4_ASSIGN_OR_RETURN(auto b, make_cuda_runner_synthetic(*cfg, wo, e));
            return std::unique_ptr<ModelRunner>(std::move(b));
        });
    ASSERT_TRUE(two.is_ok()) << two.status().to_string();
    const Outcome out = drive((*ref)->kv_layout(), prompt_ids(21, cfg->vocab_size), 12, single(**ref), single(**two));
    report("ep 2 gpus fast MoE (nccl, graphs)", out);
    EXPECT_EQ(out.steps, 13);
    EXPECT_LT(out.worst, 2e-2 * std::max(1.0, out.max_logit));
    EXPECT_EQ(out.greedy_mismatch, 0);
    // Graph replays on both GPUs together (what proxy-bench times).
    std::vector<int32_t> table;
    for (int64_t i = 0; i < (*two)->kv_layout().pages_for_tokens(40); ++i) table.push_back(int32_t(i));
    const std::vector<int32_t> tok{3};
    ForwardBatch b;
    b.seqs.push_back(SeqChunk{1, tok, 30, true, table});
    auto t = (*two)->time_decode_graph(b, 2, 5);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(t->step_us.size(), 5u);
    std::printf("[ep 2 gpus fast MoE] decode graph replay %.1f us (first of 5)\n",
                t->step_us.empty() ? 0.0 : t->step_us[0]);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dsv4
