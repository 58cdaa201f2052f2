// Weight inventory, KV bytes and the per-rank memory plan on the real Flash shapes (issue 8).
#include <gtest/gtest.h>

#include "dist/flash_config.h"
#include "dist/kv_bytes.h"
#include "dist/memory_plan.h"
#include "dist/weight_inventory.h"

namespace dsv4::dist {
namespace {

TEST(WeightInventory, FlashTotalIsTheCheckpointSize) {
    const ModelConfig c = flash_model_config();
    const auto inv = weight_inventory(c);
    // model.safetensors.index.json total_size (spec §0.3 REF-INDEX), MTP block included.
    EXPECT_EQ(total_bytes(inv), 159609485896LL);
    InventoryOptions no_mtp;
    no_mtp.include_mtp = false;
    const int64_t main = total_bytes(weight_inventory(c, no_mtp));
    EXPECT_LT(main, 159609485896LL);
    int64_t experts = 0;
    for (const TensorSpec& s : inv)
        if (s.placement == Placement::kExpert) experts += storage_bytes(s.storage, s.rows, s.cols);
    // 44 blocks (43 + MTP) x 256 experts x (w1 + w3 + w2) MXFP4 with 1x32 UE8M0 scales.
    const int64_t per_expert = 2 * (2048LL * 4096 / 2 + 2048 * 128) + (4096LL * 2048 / 2 + 4096 * 64);
    EXPECT_EQ(experts, 44LL * 256 * per_expert);
}

TEST(WeightInventory, StorageBytesIncludeScales) {
    EXPECT_EQ(storage_bytes(Storage::kFp8Block, 1024, 4096), 1024 * 4096 + 8 * 32);  // wq_a + [8, 32] scale
    EXPECT_EQ(storage_bytes(Storage::kFp8Block, 100, 100), 100 * 100 + 1);           // partial blocks round up
    EXPECT_EQ(storage_bytes(Storage::kMxfp4, 4096, 2048), 4096 * 1024 + 4096 * 64);
    EXPECT_EQ(storage_bytes(Storage::kBf16, 3, 5), 30);
    EXPECT_EQ(storage_bytes(Storage::kI64, 129280, 6), 129280 * 6 * 8);
}

TEST(WeightInventory, RankBytesAddUpForEveryRankCountAndScheme) {
    const ModelConfig c = flash_model_config();
    const auto inv = weight_inventory(c);
    const int64_t total = total_bytes(inv);
    for (int N : {1, 2, 4, 8})
        for (AttnScheme a : {AttnScheme::kDataParallel, AttnScheme::kTensorParallel}) {
            auto ep = ExpertPartition::make(c.n_routed_experts, N);
            ASSERT_TRUE(ep.is_ok());
            int64_t experts = 0, split = 0;
            int64_t replicated = -1;
            for (int r = 0; r < N; ++r) {
                auto shard = make_attention_shard(c, a, r, N);
                ASSERT_TRUE(shard.is_ok());
                auto b = rank_weight_bytes(inv, *ep, *shard);
                ASSERT_TRUE(b.is_ok()) << b.status().to_string();
                if (replicated < 0) replicated = b->replicated;
                EXPECT_EQ(b->replicated, replicated);
                experts += b->experts;
                split += b->attention_split;
                EXPECT_EQ(split, b->attention_split * (r + 1));  // equal shares on every rank
            }
            // Experts are held once in all; head-split tensors once under TP (block scales split
            // evenly for Flash), N times under DP; everything else on every rank.
            const int64_t split_once = a == AttnScheme::kTensorParallel ? split : split / N;
            EXPECT_EQ(replicated + experts + split_once, total) << "N " << N << " " << attn_scheme_name(a);
        }
}

TEST(KvBytes, FlashMatchesSpecTable) {
    const ModelConfig c = flash_model_config();
    const KvBytes bf16 = kv_bytes(c, KvRowFormat::kBf16);
    EXPECT_EQ(bf16.main_row, 1024);
    EXPECT_DOUBLE_EQ(bf16.per_token, 6880.0);  // spec §3.2
    const KvBytes fp8 = kv_bytes(c, KvRowFormat::kFp8);
    EXPECT_EQ(fp8.main_row, 584);
    EXPECT_EQ(fp8.index_row, 132);
    EXPECT_DOUBLE_EQ(fp8.per_token, 3850.25);
    EXPECT_EQ(fp8.window, 43LL * 128 * 584);
    EXPECT_EQ(fp8.compressor_state, 12206080);  // spec §3.2: 11.6 MiB per sequence
    EXPECT_EQ(kv_bytes(c, KvRowFormat::kF32).main_row, 2048);
    // 8192 tokens: 2048 CSA rows (main + indexer) in 21 layers, 64 HCA rows in 20.
    EXPECT_EQ(bf16.for_tokens(c, 8192), bf16.fixed() + 21LL * 2048 * (1024 + 256) + 20LL * 64 * 1024);
    EXPECT_EQ(bf16.for_tokens(c, 3), bf16.fixed());
}

TEST(MemoryPlan, TwoH200sHoldFlashAndDataParallelAttentionServesMore) {
    const ModelConfig c = flash_model_config();
    PlanOptions o;
    o.n_ranks = 2;
    o.context = 8192;
    o.batch = 256;
    o.gpu_bytes = 140.0 * (1ull << 30);
    o.reserve_bytes = 8.0 * (1ull << 30);
    auto dp = make_memory_plan(c, o);
    ASSERT_TRUE(dp.is_ok()) << dp.status().to_string();
    ASSERT_EQ(dp->ranks.size(), 2u);
    EXPECT_EQ(dp->model_bytes, 159609485896LL);
    EXPECT_EQ(dp->ranks[0].seqs + dp->ranks[1].seqs, 256);
    EXPECT_EQ(dp->ranks[1].first_expert, 128);
    EXPECT_TRUE(dp->fits()) << format_memory_plan(c, *dp);
    // One GPU cannot hold the model.
    o.n_ranks = 1;
    o.batch = 0;
    auto one = make_memory_plan(c, o);
    ASSERT_TRUE(one.is_ok());
    EXPECT_LT(one->ranks[0].free_bytes, 0);
    EXPECT_FALSE(one->fits());
    EXPECT_EQ(one->max_seqs, 0);
    // TP replicates the KV of every sequence on every rank: fewer sequences fit than with DP.
    o.n_ranks = 2;
    o.attn = AttnScheme::kTensorParallel;
    auto tp = make_memory_plan(c, o);
    ASSERT_TRUE(tp.is_ok());
    EXPECT_LT(tp->max_seqs, dp->max_seqs);
    EXPECT_LT(tp->ranks[0].weights.total(), dp->ranks[0].weights.total());
    const std::string text = format_memory_plan(c, *tp);
    EXPECT_NE(text.find("heads 32..63"), std::string::npos) << text;
    o.n_ranks = 3;
    EXPECT_FALSE(make_memory_plan(c, o).is_ok());
    o.n_ranks = 2;
    o.gpu_bytes = 0;
    EXPECT_FALSE(make_memory_plan(c, o).is_ok());
}

}  // namespace
}  // namespace dsv4::dist
