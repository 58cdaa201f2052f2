// Dispatch bookkeeping of expert-parallel MoE (issue 8): property tests over random routings,
// rank counts 1/2/4/8, empty ranks, all tokens to one rank, hash routing, unused slots. The whole
// exchange is simulated here without a communicator: every rank's plan, the count headers, the
// receive layouts, the rows each rank's experts see, and the combine back into token order.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>

#include "dist/dispatch_plan.h"

namespace dsv4::dist {
namespace {

// Routing of T tokens on one rank: [T, K] expert ids.
using Ids = std::vector<int32_t>;

enum class Pattern { kRandomDistinct, kAllToOneRank, kHash, kWithUnused, kSkewed };

Ids make_ids(Pattern pat, std::mt19937& rng, int64_t T, int K, const ExpertPartition& ep, int target_rank) {
    const int E = ep.n_experts();
    Ids ids(static_cast<size_t>(T * K));
    std::vector<int> perm(static_cast<size_t>(E));
    auto distinct = [&](Ids& row) {
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        row.assign(perm.begin(), perm.begin() + K);
    };
    // Hash routing: a fixed token id -> experts table, as tid2eid (distinct experts per row).
    std::vector<Ids> table(64);
    for (auto& row : table) distinct(row);
    Ids row;
    for (int64_t t = 0; t < T; ++t) {
        distinct(row);
        if (pat == Pattern::kHash) row = table[size_t(rng() % 64)];
        for (int k = 0; k < K; ++k) {
            int32_t e = row[k];
            if (pat == Pattern::kAllToOneRank) e = ep.first(target_rank) + int(rng() % ep.n_local());
            if (pat == Pattern::kWithUnused && rng() % 3 == 0) e = -1;
            if (pat == Pattern::kSkewed && rng() % 4 != 0) e = int32_t(k % E);  // a few hot experts
            ids[size_t(t * K + k)] = e;
        }
    }
    return ids;
}

// A row's identity travelling through the exchange: (source rank, slot).
struct Tag {
    int64_t src, slot;
};

void check_exchange(int N, int E, int K, Pattern pat, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "N " << N << " E " << E << " K " << K << " pattern " << int(pat) << " seed "
                                    << seed);
    auto ep_r = ExpertPartition::make(E, N);
    ASSERT_TRUE(ep_r.is_ok());
    const ExpertPartition& ep = *ep_r;
    const int nl = ep.n_local();
    std::mt19937 rng(seed);
    std::vector<int64_t> T(static_cast<size_t>(N));
    std::vector<Ids> ids(static_cast<size_t>(N));
    std::vector<DispatchPlan> plans;
    for (int r = 0; r < N; ++r) {
        T[r] = (r == 1) ? 0 : int64_t(rng() % 40);  // rank 1 (if any) has no tokens at all
        ids[r] = make_ids(pat, rng, T[r], K, ep, N - 1);
        auto p = plan_dispatch(ids[r], T[r], K, ep);
        ASSERT_TRUE(p.is_ok()) << p.status().to_string();
        plans.push_back(std::move(*p));
    }
    for (int r = 0; r < N; ++r) {
        const DispatchPlan& p = plans[r];
        // Send counts/offsets are an exclusive prefix sum covering every used slot once.
        int64_t used = 0;
        for (int32_t e : ids[r]) used += e >= 0;
        EXPECT_EQ(p.n_send(), used);
        int64_t off = 0;
        for (int d = 0; d < N; ++d) {
            EXPECT_EQ(p.send_offsets[d], off);
            int64_t by_expert = 0;
            for (int e = 0; e < nl; ++e) by_expert += p.send_expert_counts[size_t(d) * nl + e];
            EXPECT_EQ(p.send_counts[d], by_expert);
            off += p.send_counts[d];
        }
        EXPECT_EQ(off, used);
        // Send rows: grouped by destination, then local expert, then slot order; slot_row inverts.
        for (int64_t i = 0; i < p.n_send(); ++i) {
            const int64_t slot = p.send_slot[i];
            const int32_t e = ids[r][size_t(slot)];
            ASSERT_GE(e, 0);
            EXPECT_EQ(p.slot_row[size_t(slot)], i);
            EXPECT_EQ(p.send_token[i], slot / K);
            EXPECT_EQ(p.send_local_expert[i], ep.local_index(e));
            const int dst = ep.owner(e);
            EXPECT_GE(i, p.send_offsets[dst]);
            EXPECT_LT(i, p.send_offsets[dst] + p.send_counts[dst]);
            if (i > 0) {
                const int32_t pe = ids[r][size_t(p.send_slot[i - 1])];
                EXPECT_TRUE(pe < e || (pe == e && p.send_slot[i - 1] < slot));
            }
        }
        for (size_t s = 0; s < ids[r].size(); ++s)
            if (ids[r][s] < 0) {
                EXPECT_EQ(p.slot_row[s], -1);
            }
    }
    // Receive side: headers, layouts, and the simulated all-to-all-v of row tags.
    for (int me = 0; me < N; ++me) {
        std::vector<int64_t> header(size_t(N) * nl);
        for (int s = 0; s < N; ++s)
            for (int e = 0; e < nl; ++e) header[size_t(s) * nl + e] = plans[s].send_expert_counts[size_t(me) * nl + e];
        auto L = plan_receive(header, N, nl);
        ASSERT_TRUE(L.is_ok()) << L.status().to_string();
        std::vector<int64_t> recv_src, recv_slot;  // the receive buffer, row by row
        for (int s = 0; s < N; ++s) {
            EXPECT_EQ(L->recv_counts[s], plans[s].send_counts[me]);
            EXPECT_EQ(L->recv_offsets[s], int64_t(recv_src.size()));
            for (int64_t i = 0; i < plans[s].send_counts[me]; ++i) {
                recv_src.push_back(s);
                recv_slot.push_back(plans[s].send_slot[plans[s].send_offsets[me] + i]);
            }
        }
        ASSERT_EQ(L->n_recv(), int64_t(recv_src.size()));
        // Expert-major: every row lands in its local expert's block, blocks ordered by (src, slot).
        std::vector<int64_t> em_src(recv_src.size()), em_slot(recv_src.size());
        scatter_rows(recv_src.data(), L->recv_to_expert, 1, em_src.data());
        scatter_rows(recv_slot.data(), L->recv_to_expert, 1, em_slot.data());
        int64_t expected_total = 0;
        for (int e = 0; e < nl; ++e) {
            const int64_t o = L->expert_offsets[e], n = L->expert_counts[e];
            EXPECT_EQ(o, expected_total);
            expected_total += n;
            for (int64_t i = o; i < o + n; ++i) {
                const int32_t ge = ids[size_t(em_src[i])][size_t(em_slot[i])];
                EXPECT_EQ(ge, ep.first(me) + e) << "row " << i;
                if (i > o) {
                    EXPECT_LT(std::tie(em_src[i - 1], em_slot[i - 1]), std::tie(em_src[i], em_slot[i]));
                }
            }
        }
        EXPECT_EQ(expected_total, L->n_recv());
        for (int64_t i = 0; i < L->n_recv(); ++i) EXPECT_EQ(L->expert_to_recv[size_t(L->recv_to_expert[i])], i);
        if (pat == Pattern::kAllToOneRank && me != N - 1) {
            EXPECT_EQ(L->n_recv(), 0);
        }
    }
}

TEST(DispatchPlan, ExchangeInvariantsHoldForRandomRoutings) {
    uint32_t seed = 1;
    for (int N : {1, 2, 4, 8})
        for (auto [E, K] : {std::pair{16, 2}, std::pair{256, 6}, std::pair{8, 1}})
            for (Pattern pat : {Pattern::kRandomDistinct, Pattern::kAllToOneRank, Pattern::kHash, Pattern::kWithUnused,
                                Pattern::kSkewed}) {
                if (E % N != 0) continue;
                for (int rep = 0; rep < 3; ++rep) check_exchange(N, E, K, pat, seed++);
            }
}

// Combine: results come back in send order and are summed per token in k order, so the sum is
// bitwise the local loop's; unused slots contribute nothing.
TEST(DispatchPlan, CombineSumsInKOrder) {
    auto ep = ExpertPartition::make(16, 4);
    const int K = 3, W = 5;
    const int64_t T = 11;
    std::mt19937 rng(7);
    Ids ids = make_ids(Pattern::kWithUnused, rng, T, K, *ep, 0);
    auto p = plan_dispatch(ids, T, K, *ep);
    ASSERT_TRUE(p.is_ok());
    auto value = [](int64_t slot, int c) { return 1.0f / float(3 + slot) + 1e-3f * float(c) * float(slot % 7); };
    std::vector<float> returned(size_t(p->n_send() * W));
    for (int64_t i = 0; i < p->n_send(); ++i)
        for (int c = 0; c < W; ++c) returned[size_t(i * W + c)] = value(p->send_slot[i], c);
    std::vector<float> out(size_t(T * W), 0.5f), want(size_t(T * W), 0.5f);
    combine_rows(returned.data(), *p, W, out.data());
    for (int64_t t = 0; t < T; ++t)
        for (int k = 0; k < K; ++k)
            if (ids[size_t(t * K + k)] >= 0)
                for (int c = 0; c < W; ++c) want[size_t(t * W + c)] += value(t * K + k, c);
    EXPECT_EQ(out, want);  // bitwise
}

TEST(DispatchPlan, RejectsMalformedRouting) {
    auto ep = ExpertPartition::make(16, 2);
    Ids ids{0, 1, 2, 16};
    auto bad = plan_dispatch(ids, 2, 2, *ep);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(bad.status().message().find("token 1 slot 1"), std::string::npos) << bad.status().message();
    EXPECT_FALSE(plan_dispatch(ids, 3, 2, *ep).is_ok());
    EXPECT_FALSE(plan_dispatch(ids, 4, 0, *ep).is_ok());
    std::vector<int64_t> header{1, 2, 3};
    EXPECT_FALSE(plan_receive(header, 2, 2).is_ok());
    std::vector<int64_t> negative{1, -1, 0, 0};
    EXPECT_FALSE(plan_receive(negative, 2, 2).is_ok());
    auto empty = plan_dispatch({}, 0, 6, *ep);
    ASSERT_TRUE(empty.is_ok());
    EXPECT_EQ(empty->n_send(), 0);
    EXPECT_EQ(empty->send_counts, (std::vector<int64_t>{0, 0}));
}

}  // namespace
}  // namespace dsv4::dist
