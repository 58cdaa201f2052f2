// RankThreads (the multi-GPU runner's per-rank host threads): init once per thread on that
// thread, jobs on every rank at the same time, first error in rank order, init errors kept.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "dist/rank_threads.h"

namespace dsv4::dist {
namespace {

TEST(RankThreads, InitOncePerThreadThenEveryJobOnThatThread) {
    constexpr int n = 4;
    std::vector<std::thread::id> init_ids(n);
    std::atomic<int> inits{0};
    RankThreads t(n, [&](int r) {
        init_ids[size_t(r)] = std::this_thread::get_id();
        ++inits;
        return Status::ok();
    });
    EXPECT_EQ(t.size(), n);
    for (int job = 0; job < 3; ++job) {
        std::vector<std::thread::id> ids(n);
        ASSERT_TRUE(t.run([&](int r) {
                         ids[size_t(r)] = std::this_thread::get_id();
                         return Status::ok();
                     }).is_ok());
        for (int r = 0; r < n; ++r) EXPECT_EQ(ids[size_t(r)], init_ids[size_t(r)]) << "rank " << r;
    }
    EXPECT_EQ(inits.load(), n);
    for (int r = 1; r < n; ++r) EXPECT_NE(init_ids[size_t(r)], init_ids[0]);
}

// Collectives need every rank in flight together: each job waits (bounded) until all have arrived.
TEST(RankThreads, JobsOfOneRunAreConcurrent) {
    constexpr int n = 4;
    RankThreads t(n, {});
    std::atomic<int> arrived{0};
    std::atomic<int> saw_all{0};
    ASSERT_TRUE(t.run([&](int) {
                     ++arrived;
                     const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                     while (arrived.load() < n && std::chrono::steady_clock::now() < until) std::this_thread::yield();
                     if (arrived.load() == n) ++saw_all;
                     return Status::ok();
                 }).is_ok());
    EXPECT_EQ(saw_all.load(), n);
}

TEST(RankThreads, FirstErrorInRankOrderAfterAllFinished) {
    RankThreads t(3, {});
    std::atomic<int> ran{0};
    Status s = t.run([&](int r) {
        ++ran;
        if (r == 0) return Status::ok();
        return invalid_argument("bad {}", r);
    });
    EXPECT_EQ(ran.load(), 3);
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("rank 1: bad 1"), std::string::npos) << s.message();
    EXPECT_TRUE(t.run([](int) { return Status::ok(); }).is_ok());  // usable after an error
}

TEST(RankThreads, InitErrorIsReportedByEveryRun) {
    RankThreads t(2, [](int r) { return r == 1 ? error(StatusCode::kInternal, "no device {}", r) : Status::ok(); });
    std::atomic<int> ran{0};
    for (int i = 0; i < 2; ++i) {
        Status s = t.run([&](int) {
            ++ran;
            return Status::ok();
        });
        ASSERT_FALSE(s.is_ok());
        EXPECT_NE(s.message().find("rank 1: no device 1"), std::string::npos) << s.message();
    }
    EXPECT_EQ(ran.load(), 2);  // rank 0 ran its jobs; rank 1 never ran one
}

}  // namespace
}  // namespace dsv4::dist
