// The in-process communicator (threads as ranks) and the expert-parallel MoE step over it.
#include <gtest/gtest.h>

#include <random>

#include "core/dtype.h"
#include "dist/ep_moe.h"
#include "dist/inproc_communicator.h"

namespace dsv4::dist {
namespace {

int64_t a2a_count(int src, int dst, int salt) { return (src * 7 + dst * 3 + salt) % 5; }  // zeros included
int32_t a2a_value(int src, int dst, int64_t i) { return int32_t(src * 1000000 + dst * 1000 + i); }

TEST(InProcCommunicator, AllToAllVDeliversEveryRowToItsPlace) {
    for (int N : {1, 2, 4, 8})
        for (int salt = 0; salt < 3; ++salt) {
            Status s = run_in_process(N, [&](Communicator& c) -> Status {
                const int me = c.rank();
                std::vector<int64_t> sc(N), so(N), rc(N), ro(N);
                int64_t S = 0, R = 0;
                for (int p = 0; p < N; ++p) {
                    sc[p] = a2a_count(me, p, salt), so[p] = S, S += sc[p];
                    rc[p] = a2a_count(p, me, salt), ro[p] = R, R += rc[p];
                }
                std::vector<int32_t> send(static_cast<size_t>(S)), recv(static_cast<size_t>(R), -1);
                for (int p = 0; p < N; ++p)
                    for (int64_t i = 0; i < sc[p]; ++i) send[size_t(so[p] + i)] = a2a_value(me, p, i);
                DSV4_RETURN_IF_ERROR(c.all_to_all_v(send.data(), sc, so, recv.data(), rc, ro, CommDtype::kI32));
                for (int p = 0; p < N; ++p)
                    for (int64_t i = 0; i < rc[p]; ++i)
                        if (recv[size_t(ro[p] + i)] != a2a_value(p, me, i))
                            return error(StatusCode::kInternal, "rank {} row {} from {} is wrong", me, i, p);
                return Status::ok();
            });
            EXPECT_TRUE(s.is_ok()) << "N " << N << ": " << s.to_string();
        }
}

TEST(InProcCommunicator, AllReduceGivesIdenticalRankOrderSumsEverywhere) {
    const int N = 4;
    const int64_t n = 257;
    std::vector<std::vector<float>> results(N);
    std::vector<std::vector<uint16_t>> bf(N);
    Status s = run_in_process(N, [&](Communicator& c) -> Status {
        std::vector<float> buf(n);
        std::vector<uint16_t> b16(n);
        for (int64_t i = 0; i < n; ++i) {
            buf[i] = 1.0f / float(1 + i + 13 * c.rank());
            b16[i] = f32_to_bf16(float(c.rank() + 1) * 0.5f);
        }
        DSV4_RETURN_IF_ERROR(c.all_reduce_sum(buf.data(), n, CommDtype::kF32));
        DSV4_RETURN_IF_ERROR(c.all_reduce_sum(b16.data(), n, CommDtype::kBf16));
        results[c.rank()] = buf;
        bf[c.rank()] = b16;
        return c.barrier();
    });
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    for (int64_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < N; ++r) want = r == 0 ? 1.0f / float(1 + i) : want + 1.0f / float(1 + i + 13 * r);
        for (int r = 0; r < N; ++r) {
            EXPECT_EQ(results[r][i], want);
            EXPECT_EQ(bf16_to_f32(bf[r][i]), 5.0f);  // 0.5 + 1 + 1.5 + 2
        }
    }
}

TEST(InProcCommunicator, AllGatherConcatenatesInRankOrder) {
    const int N = 8;
    Status s = run_in_process(N, [&](Communicator& c) -> Status {
        std::vector<int64_t> mine{c.rank() * 10LL, c.rank() * 10LL + 1}, all(2 * N);
        DSV4_RETURN_IF_ERROR(c.all_gather(mine.data(), all.data(), 2, CommDtype::kI64));
        for (int r = 0; r < N; ++r)
            if (all[2 * r] != r * 10 || all[2 * r + 1] != r * 10 + 1)
                return error(StatusCode::kInternal, "rank {} saw a wrong gather", c.rank());
        return Status::ok();
    });
    EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST(InProcCommunicator, MismatchesFailOnEveryRankWithoutHanging) {
    const int N = 3;
    std::vector<Status> seen(N);
    Status s = run_in_process(N, [&](Communicator& c) -> Status {
        std::vector<int64_t> sc(N, 1), so{0, 1, 2}, rc(N, 1), ro{0, 1, 2};
        if (c.rank() == 2) rc[0] = 2;  // expects more than rank 0 sends
        std::vector<float> send(3, 1.0f), recv(4, 0.0f);
        seen[c.rank()] = c.all_to_all_v(send.data(), sc, so, recv.data(), rc, ro, CommDtype::kF32);
        // Different counts in an all-reduce, then different collectives.
        std::vector<float> buf(4);
        Status ar = c.all_reduce_sum(buf.data(), c.rank() == 0 ? 3 : 4, CommDtype::kF32);
        if (ar.is_ok()) return error(StatusCode::kInternal, "count mismatch not reported");
        Status mixed = c.rank() == 0 ? c.barrier() : c.all_gather(buf.data(), buf.data(), 0, CommDtype::kF32);
        if (mixed.is_ok()) return error(StatusCode::kInternal, "different collectives not reported");
        Status bad_type = c.all_reduce_sum(buf.data(), 1, CommDtype::kI32);
        if (bad_type.is_ok()) return error(StatusCode::kInternal, "i32 all-reduce accepted");
        return Status::ok();
    });
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    for (int r = 0; r < N; ++r) {
        ASSERT_FALSE(seen[r].is_ok()) << "rank " << r;
        EXPECT_NE(seen[r].message().find("rank 0 sends 1 elements to rank 2, which expects 2"), std::string::npos)
            << seen[r].message();
    }
    EXPECT_FALSE(InProcGroup::create(0).is_ok());
}

// Synthetic expert e: y = w * (x * (e + 1) + e). The expert-parallel result must be bitwise the
// local loop over k (same float operations in the same order).
float synth(int e, float x, float w) { return w * (x * float(e + 1) + float(e)); }

TEST(EpRoutedMoe, EqualsTheLocalLoopBitwise) {
    const int E = 16, K = 3, d = 4;
    for (int N : {1, 2, 4, 8}) {
        auto ep = ExpertPartition::make(E, N);
        ASSERT_TRUE(ep.is_ok());
        std::vector<int64_t> remote(N);
        Status s = run_in_process(N, [&](Communicator& c) -> Status {
            std::mt19937 rng(100 + c.rank());
            const int64_t T = c.rank() == N - 1 && N > 1 ? 0 : 1 + rng() % 20;  // last rank: no tokens
            std::vector<int32_t> ids(static_cast<size_t>(T * K));
            std::vector<float> w(static_cast<size_t>(T * K)), x(static_cast<size_t>(T * d)), out(size_t(T * d), 0.0f),
                want(out);
            for (auto& v : x) v = float(rng() % 1000) / 37.0f;
            for (size_t i = 0; i < ids.size(); ++i) {
                ids[i] = (i % 5 == 4) ? -1 : int32_t(rng() % E);  // some unused slots, repeats allowed
                w[i] = float(rng() % 100) / 99.0f;
            }
            for (int64_t t = 0; t < T; ++t)
                for (int k = 0; k < K; ++k)
                    if (ids[size_t(t * K + k)] >= 0)
                        for (int j = 0; j < d; ++j)
                            want[size_t(t * d + j)] +=
                                synth(ids[size_t(t * K + k)], x[size_t(t * d + j)], w[size_t(t * K + k)]);
            const int first = ep->first(c.rank());
            auto run = [&](int local, const float* rows, const float* rw, int64_t n, float* y) -> Status {
                if (local < 0 || local >= ep->n_local()) return error(StatusCode::kInternal, "bad local expert");
                for (int64_t i = 0; i < n; ++i)
                    for (int j = 0; j < d; ++j) y[i * d + j] = synth(first + local, rows[i * d + j], rw[i]);
                return Status::ok();
            };
            EpMoeStats st;
            DSV4_RETURN_IF_ERROR(ep_routed_moe(c, *ep, d, T, K, ids, w, x.data(), run, out.data(), &st));
            remote[c.rank()] = st.remote_rows;
            if (out != want)
                return error(StatusCode::kInternal, "rank {}: result differs from the local loop", c.rank());
            return Status::ok();
        });
        EXPECT_TRUE(s.is_ok()) << "N " << N << ": " << s.to_string();
        if (N > 1) {
            EXPECT_GT(remote[0], 0) << "N " << N;
        }
    }
}

TEST(EpRoutedMoe, InvalidRoutingOnOneRankFailsEveryRank) {
    const int N = 4, E = 16, K = 2, d = 2;
    auto ep = ExpertPartition::make(E, N);
    std::vector<Status> seen(N);
    Status s = run_in_process(N, [&](Communicator& c) -> Status {
        std::vector<int32_t> ids{1, c.rank() == 2 ? 99 : 5};
        std::vector<float> w{0.5f, 0.5f}, x(d, 1.0f), out(d, 0.0f);
        auto run = [](int, const float*, const float*, int64_t, float*) { return Status::ok(); };
        seen[c.rank()] = ep_routed_moe(c, *ep, d, 1, K, ids, w, x.data(), run, out.data());
        return Status::ok();
    });
    ASSERT_TRUE(s.is_ok());
    for (int r = 0; r < N; ++r) EXPECT_FALSE(seen[r].is_ok()) << "rank " << r;
    EXPECT_EQ(seen[2].code(), StatusCode::kOutOfRange);
    EXPECT_NE(seen[0].message().find("peer rank failed"), std::string::npos) << seen[0].message();
}

}  // namespace
}  // namespace dsv4::dist
