// The speculative-decoding state area (model/spec_state.h): a verify chunk whose drafts are partly
// rejected, undone by spec_rollback, leaves the state as if only the accepted positions had run.
// Checked on the tiny reference model at start positions that put the chunk's window closes
// (ratio 4, ratio 128) and the 128-token ring's wrap at accepted and at rejected positions: the
// next token's logits match those of the path that never ran the rejected drafts. Without the
// rollback they do not (the test's own mutant check).
#include <gtest/gtest.h>

#include "model/spec_state.h"
#include "tests/unit/tiny_ref_model.h"

namespace dsv4 {
namespace {

using testing_tiny::max_abs_diff;
using testing_tiny::random_token_ids;
using testing_tiny::tiny_ref_model;

struct Memory {
    std::vector<float> state, pool;
    std::vector<int32_t> pages;
    SeqStateView view(const KvLayout& L) { return SeqStateView{&L, state.data(), pool.data(), pages}; }
};

TEST(SpecState, RollbackLeavesTheStateOfTheAcceptedPositionsOnly) {
    const RefModel& m = tiny_ref_model();
    const int k = 3;
    auto layout = KvLayout::make(m.config(), 16, 4, KvRowFormat::kF32, 0, k);
    ASSERT_TRUE(layout.is_ok()) << layout.status().message();
    const KvLayout& L = *layout;
    const std::vector<int32_t> ids = random_token_ids(150, 21);
    int mutants_seen = 0, cases = 0;
    // 124..127: closes of the ratio-128 window (at 127) and of ratio-4 windows inside the chunk;
    // 129..132: the ring has wrapped, so rejected slots hold rows the next query reads.
    for (int64_t P : {124, 125, 126, 127, 129, 130, 131, 132}) {
        Memory base{std::vector<float>(size_t(L.state_elems)), std::vector<float>(size_t(12 * L.page_elems)), {}};
        for (int i = 0; i < 12; ++i) base.pages.push_back(i);
        std::vector<float> lg;
        ASSERT_TRUE(m.forward(base.view(L), std::span(ids).first(size_t(P)), 0, {}, lg).is_ok());
        const std::vector<int32_t> chunk(ids.begin() + P, ids.begin() + P + k + 1);  // [token, d1..dk]
        for (int j = 0; j < k; ++j) {                     // j drafts accepted, k - j rejected
            const int32_t next = ids[size_t(P + k + 1)];  // the token the next chunk runs at P + j + 1
            // The path that never ran the rejected drafts.
            Memory ref = base;
            std::vector<float> want, got, mutant;
            ASSERT_TRUE(m.forward(ref.view(L), std::span(chunk).first(size_t(j + 1)), P, {}, lg).is_ok());
            ASSERT_TRUE(m.forward(ref.view(L), std::span(&next, 1), P + j + 1, {}, want).is_ok());
            // Verify chunk, then rollback to P + j + 1.
            Memory spec = base;
            spec_backup(L, spec.state.data(), P, k + 1);
            ASSERT_TRUE(m.forward(spec.view(L), chunk, P, {}, lg).is_ok());
            Memory no_rollback = spec;
            ASSERT_TRUE(spec_rollback(L, spec.state.data(), P + j + 1).is_ok());
            EXPECT_EQ(spec_header(L, spec.state.data()).verify_len, 0);
            ASSERT_TRUE(m.forward(spec.view(L), std::span(&next, 1), P + j + 1, {}, got).is_ok());
            EXPECT_LT(max_abs_diff(got, want), 2e-5) << "P " << P << " accepted " << j;
            ASSERT_TRUE(m.forward(no_rollback.view(L), std::span(&next, 1), P + j + 1, {}, mutant).is_ok());
            mutants_seen += max_abs_diff(mutant, want) > 1e-3;
            ++cases;
        }
    }
    // Past the ring's wrap a rejected slot is always read; before it, only a rejected close matters.
    EXPECT_GE(mutants_seen, 12) << "of " << cases;
}

TEST(SpecState, RollbackNeedsTheChunkToStartInsideOrAfterTheVerifyChunk) {
    const RefModel& m = tiny_ref_model();
    auto L = KvLayout::make(m.config(), 16, 4, KvRowFormat::kF32, 0, 2);
    ASSERT_TRUE(L.is_ok());
    std::vector<float> state(size_t(L->state_elems));
    EXPECT_TRUE(spec_rollback(*L, state.data(), 5).is_ok());  // no verify chunk recorded: nothing to do
    spec_backup(*L, state.data(), 10, 3);
    const Status s = spec_rollback(*L, state.data(), 9);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("[10, 13)"), std::string::npos) << s.message();
    EXPECT_TRUE(spec_rollback(*L, state.data(), 13).is_ok());  // everything accepted
    EXPECT_EQ(spec_header(*L, state.data()).verify_len, 0);
}

TEST(SpecState, LayoutRefusesChunksLongerThanAWindow) {
    const ModelConfig c = tiny_ref_model().config();
    EXPECT_TRUE(KvLayout::make(c, 16, 4, KvRowFormat::kF32, 1, 3).is_ok());
    const auto bad = KvLayout::make(c, 16, 4, KvRowFormat::kF32, 1, 4);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("compress ratio 4"), std::string::npos) << bad.status().message();
    // The decoder's offsets do not move when the speculative area is added.
    const auto plain = KvLayout::make(c, 16, 4, KvRowFormat::kF32, 1, 0),
               spec = KvLayout::make(c, 16, 4, KvRowFormat::kF32, 1, 3);
    for (size_t l = 0; l < plain->layers.size(); ++l)
        EXPECT_EQ(plain->layers[l].ring_offset, spec->layers[l].ring_offset);
    EXPECT_GT(spec->state_elems, plain->state_elems);
}

}  // namespace
}  // namespace dsv4
