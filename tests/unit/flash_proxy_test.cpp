// The Flash proxy config and its bytes-moved model (model/flash_proxy.h) against the numbers of
// ../shared/docs/perf-method.md and spec §1.1, §3.2, §4.1.
#include <gtest/gtest.h>

#include <cmath>

#include "model/flash_proxy.h"

namespace dsv4 {
namespace {

TEST(FlashProxy, DefaultScheduleIs2Sliding9Csa9Hca) {
    const auto t = default_proxy_layer_types(20);
    ASSERT_EQ(t.size(), 20u);
    int s = 0, c = 0, h = 0;
    for (auto x : t) s += x == AttnType::kSliding, c += x == AttnType::kCSA, h += x == AttnType::kHCA;
    EXPECT_EQ(s, 2);
    EXPECT_EQ(c, 9);
    EXPECT_EQ(h, 9);
    EXPECT_EQ(t[0], AttnType::kSliding);
    EXPECT_EQ(t[1], AttnType::kSliding);
    EXPECT_EQ(t[2], AttnType::kCSA);  // as Flash: layer 2 is CSA, layer 3 HCA
    EXPECT_EQ(t[3], AttnType::kHCA);
    EXPECT_EQ(default_proxy_layer_types(2), (std::vector<AttnType>{AttnType::kSliding, AttnType::kSliding}));
}

TEST(FlashProxy, ParsesLayerTypes) {
    auto t = parse_layer_types("sliding,CSA,hca,s,c,h,swa");
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(*t, (std::vector<AttnType>{AttnType::kSliding, AttnType::kCSA, AttnType::kHCA, AttnType::kSliding,
                                         AttnType::kCSA, AttnType::kHCA, AttnType::kSliding}));
    auto bad = parse_layer_types("sliding,mla");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("mla"), std::string::npos);
    EXPECT_FALSE(parse_layer_types("csa,,hca").is_ok());
}

TEST(FlashProxy, ConfigHasFlashShapes) {
    FlashProxySpec sp;
    auto c = flash_proxy_config(sp);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ(c->n_layers, 20);
    EXPECT_EQ(c->vocab_size, 129280);
    EXPECT_EQ(c->hidden_size, 4096);
    EXPECT_EQ(c->n_heads, 64);
    EXPECT_EQ(c->head_dim, 512);
    EXPECT_EQ(c->q_lora_rank, 1024);
    EXPECT_EQ(c->o_groups * c->o_lora_rank, 8192);
    EXPECT_EQ(c->n_routed_experts, 256);
    EXPECT_EQ(c->n_experts_per_tok, 6);
    EXPECT_EQ(c->moe_intermediate_size, 2048);
    EXPECT_EQ(c->sliding_window, 128);
    EXPECT_EQ(c->index_n_heads * c->index_head_dim, 64 * 128);
    EXPECT_EQ(c->index_topk, 512);
    for (int l = 0; l < 20; ++l) {
        EXPECT_EQ(c->mlp_types[l], l < 3 ? MoeRouting::kHash : MoeRouting::kLearned) << l;
        const int want = c->layer_types[l] == AttnType::kCSA ? 4 : c->layer_types[l] == AttnType::kHCA ? 128 : 0;
        EXPECT_EQ(c->compress_ratio(l), want) << l;
    }
    FlashProxySpec three{3, {AttnType::kSliding, AttnType::kCSA, AttnType::kHCA}, 5};
    auto c3 = flash_proxy_config(three);
    ASSERT_TRUE(c3.is_ok());
    EXPECT_EQ(c3->mlp_types, std::vector<MoeRouting>(3, MoeRouting::kHash));  // hash layers clamp to depth
    FlashProxySpec wrong{4, {AttnType::kCSA}, 3};
    EXPECT_FALSE(flash_proxy_config(wrong).is_ok());
    EXPECT_FALSE(flash_proxy_config(FlashProxySpec{0, {}, 3}).is_ok());
}

TEST(FlashProxy, WeightBytesMatchPerfMethod) {
    // 43 layers: routed experts 147.2 GB (perf-method.md); one expert layer is exactly
    // 256 x 3 x (2048 x 2048 + 2048 x 128) bytes of MXFP4 + UE8M0.
    FlashProxySpec full;
    full.n_layers = 43;
    full.layer_types = {AttnType::kSliding, AttnType::kSliding, AttnType::kCSA};
    for (int l = 3; l < 43; ++l) full.layer_types.push_back(l % 2 ? AttnType::kHCA : AttnType::kCSA);
    auto c = flash_proxy_config(full);
    ASSERT_TRUE(c.is_ok());
    const ProxyWeightBytes w = proxy_weight_bytes(*c);
    EXPECT_EQ(w.experts, int64_t(43) * 256 * 3 * (2048 * 2048 + 2048 * 128));
    EXPECT_NEAR(double(w.experts) / 1e9, 147.2, 0.05);
    // Dense streamed ~7.8 GB by perf-method's estimate (FP8 attention, BF16 LM head, ...).
    EXPECT_GT(double(w.streamed) / 1e9, 7.0);
    EXPECT_LT(double(w.streamed) / 1e9, 8.6);
    EXPECT_EQ(w.embed, int64_t(2) * 129280 * 4096);
    EXPECT_EQ(w.tables, int64_t(3) * 4 * 129280 * 6);
    EXPECT_EQ(w.expert_params_one, int64_t(3) * 2048 * 4096);
    // The 20-layer proxy is ~74 GB.
    auto p = flash_proxy_config(FlashProxySpec{});
    const ProxyWeightBytes w20 = proxy_weight_bytes(*p);
    EXPECT_NEAR(double(w20.total()) / 1e9, 74.0, 2.5);
    EXPECT_EQ(fp8_block_bytes(1024, 4096), 1024 * 4096 + 8 * 32);
    EXPECT_EQ(fp8_block_bytes(129, 129), 129 * 129 + 4);
    EXPECT_EQ(mxfp4_bytes(4096, 2048), 4096 * 1024 + 4096 * 64);
}

TEST(FlashProxy, ExpertFraction) {
    EXPECT_NEAR(expert_fraction(1, 256, 6, 256), 6.0 / 256, 1e-12);
    EXPECT_NEAR(expert_fraction(8, 256, 6, 256), 0.17, 0.005);
    EXPECT_NEAR(expert_fraction(64, 256, 6, 256), 0.78, 0.005);
    EXPECT_NEAR(expert_fraction(256, 256, 6, 256), 0.998, 0.001);
    // Skewed to 32 hot experts: one token still reads 6 experts; many tokens at most 32 of 256.
    EXPECT_NEAR(expert_fraction(1, 256, 6, 32), 6.0 / 256, 1e-12);
    EXPECT_NEAR(expert_fraction(4096, 256, 6, 32), 32.0 / 256, 1e-9);
    EXPECT_EQ(expert_fraction(0, 256, 6, 256), 0.0);
}

TEST(FlashProxy, KvBytesMatchPerfMethod) {
    // 43-layer Flash with FP8 rows: ~9.5 MB + 784 B x L per sequence (perf-method.md).
    FlashProxySpec full;
    full.n_layers = 43;
    full.layer_types = {AttnType::kSliding, AttnType::kSliding, AttnType::kCSA};
    for (int l = 3; l < 43; ++l) full.layer_types.push_back(l % 2 ? AttnType::kHCA : AttnType::kCSA);
    auto c = flash_proxy_config(full);
    ASSERT_TRUE(c.is_ok());
    auto fp8 = kv_row_bytes(*c, "fp8");
    ASSERT_TRUE(fp8.is_ok());
    EXPECT_EQ(fp8->main_row, 584);
    EXPECT_EQ(fp8->index_row, 132);
    const ProxyWeightBytes w = proxy_weight_bytes(*c);
    const int64_t L = 32767;  // L + 1 = 32768: whole windows
    const StepBytesModel m = step_bytes_model(*c, w, *fp8, 1, L, 256);
    const double want = 43.0 * 128 * 584 + 21.0 * 512 * 584 + 21.0 * 8192 * 132 + 20.0 * 256 * 584;
    EXPECT_DOUBLE_EQ(m.kv_per_seq, want);
    EXPECT_NEAR(m.kv_per_seq, 9.49e6 + 784.25 * 32768, 0.02e6);
    // Short context: CSA reads every compressed row (< top-k), ring only L + 1 rows.
    const StepBytesModel s = step_bytes_model(*c, w, *fp8, 1, 7, 256);
    EXPECT_DOUBLE_EQ(s.kv_per_seq, 43.0 * 8 * 584 + 21.0 * 2 * (584 + 132));
    // Batch terms: KV scales with B, dense only by the embedding rows.
    const StepBytesModel b8 = step_bytes_model(*c, w, *fp8, 8, L, 256);
    EXPECT_DOUBLE_EQ(b8.kv, 8 * m.kv_per_seq);
    EXPECT_DOUBLE_EQ(b8.dense - m.dense, 7 * (2.0 * 4096 + 3 * 24.0));
    EXPECT_NEAR(b8.experts / w.experts, expert_fraction(8, 256, 6, 256), 1e-12);
    EXPECT_GT(b8.flops, 8 * 2.0 * (w.streamed_params + 43.0 * 6 * w.expert_params_one));
    // f32 / bf16 rows as the CUDA runner stores them.
    EXPECT_EQ(kv_row_bytes(*c, "f32")->main_row, 2048);
    EXPECT_EQ(kv_row_bytes(*c, "bf16")->main_row, 1024);
    EXPECT_EQ(kv_row_bytes(*c, "bf16")->ring_row, 1024);
    EXPECT_FALSE(kv_row_bytes(*c, "fp4").is_ok());
    EXPECT_NE(describe_bytes_model(*c, w, *fp8, 256).find("584"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
