// MultiGpuRunner (see multi_gpu_runner.h): rank threads, fan-out, rank 0's result.
#include "runtime/multi_gpu_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "dist/rank_threads.h"

#ifdef DSV4_HAVE_NCCL
#include "dist/nccl_group.h"
#endif

namespace dsv4 {

int cuda_device_count() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

namespace {

class MultiGpuRunner final : public CudaBenchRunner {
public:
    // Thread r keeps GPU r current for its whole life.
    explicit MultiGpuRunner(int n)
        : threads_(std::make_unique<dist::RankThreads>(n,
                                                       [](int r) -> Status {
                                                           const cudaError_t e = cudaSetDevice(r);
                                                           if (e == cudaSuccess) return Status::ok();
                                                           return error(StatusCode::kInternal, "cudaSetDevice({}): {}",
                                                                        r, cudaGetErrorString(e));
                                                       })),
          ranks_(size_t(n)) {}
    ~MultiGpuRunner() override {
        // Each runner frees its device memory, graphs and stream on its own GPU's thread, and the
        // last owners of the communicators drop them there too: all ranks destroy concurrently
        // (NCCL's destroy may wait until the whole group is quiescent).
        // Nothing to report from a destructor: each rank's teardown returns ok.
        (void)threads_->run([&](int r) {
            ranks_[size_t(r)].reset();
            if (size_t(r) < group_.size()) group_[size_t(r)].reset();
            return Status::ok();
        });
        threads_.reset();
    }

    Status create(const CudaRunnerOptions& base, const RankRunnerFactory& factory,
                  std::vector<std::shared_ptr<dist::DeviceAllReduce>> group) {
        const int n = threads_->size();
        group_ = std::move(group);
        DSV4_RETURN_IF_ERROR(threads_->run([&](int r) -> Status {
            CudaRunnerOptions o = base;
            o.ep_rank = r;
            o.ep_size = n;
            o.ep_all_reduce = group_[size_t(r)];
            o.verbose = base.verbose && r == 0;
            DSV4_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> m, factory(r, o));
            auto* b = dynamic_cast<CudaBenchRunner*>(m.get());
            if (!b) return invalid_argument("rank {}: the factory did not make a CUDA runner", r);
            m.release();
            ranks_[size_t(r)].reset(b);
            return Status::ok();
        }));
        // Only once every rank exists: the first collective (a rank that failed above would leave
        // the others waiting in it).
        return threads_->run([&](int r) { return ranks_[size_t(r)]->collective_warm_up(); });
    }

    const ModelConfig& config() const override { return ranks_[0]->config(); }
    const KvLayout& kv_layout() const override { return ranks_[0]->kv_layout(); }
    // Pools sized from each GPU's memory may differ by a few pages: the engine hands out ids below
    // the smallest, which every rank holds.
    int64_t n_pages() const override {
        int64_t m = ranks_[0]->n_pages();
        for (const auto& r : ranks_) m = std::min(m, r->n_pages());
        return m;
    }
    int64_t max_positions() const override { return ranks_[0]->max_positions(); }
    bool supports_device_sample(DeviceSample m) const override { return ranks_[0]->supports_device_sample(m); }

    Status forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) override {
        const ForwardBatch quiet = without_logits(batch);
        return threads_->run([&](int r) {
            if (r == 0) return ranks_[0]->forward(batch, logits);
            std::vector<std::vector<float>> none;
            return ranks_[size_t(r)]->forward(quiet, none);
        });
    }
    Status forward_sampled(const ForwardBatch& batch, StepOutput& out) override {
        // Checked before the fan-out: rank 0 refusing a mode after the others started the step
        // would leave them waiting in the first all-reduce.
        for (const auto& c : batch.seqs)
            if (c.want_logits && !supports_device_sample(c.sample))
                return invalid_argument("sequence {}: device sample mode {} is not supported", c.seq_id, int(c.sample));
        const ForwardBatch quiet = without_logits(batch);
        return threads_->run([&](int r) {
            if (r == 0) return ranks_[0]->forward_sampled(batch, out);
            std::vector<std::vector<float>> none;
            return ranks_[size_t(r)]->forward(quiet, none);
        });
    }

    CudaPoolInfo pool_info() const override { return ranks_[0]->pool_info(); }
    Status for_each_pool(const std::function<Status(const CudaPoolInfo&)>& f) override {
        return threads_->run([&](int r) { return f(ranks_[size_t(r)]->pool_info()); });
    }
    // Every rank replays its graph together (the collectives couple them); per replay, the slowest
    // rank's time.
    Result<DecodeGraphTiming> time_decode_graph(const ForwardBatch& batch, int warmup, int reps,
                                                bool op_profile) override {
        std::vector<DecodeGraphTiming> t(ranks_.size());
        DSV4_RETURN_IF_ERROR(threads_->run([&](int r) -> Status {
            DSV4_ASSIGN_OR_RETURN(t[size_t(r)], ranks_[size_t(r)]->time_decode_graph(batch, warmup, reps, op_profile));
            return Status::ok();
        }));
        DecodeGraphTiming out = t[0];
        for (size_t r = 1; r < t.size(); ++r)
            for (size_t i = 0; i < out.step_us.size() && i < t[r].step_us.size(); ++i) {
                out.step_us[i] = std::max(out.step_us[i], t[r].step_us[i]);
                if (i < out.head_us.size() && i < t[r].head_us.size())
                    out.head_us[i] = std::max(out.head_us[i], t[r].head_us[i]);
            }
        return out;
    }
    std::string variant_table() const override { return ranks_[0]->variant_table(); }
    size_t device_bytes() const override {  // per GPU: the largest rank
        size_t m = 0;
        for (const auto& r : ranks_) m = std::max(m, r->device_bytes());
        return m;
    }

private:
    // Rank r > 0's copy of the step: same tokens and pages, no logits rows (nothing to fetch).
    static ForwardBatch without_logits(const ForwardBatch& b) {
        ForwardBatch q = b;
        for (auto& c : q.seqs) {
            c.want_logits = false;
            c.sample = DeviceSample::kNone;
        }
        return q;
    }

    std::unique_ptr<dist::RankThreads> threads_;
    std::vector<std::unique_ptr<CudaBenchRunner>> ranks_;
    std::vector<std::shared_ptr<dist::DeviceAllReduce>> group_;  // rank r's communicator (also held by its runner)
};

}  // namespace

Result<std::unique_ptr<CudaBenchRunner>> make_multi_gpu_runner(int n_gpus, const CudaRunnerOptions& base,
                                                               const RankRunnerFactory& factory) {
    if (n_gpus < 1) return invalid_argument("--gpus {}: need at least 1", n_gpus);
    const int have = cuda_device_count();
    if (have < n_gpus) return error(StatusCode::kUnavailable, "--gpus {}: {} CUDA device(s) visible", n_gpus, have);
    if (n_gpus == 1) {
        DSV4_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> m, factory(0, base));
        auto* b = dynamic_cast<CudaBenchRunner*>(m.get());
        if (!b) return invalid_argument("the factory did not make a CUDA runner");
        m.release();
        return std::unique_ptr<CudaBenchRunner>(b);
    }
#ifdef DSV4_HAVE_NCCL
    std::vector<int> devices;
    for (int r = 0; r < n_gpus; ++r) devices.push_back(r);
    DSV4_ASSIGN_OR_RETURN(auto group, dist::make_nccl_group(devices));
    auto runner = std::make_unique<MultiGpuRunner>(n_gpus);
    DSV4_RETURN_IF_ERROR(runner->create(base, factory, std::move(group)));
    return std::unique_ptr<CudaBenchRunner>(std::move(runner));
#else
    return error(StatusCode::kUnimplemented, "--gpus {}: this build has no NCCL (cmake/dsv4_nccl.cmake)", n_gpus);
#endif
}

}  // namespace dsv4
