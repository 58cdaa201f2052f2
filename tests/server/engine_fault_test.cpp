// After an unrecoverable device error (issue 21 item 5), on the FakeRunner's stand-in for a sticky
// CUDA error (FakeRunnerOptions::fault_inject_step -> StatusCode::kDeviceLost): the failed step's
// requests and every other one (running, queued, in flight) end with exactly one error event, the
// engine stops for good and refuses new requests; an ordinary step error fails only its step. The
// HTTP side is app_fault_test.cpp. Also in the ASan and TSan suites (tests/sanitize).
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <vector>

#include "sched/engine.h"
#include "sched/engine_core.h"
#include "sched/fake_runner.h"
#include "tests/server/fault_test_util.h"

namespace dsv4 {
namespace {

using test::FinishSink;
using namespace std::chrono_literals;

GenRequest request(uint64_t id, std::shared_ptr<RequestSink> sink) {
    GenRequest r;
    r.id = id;
    for (int i = 0; i < 20; ++i) r.prompt.push_back(int32_t(2 + (id * 31 + i * 7) % 200));
    r.params.temperature = 0;
    r.params.ignore_eos = true;  // nothing finishes before the fault
    r.params.max_tokens = 50;
    r.sink = std::move(sink);
    return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class EngineFaultCore : public ::testing::TestWithParam<EngineConfig::Overlap> {};

// Two requests run (max_running 2), two wait; step 3 faults. With overlap the engine learns of it
// one launch later, with a step of the same sequences already in flight: same outcome.
TEST_P(EngineFaultCore, FailsTheStepAndEveryOtherRequestThenRefusesNewOnes) {
    FakeRunner runner(test::faulty_fake_model(3));
    EngineConfig cfg;
    cfg.sched.max_running = 2;
    cfg.overlap = GetParam();
    EngineStats stats;
    EngineCore core(runner, cfg, stats);
    std::vector<std::shared_ptr<FinishSink>> sinks;
    for (uint64_t id = 1; id <= 4; ++id) {
        sinks.push_back(std::make_shared<FinishSink>());
        ASSERT_TRUE(core.add(request(id, sinks.back())).is_ok());
    }
    for (int guard = 0; core.has_work() && guard < 100; ++guard) core.step();
    EXPECT_FALSE(core.has_work());

    ASSERT_EQ(core.fatal().code(), StatusCode::kDeviceLost) << core.fatal().to_string();
    EXPECT_TRUE(contains(core.fatal().message(), "injected device fault at step 3")) << core.fatal().message();
    for (size_t i = 0; i < sinks.size(); ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(sinks[i]->n_finishes(), 1);
        EXPECT_EQ(sinks[i]->reason(), FinishReason::kError);
        EXPECT_TRUE(contains(sinks[i]->error_text(), "injected device fault")) << sinks[i]->error_text();
    }
    // The two in the failed step name the step; the two that waited name the restart.
    for (int i : {0, 1}) EXPECT_TRUE(contains(sinks[size_t(i)]->error_text(), "model step failed")) << i;
    for (int i : {2, 3}) EXPECT_TRUE(contains(sinks[size_t(i)]->error_text(), "must be restarted")) << i;
    // Nothing is held and nothing runs again.
    EXPECT_EQ(core.pages().n_used(), 0);
    EXPECT_EQ(stats.engine_failed.load(), 1);
    EXPECT_EQ(stats.running_requests.load() + stats.waiting_requests.load(), 0);
    const StepStats st = core.step();
    EXPECT_EQ(st.n_seqs + st.n_collected, 0);
    auto late = std::make_shared<FinishSink>();
    const Status s = core.add(request(9, late));
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "injected device fault")) << s.message();
    EXPECT_EQ(late->n_finishes(), 0);  // refused, not queued
}

INSTANTIATE_TEST_SUITE_P(Overlap, EngineFaultCore,
                         ::testing::Values(EngineConfig::Overlap::kOff, EngineConfig::Overlap::kAlways),
                         [](const auto& info) { return info.param == EngineConfig::Overlap::kOff ? "Off" : "Always"; });

// A step error that is not a lost device fails only that step's requests: the engine goes on.
TEST(EngineFault, OrdinaryStepErrorIsNotFatal) {
    // A runner whose step 2 fails with kInternal once (a bad batch, say), then works again.
    class FlakyOnce final : public ModelRunner {
    public:
        explicit FlakyOnce(FakeRunnerOptions o) : inner_(std::move(o)) {}
        const ModelConfig& config() const override { return inner_.config(); }
        const KvLayout& kv_layout() const override { return inner_.kv_layout(); }
        int64_t n_pages() const override { return inner_.n_pages(); }
        Status forward(const ForwardBatch& b, std::vector<std::vector<float>>& logits) override {
            if (++steps_ == 2) return error(StatusCode::kInternal, "a one-off step error");
            return inner_.forward(b, logits);
        }

    private:
        FakeRunner inner_;
        int steps_ = 0;
    };
    FlakyOnce runner(test::faulty_fake_model(0));
    EngineConfig cfg;
    cfg.sched.max_running = 1;
    EngineStats stats;
    EngineCore core(runner, cfg, stats);
    auto first = std::make_shared<FinishSink>(), second = std::make_shared<FinishSink>();
    GenRequest a = request(1, first), b = request(2, second);
    b.params.max_tokens = 3;
    ASSERT_TRUE(core.add(std::move(a)).is_ok());
    ASSERT_TRUE(core.add(std::move(b)).is_ok());
    for (int guard = 0; core.has_work() && guard < 100; ++guard) core.step();
    EXPECT_TRUE(core.fatal().is_ok());
    EXPECT_EQ(first->reason(), FinishReason::kError);
    EXPECT_TRUE(contains(first->error_text(), "a one-off step error")) << first->error_text();
    EXPECT_EQ(second->reason(), FinishReason::kLength);  // ran after the error, to its end
    EXPECT_EQ(stats.engine_failed.load(), 0);
}

// The threaded Engine: on_fatal fires (also when registered late), every request ends, submit() is
// refused.
TEST(EngineFault, ThreadedEngineReportsFailureAndRefusesRequests) {
    EngineConfig cfg;
    cfg.sched.max_running = 1;
    Engine engine(std::make_unique<FakeRunner>(test::faulty_fake_model(2)), cfg);
    std::promise<Status> fired;
    engine.on_fatal([&fired](const Status& s) { fired.set_value(s); });
    std::vector<std::shared_ptr<FinishSink>> sinks;
    for (uint64_t id = 1; id <= 3; ++id) {
        sinks.push_back(std::make_shared<FinishSink>());
        ASSERT_TRUE(engine.submit(request(id, sinks.back())).is_ok());
    }
    EXPECT_FALSE(engine.failed());
    engine.start();
    auto f = fired.get_future();
    ASSERT_EQ(f.wait_for(60s), std::future_status::ready) << "the engine never reported the fault";
    EXPECT_EQ(f.get().code(), StatusCode::kDeviceLost);
    EXPECT_TRUE(engine.failed());
    EXPECT_EQ(engine.fatal_error().code(), StatusCode::kDeviceLost);
    for (auto& s : sinks) {
        ASSERT_TRUE(s->wait_finished(60s));
        EXPECT_EQ(s->reason(), FinishReason::kError);
    }
    const Status refused = engine.submit(request(7, std::make_shared<FinishSink>()));
    EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
    EXPECT_TRUE(contains(refused.message(), "must be restarted")) << refused.message();
    int late_calls = 0;
    engine.on_fatal([&late_calls](const Status&) { ++late_calls; });
    EXPECT_EQ(late_calls, 1);  // registered after the failure: called at once
    engine.stop();
}

}  // namespace
}  // namespace dsv4
