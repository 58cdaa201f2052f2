// GPU faults and out-of-memory on the CUDA runner (issue 21 item 5).
//
// A real device fault (RuntimeOptions::fault_inject_step: a kernel storing through a null pointer)
// poisons the CUDA context for the rest of the process, so each fault test runs its scenario in a
// child process (a gtest death test in the "threadsafe" style: the binary re-executed, with a fresh
// context) and the parent checks the child's exit status and what it printed; every other test of
// this binary keeps a healthy GPU. Out-of-memory is not sticky and runs in-process.
//
// On the GPU machine: dsv4_cuda_tests --gtest_filter='CudaFault.*'
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/kv_layout.h"
#include "runtime/cuda_runner.h"
#include "runtime/cuda_status.h"
#include "runtime/cuda_weights.h"
#include "runtime/runner_factory.h"
#include "sched/engine.h"
#include "sched/engine_core.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"

namespace dsv4 {
namespace {

// The tiny_quant golden model on the CUDA backend (f32 rows: any head_dim).
RunnerOptions tiny_quant_cuda(int64_t n_pages) {
    const char* env = std::getenv("DSV4_GOLDEN_DIR");
    RunnerOptions ro;
    ro.model = std::string(env && *env ? env : DSV4_GOLDEN_DIR) + "/tiny_quant";
    ro.backend = "cuda";
    ro.n_pages = n_pages;
    ro.page_tokens = 16;
    ro.rt.kv_rows = "f32";
    return ro;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class Sink : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        std::lock_guard lk(mu);
        if (ev.finish == FinishReason::kNone) return;
        ++finishes;
        finish = ev.finish;
        error = ev.error;
    }
    std::mutex mu;
    int finishes = 0;
    FinishReason finish = FinishReason::kNone;
    std::string error;
};

GenRequest request(uint64_t id, std::shared_ptr<RequestSink> sink) {
    GenRequest r;
    r.id = id;
    for (int i = 0; i < 9; ++i) r.prompt.push_back(int32_t(2 + (id * 37 + uint64_t(i) * 11) % 500));
    r.params.temperature = 0;
    r.params.ignore_eos = true;  // nothing ends before the fault
    r.params.max_tokens = 12;
    r.sink = std::move(sink);
    return r;
}

// The child's verdict: one stderr line the parent matches, then an exit that runs no CUDA teardown
// on the poisoned context.
[[noreturn]] void child_exit(const std::vector<std::string>& problems, const std::string& detail) {
    std::string p;
    for (const auto& s : problems) p += "\n  " + s;
    std::fprintf(stderr, "%s %s%s\n", problems.empty() ? "CHILD-OK" : "CHILD-FAILED", detail.c_str(), p.c_str());
    std::fflush(stderr);
    std::_Exit(problems.empty() ? 0 : 1);
}

// Step 2 (the first decode step, a CUDA graph) faults. Requests 1 and 2 run (max_running 2), 3
// waits.
void engine_core_fault_child() {
    RunnerOptions ro = tiny_quant_cuda(800);
    ro.rt.fault_inject_step = 2;
    auto runner = make_model_runner(ro);
    if (!runner.is_ok()) child_exit({"runner: " + runner.status().to_string()}, "");
    EngineConfig cfg;
    cfg.sched.max_running = 2;
    cfg.sched.max_tokens_per_step = 48;
    cfg.sched.max_prefill_chunk = 32;
    EngineStats stats;
    EngineCore core(**runner, cfg, stats);
    std::vector<std::shared_ptr<Sink>> sinks;
    std::vector<std::string> bad;
    for (uint64_t id = 1; id <= 3; ++id) {
        sinks.push_back(std::make_shared<Sink>());
        if (Status s = core.add(request(id, sinks.back())); !s.is_ok()) bad.push_back("add: " + s.to_string());
    }
    for (int guard = 0; core.has_work() && guard < 1000; ++guard) core.step();
    const Status& f = core.fatal();
    if (f.code() != StatusCode::kDeviceLost) bad.push_back("fatal() is not kDeviceLost: " + f.to_string());
    if (!contains(f.message(), "cudaError")) bad.push_back("the fault does not name the CUDA error: " + f.message());
    for (size_t i = 0; i < sinks.size(); ++i) {
        const Sink& s = *sinks[i];
        const std::string tag = "request " + std::to_string(i + 1) + ": ";
        if (s.finishes != 1 || s.finish != FinishReason::kError)
            bad.push_back(tag + std::to_string(s.finishes) + " finish events, last not an error");
        if (!contains(s.error, "cudaError")) bad.push_back(tag + "error does not name the CUDA error: " + s.error);
        if (!contains(s.error, i < 2 ? "model step failed" : "must be restarted"))
            bad.push_back(tag + "error: " + s.error);
    }
    if (stats.engine_failed.load() != 1) bad.push_back("stats.engine_failed is not 1");
    if (core.add(request(9, std::make_shared<Sink>())).code() != StatusCode::kUnavailable)
        bad.push_back("add() after the fault is not kUnavailable");
    // The lost runner answers at once, without touching the poisoned context.
    StepOutput out;
    if ((*runner)->collect(out).code() != StatusCode::kDeviceLost) bad.push_back("collect() after the loss");
    if ((*runner)->launch(ForwardBatch{}).code() != StatusCode::kDeviceLost) bad.push_back("launch() after the loss");
    child_exit(bad, f.message());
}

// The threaded Engine on the faulting runner: on_fatal fires, failed() holds, submit() is refused.
void engine_fault_child() {
    RunnerOptions ro = tiny_quant_cuda(800);
    ro.rt.fault_inject_step = 3;
    auto runner = make_model_runner(ro);
    if (!runner.is_ok()) child_exit({"runner: " + runner.status().to_string()}, "");
    EngineConfig cfg;
    cfg.sched.max_running = 4;
    Engine engine(std::move(runner).value(), cfg);
    std::promise<Status> fired;
    engine.on_fatal([&fired](const Status& s) { fired.set_value(s); });
    std::vector<std::shared_ptr<Sink>> sinks;
    std::vector<std::string> bad;
    for (uint64_t id = 1; id <= 2; ++id) {
        sinks.push_back(std::make_shared<Sink>());
        if (Status s = engine.submit(request(id, sinks.back())); !s.is_ok()) bad.push_back("submit: " + s.to_string());
    }
    engine.start();
    auto f = fired.get_future();
    if (f.wait_for(std::chrono::seconds(120)) != std::future_status::ready) child_exit({"on_fatal never fired"}, "");
    const Status s = f.get();
    if (!engine.failed()) bad.push_back("failed() is false");
    if (s.code() != StatusCode::kDeviceLost || !contains(s.message(), "cudaError"))
        bad.push_back("fatal: " + s.to_string());
    if (engine.submit(request(7, std::make_shared<Sink>())).code() != StatusCode::kUnavailable)
        bad.push_back("submit() after the fault is not kUnavailable");
    // The engine thread sent every error before it called on_fatal.
    for (auto& sk : sinks) {
        std::lock_guard lk(sk->mu);
        if (sk->finishes != 1 || sk->finish != FinishReason::kError)
            bad.push_back("a request did not end with an error");
    }
    child_exit(bad, s.message());
}

TEST(CudaFault, InjectedFaultFailsTheStepWithTheCudaError) {
    SKIP_WITHOUT_GPU();
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(engine_core_fault_child(), ::testing::ExitedWithCode(0), "CHILD-OK .*cudaError");
}

TEST(CudaFault, EngineReportsFailureAfterInjectedFault) {
    SKIP_WITHOUT_GPU();
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(engine_fault_child(), ::testing::ExitedWithCode(0), "CHILD-OK .*cudaError");
}

// (b) An --n-pages pool larger than the free memory: a clear error naming the pool, the bytes asked
// and the bytes free, and no stale error left for the next CUDA call.
TEST(CudaFault, PagePoolLargerThanFreeMemoryIsAClearError) {
    SKIP_WITHOUT_GPU();
    size_t free_b = 0, total_b = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    RunnerOptions ro = tiny_quant_cuda(0);
    auto cfg = load_model_config(ro.model);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    auto layout = KvLayout::make(*cfg, ro.page_tokens, 4, KvRowFormat::kF32);
    ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
    const int64_t pages = int64_t(free_b / size_t(layout->page_bytes)) * 3 / 2;
    if (pages > INT32_MAX) GTEST_SKIP() << "pages of " << layout->page_bytes << " B cannot exceed the free memory";
    ro.n_pages = pages;
    auto r = make_model_runner(ro);
    ASSERT_FALSE(r.is_ok());
    const std::string& m = r.status().message();
    std::printf("[cuda fault] %s\n", r.status().to_string().c_str());
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
    EXPECT_TRUE(contains(m, "KV/state page pool")) << m;
    EXPECT_TRUE(contains(m, std::to_string(pages) + " pages")) << m;
    EXPECT_TRUE(contains(m, "out of GPU memory")) << m;
    EXPECT_TRUE(contains(m, "bytes")) << m;
    EXPECT_TRUE(contains(m, "free")) << m;
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    ro.n_pages = 800;  // the same GPU still works
    auto ok = make_model_runner(ro);
    EXPECT_TRUE(ok.is_ok()) << ok.status().to_string();
}

TEST(CudaFault, DeviceAllocationBeyondFreeMemoryNamesBytesAskedAndFree) {
    SKIP_WITHOUT_GPU();
    size_t free_b = 0, total_b = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    const size_t ask = total_b + (size_t(1) << 30);
    DeviceArena arena;
    auto r = arena.alloc(ask);
    ASSERT_FALSE(r.is_ok());
    const std::string& m = r.status().message();
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
    EXPECT_TRUE(contains(m, std::to_string(ask) + " bytes")) << m;
    EXPECT_TRUE(contains(m, "are free")) << m;
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // cleared: the next launch check must not see it
    auto small = arena.alloc(1 << 20);
    EXPECT_TRUE(small.is_ok()) << small.status().to_string();
}

// Needs no GPU: which errors end the process.
TEST(CudaStatus, StickyErrorsAreDeviceLostOthersAreNot) {
    for (cudaError_t e : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorIllegalInstruction,
                          cudaErrorMisalignedAddress, cudaErrorAssert, cudaErrorECCUncorrectable}) {
        const Status s = cuda_error_status(e, "a step");
        EXPECT_EQ(s.code(), StatusCode::kDeviceLost) << s.to_string();
        EXPECT_TRUE(contains(s.message(), cudaGetErrorName(e))) << s.message();
        EXPECT_TRUE(contains(s.message(), "a step")) << s.message();
    }
    EXPECT_EQ(cuda_error_status(cudaErrorMemoryAllocation, "x").code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(cuda_error_status(cudaErrorInvalidValue, "x").code(), StatusCode::kInternal);
    EXPECT_EQ(cuda_error_status(cudaErrorLaunchOutOfResources, "x").code(), StatusCode::kInternal);
    EXPECT_TRUE(cuda_error_status(cudaSuccess, "x").is_ok());
}

}  // namespace
}  // namespace dsv4
