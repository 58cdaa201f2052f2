// Expert and attention partitioning over N ranks (issue 8), on the real Flash config.
#include <algorithm>
#include <vector>
#include <gtest/gtest.h>

#include "dist/attention_partition.h"
#include "dist/expert_partition.h"
#include "dist/flash_config.h"
#include "model/weights.h"

namespace dsv4::dist {
namespace {

TEST(ExpertPartition, ContiguousBlocksCoverEveryExpertOnce) {
    for (int E : {16, 256})
        for (int N : {1, 2, 4, 8}) {
            auto p = ExpertPartition::make(E, N);
            ASSERT_TRUE(p.is_ok()) << p.status().to_string();
            EXPECT_EQ(p->n_local(), E / N);
            std::vector<int> seen(size_t(E), 0);
            for (int r = 0; r < N; ++r)
                for (int i = 0; i < p->n_local(); ++i) {
                    const int e = p->first(r) + i;
                    ++seen[e];
                    EXPECT_EQ(p->owner(e), r);
                    EXPECT_EQ(p->local_index(e), i);
                    EXPECT_TRUE(p->owns(r, e));
                    if (r > 0) {
                        EXPECT_FALSE(p->owns(r - 1, e));
                    }
                }
            for (int e = 0; e < E; ++e) EXPECT_EQ(seen[e], 1) << "expert " << e;
        }
    auto flash = ExpertPartition::make(256, 2);
    EXPECT_EQ(flash->first(1), 128);
    EXPECT_EQ(flash->owner(127), 0);
    EXPECT_EQ(flash->owner(128), 1);
}

// The expert-parallel CUDA runner runs each layer's shared expert on exactly one rank, and the
// ranks share the layers as evenly as possible (Flash: 43 layers on 2 GPUs -> 22 + 21).
TEST(ExpertPartition, SharedExpertRanksTakeTurnsOverLayers) {
    for (int N : {1, 2, 4, 8}) {
        auto p = ExpertPartition::make(256, N);
        ASSERT_TRUE(p.is_ok());
        std::vector<int> per_rank(size_t(N), 0);
        for (int l = 0; l < 43; ++l) {
            const int r = p->shared_expert_rank(l);
            ASSERT_GE(r, 0);
            ASSERT_LT(r, N);
            ++per_rank[size_t(r)];
        }
        const auto [lo, hi] = std::minmax_element(per_rank.begin(), per_rank.end());
        EXPECT_LE(*hi - *lo, 1) << N << " ranks";
        EXPECT_EQ(per_rank[0], (43 + N - 1) / N) << N << " ranks: rank 0 carries the most";
    }
}

TEST(ExpertPartition, RejectsRankCountsThatDoNotDivideTheExperts) {
    for (int N : {3, 5, 6, 7, 12, 512}) {
        auto p = ExpertPartition::make(256, N);
        ASSERT_FALSE(p.is_ok()) << N;
        EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(p.status().message().find("do not divide"), std::string::npos) << p.status().message();
    }
    EXPECT_FALSE(ExpertPartition::make(256, 0).is_ok());
    EXPECT_FALSE(ExpertPartition::make(256, -2).is_ok());
    EXPECT_FALSE(ExpertPartition::make(0, 1).is_ok());
    EXPECT_FALSE(ExpertPartition::make(16, 32).is_ok());  // the tiny model stops at 16 ranks
    EXPECT_TRUE(ExpertPartition::make(16, 16).is_ok());
}

TEST(AttentionPartition, TensorParallelSplitsHeadsAndWholeOutputGroups) {
    const ModelConfig c = flash_model_config();
    for (int N : {1, 2, 4, 8}) {
        int heads = 0, groups = 0;
        for (int r = 0; r < N; ++r) {
            auto s = make_attention_shard(c, AttnScheme::kTensorParallel, r, N);
            ASSERT_TRUE(s.is_ok()) << s.status().to_string();
            EXPECT_EQ(s->n_heads, 64 / N);
            EXPECT_EQ(s->first_head, heads);
            EXPECT_EQ(s->o_groups, 8 / N);
            EXPECT_EQ(s->first_group, groups);
            // Each held group's 8 heads are exactly this rank's heads.
            EXPECT_EQ(s->first_group * c.heads_per_group(), s->first_head);
            EXPECT_EQ(s->o_groups * c.heads_per_group(), s->n_heads);
            EXPECT_EQ(s->kv_replicated, N > 1);
            EXPECT_EQ(s->output_all_reduce, N > 1);
            heads += s->n_heads;
            groups += s->o_groups;
        }
        EXPECT_EQ(heads, 64);
        EXPECT_EQ(groups, 8);
    }
    auto two = make_attention_shard(c, AttnScheme::kTensorParallel, 1, 2);
    const std::string d = describe_attention_shard(c, *two);
    EXPECT_NE(d.find("heads 32..63 (32)"), std::string::npos) << d;
    EXPECT_NE(d.find("wq_b [16384, 1024]"), std::string::npos) << d;
    EXPECT_NE(d.find("wo_a [4096, 4096]"), std::string::npos) << d;
    EXPECT_NE(d.find("wo_b [4096, 4096]"), std::string::npos) << d;
}

TEST(AttentionPartition, DataParallelKeepsEverythingAndTpRejectsBadCounts) {
    const ModelConfig c = flash_model_config();
    for (int N : {1, 2, 3, 16}) {
        auto s = make_attention_shard(c, AttnScheme::kDataParallel, N - 1, N);
        ASSERT_TRUE(s.is_ok());
        EXPECT_EQ(s->n_heads, 64);
        EXPECT_EQ(s->o_groups, 8);
        EXPECT_FALSE(s->kv_replicated);
        EXPECT_FALSE(s->output_all_reduce);
    }
    auto three = make_attention_shard(c, AttnScheme::kTensorParallel, 0, 3);
    ASSERT_FALSE(three.is_ok());
    EXPECT_NE(three.status().message().find("64 query heads"), std::string::npos);
    auto sixteen = make_attention_shard(c, AttnScheme::kTensorParallel, 0, 16);  // 64 heads split, 8 groups not
    ASSERT_FALSE(sixteen.is_ok());
    EXPECT_NE(sixteen.status().message().find("8 output groups"), std::string::npos) << sixteen.status().message();
    EXPECT_FALSE(make_attention_shard(c, AttnScheme::kTensorParallel, 2, 2).is_ok());
    EXPECT_FALSE(parse_attn_scheme("pp").is_ok());
    EXPECT_EQ(*parse_attn_scheme("tp"), AttnScheme::kTensorParallel);
}

}  // namespace
}  // namespace dsv4::dist
