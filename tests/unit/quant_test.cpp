// Quantised-weight codecs and their loader paths (spec §4.2): FP8 128x128 block scales in UE8M0 and
// F32 (B14: the scale is rounded to a power of two before quantising), the three scale spellings,
// cropped edge blocks, missing scales as errors, and MXFP4 round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "core/dtype.h"
#include "model/checkpoint.h"
#include "model/quant.h"
#include "model/safetensors_writer.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

std::string temp_file(const std::string& stem) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return (fs::temp_directory_path() / fmt::format("dsv4_quant_{}_{}_{}.safetensors", ::getpid(), info->name(), stem))
        .string();
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// 2^ceil(log2(amax / 448)) as a UE8M0 byte, computed independently in double precision.
int formula_byte(double amax, double max_code) { return 127 + int(std::ceil(std::log2(amax / max_code))); }

TEST(Quant, ScaleRuleIsCeilPowerOfTwo) {
    for (int k = -20; k <= 20; ++k) {
        const float p = std::ldexp(448.0f, k);
        EXPECT_EQ(ue8m0_scale_for(p, 448.0f), 127 + k);                            // exact
        EXPECT_EQ(ue8m0_scale_for(std::nextafter(p, 0.0f), 448.0f), 127 + k);      // just below
        EXPECT_EQ(ue8m0_scale_for(std::nextafter(p, INFINITY), 448.0f), 128 + k);  // just above
        EXPECT_EQ(ue8m0_scale_for(std::ldexp(6.0f, k), 6.0f), 127 + k);
        EXPECT_EQ(ue8m0_scale_for(std::nextafter(std::ldexp(6.0f, k), INFINITY), 6.0f), 128 + k);
    }
    EXPECT_EQ(ue8m0_scale_for(0.0f, 448.0f), 127);
}

// B14 round trip: 100 random 128x128 blocks, amax spread over decades and placed just around
// powers of two.
TEST(Quant, Fp8BlockRoundTripUe8m0) {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-12, 8);
    const int B = 128;
    for (int blk = 0; blk < 100; ++blk) {
        SCOPED_TRACE(blk);
        std::vector<float> w(B * B);
        for (float& x : w) x = normal(rng);
        float amax = 0;
        for (float x : w) amax = std::max(amax, std::fabs(x));
        // Target amax: 448 * 2^e nudged just below / at / just above the power-of-two boundary.
        const float boundary = std::ldexp(448.0f, expo(rng));
        const float target = blk % 3 == 0   ? std::nextafter(boundary, 0.0f)
                             : blk % 3 == 1 ? std::nextafter(boundary, INFINITY)
                                            : boundary * (0.5f + 0.5f * float(blk) / 100.0f);
        for (float& x : w) x *= target / amax;
        amax = 0;
        for (float x : w) amax = std::max(amax, std::fabs(x));

        const Fp8BlockQuant q = quantize_fp8_block(w.data(), B, B);
        ASSERT_EQ(q.scale_ue8m0.size(), 1u);
        EXPECT_EQ(int(q.scale_ue8m0[0]), formula_byte(amax, 448.0));
        const float s = ue8m0_to_f32(q.scale_ue8m0[0]);
        EXPECT_LE(amax / s, 448.0f);
        EXPECT_GT(amax / s, 224.0f);  // the scale is the tightest power of two

        std::vector<float> back(B * B);
        dequantize_fp8_block(q.q.data(), q.scale_ue8m0.data(), B, B, back.data());
        double err2 = 0, ref2 = 0;
        for (int i = 0; i < B * B; ++i) {
            // e4m3: 3 mantissa bits, so half an ulp is 2^-4 relative for normals; subnormals
            // (|w/s| < 2^-6) have an absolute quantum of 2^-9 * s.
            const float bound = std::max(std::fabs(w[i]) * 0.0625f, std::ldexp(s, -10));
            ASSERT_LE(std::fabs(back[i] - w[i]), bound) << i << " w=" << w[i] << " got=" << back[i];
            // Dequantisation is exactly code value times the same scale used to quantise.
            ASSERT_EQ(f32_bits(back[i]), f32_bits(fp8e4m3_to_f32(q.q[i]) * s));
            err2 += double(back[i] - w[i]) * (back[i] - w[i]);
            ref2 += double(w[i]) * w[i];
        }
        EXPECT_LT(std::sqrt(err2 / ref2), 0.03);
    }
}

TEST(Quant, Fp8F32ScalesBitIdenticalToFormula) {
    std::mt19937 rng(7);
    const int64_t N = 130, K = 260;  // 2 x 3 grid with cropped edges
    std::vector<uint8_t> q(N * K);
    for (auto& b : q) {
        b = uint8_t(rng());
        if ((b & 0x7f) == 0x7f) b = 0x10;  // keep NaN codes out of the comparison
    }
    std::vector<float> scale(6);
    for (auto& s : scale) s = std::uniform_real_distribution<float>(1e-4f, 3.0f)(rng);
    std::vector<float> out(N * K);
    dequantize_fp8_block_f32scale(q.data(), scale.data(), N, K, out.data());
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
            const float expect = fp8e4m3_to_f32(q[n * K + k]) * scale[(n / 128) * 3 + k / 128];
            ASSERT_EQ(f32_bits(out[n * K + k]), f32_bits(expect)) << n << "," << k;
        }
}

TEST(Quant, Mxfp4RoundTripExactOnGrid) {
    std::mt19937 rng(99);
    const int64_t N = 7, K = 96;
    std::vector<float> w(N * K);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < K / 32; ++g) {
            const int e = int(rng() % 20) - 10;
            for (int64_t k = g * 32; k < g * 32 + 32; ++k)
                w[n * K + k] = std::ldexp(fp4e2m1_to_f32(uint8_t(rng() % 16)), e);
        }
    const Mxfp4Quant q = quantize_mxfp4(w.data(), N, K);
    ASSERT_EQ(q.packed.size(), size_t(N * K / 2));
    ASSERT_EQ(q.scales.size(), size_t(N * K / 32));
    std::vector<float> back(N * K);
    dequantize_mxfp4(q.packed.data(), q.scales.data(), N, K, back.data());
    for (int64_t i = 0; i < N * K; ++i) ASSERT_EQ(back[i], w[i]) << i;

    // Packing order: low nibble = even k.
    std::vector<float> two = {0.5f, -6.0f};
    two.resize(32, 0.0f);
    const Mxfp4Quant p = quantize_mxfp4(two.data(), 1, 32);
    EXPECT_EQ(p.scales[0], 127);
    EXPECT_EQ(p.packed[0], 0xF1);  // k=0: 0.5 -> code 1 (low); k=1: -6 -> code 15 (high)
}

TEST(Quant, Mxfp4ScaleRule) {
    std::vector<float> w(32, 0.0f);
    w[5] = 100.0f;  // 2^ceil(log2(100/6)) = 32
    const Mxfp4Quant q = quantize_mxfp4(w.data(), 1, 32);
    EXPECT_EQ(q.scales[0], 127 + 5);
    std::vector<float> back(32);
    dequantize_mxfp4(q.packed.data(), q.scales.data(), 1, 32, back.data());
    EXPECT_EQ(back[5], 96.0f);  // 100/32 = 3.125 -> 3
}

// ---- Loader paths ------------------------------------------------------------------------------

std::span<const uint8_t> bytes_of(const std::vector<float>& v) {
    return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4};
}

std::vector<float> random_weight(int64_t N, int64_t K, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.05f);
    std::vector<float> w(N * K);
    for (auto& x : w) x = d(rng);
    return w;
}

TEST(QuantLoader, Fp8ScaleNamesAndDtypes) {  // B14 loader
    const int64_t N = 200, K = 300;          // grid [2, 3], cropped edges
    const int64_t shape[] = {N, K};
    const auto w = random_weight(N, K, 5);
    const Fp8BlockQuant q = quantize_fp8_block(w.data(), N, K);
    std::vector<float> f32_scale(6);
    for (int i = 0; i < 6; ++i) f32_scale[i] = ue8m0_to_f32(q.scale_ue8m0[i]);
    std::vector<float> expect(N * K);
    dequantize_fp8_block(q.q.data(), q.scale_ue8m0.data(), N, K, expect.data());

    SafetensorsWriter wr;
    for (const char* base : {"a", "b", "c", "d", "e", "f"})
        ASSERT_TRUE(wr.add(std::string(base) + ".weight", DType::kF8E4M3, {N, K}, q.q).is_ok());
    ASSERT_TRUE(wr.add("a.scale", DType::kF8E8M0, {2, 3}, q.scale_ue8m0).is_ok());
    ASSERT_TRUE(wr.add("b.weight_scale_inv", DType::kF8E8M0, {2, 3}, q.scale_ue8m0).is_ok());
    ASSERT_TRUE(wr.add("c.weight_scale", DType::kF32, {2, 3}, bytes_of(f32_scale)).is_ok());
    // d: no scale at all. e: two candidate scales. f: wrong grid.
    ASSERT_TRUE(wr.add("e.scale", DType::kF8E8M0, {2, 3}, q.scale_ue8m0).is_ok());
    ASSERT_TRUE(wr.add("e.weight_scale", DType::kF8E8M0, {2, 3}, q.scale_ue8m0).is_ok());
    ASSERT_TRUE(wr.add("f.scale", DType::kF8E8M0, {3, 2}, q.scale_ue8m0).is_ok());
    std::vector<uint8_t> nan_scale = q.scale_ue8m0;
    nan_scale[4] = 255;
    ASSERT_TRUE(wr.add("g.weight", DType::kF8E4M3, {N, K}, q.q).is_ok());
    ASSERT_TRUE(wr.add("g.scale", DType::kF8E8M0, {2, 3}, nan_scale).is_ok());
    ASSERT_TRUE(wr.add("h.weight", DType::kF8E4M3, {N, K}, q.q).is_ok());
    ASSERT_TRUE(wr.add("h.scale", DType::kBF16, {2, 3}, std::vector<uint8_t>(12, 0)).is_ok());
    const std::string path = temp_file("fp8");
    ASSERT_TRUE(wr.write(path).is_ok());
    auto ck = Checkpoint::open(path);
    fs::remove(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();

    for (const char* name : {"a.weight", "b.weight", "c.weight"}) {
        SCOPED_TRACE(name);
        auto got = load_f32(*ck, name, shape);
        ASSERT_TRUE(got.is_ok()) << got.status().to_string();
        ASSERT_EQ(got->size(), expect.size());
        for (size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(f32_bits((*got)[i]), f32_bits(expect[i])) << i;
    }
    // Edge blocks use the cropped block's own scale: element (150, 290) is block (1, 2).
    {
        auto got = load_f32(*ck, "a.weight", shape);
        const float s = ue8m0_to_f32(q.scale_ue8m0[1 * 3 + 2]);
        EXPECT_EQ((*got)[150 * K + 290], fp8e4m3_to_f32(q.q[150 * K + 290]) * s);
    }
    const auto expect_error = [&](const char* name, std::initializer_list<std::string_view> words) {
        auto r = load_f32(*ck, name, shape);
        ASSERT_FALSE(r.is_ok()) << name;
        for (auto w : words) EXPECT_TRUE(contains(r.status().message(), w)) << r.status().message();
        EXPECT_TRUE(contains(r.status().message(), path)) << r.status().message();
    };
    expect_error("d.weight", {"d.weight", "no block scale"});
    expect_error("e.weight", {"e.weight", "ambiguous"});
    expect_error("f.weight", {"f.scale", "[2, 3]", "[3, 2]"});
    expect_error("g.weight", {"g.scale", "255"});
    expect_error("h.weight", {"h.scale", "BF16"});
    const int64_t wrong[] = {K, N};
    auto bad = load_f32(*ck, "a.weight", wrong);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_TRUE(contains(bad.status().message(), "a.weight") && contains(bad.status().message(), "[300, 200]"));
}

TEST(QuantLoader, Mxfp4) {
    const int64_t N = 5, K = 64;
    const int64_t shape[] = {N, K};
    const auto w = random_weight(N, K, 11);
    const Mxfp4Quant q = quantize_mxfp4(w.data(), N, K);
    std::vector<float> expect(N * K);
    dequantize_mxfp4(q.packed.data(), q.scales.data(), N, K, expect.data());
    SafetensorsWriter wr;
    ASSERT_TRUE(wr.add("e.w1.weight", DType::kI8, {N, K / 2}, q.packed).is_ok());
    ASSERT_TRUE(wr.add("e.w1.scale", DType::kF8E8M0, {N, K / 32}, q.scales).is_ok());
    ASSERT_TRUE(wr.add("e.w2.weight", DType::kI8, {N, K / 2}, q.packed).is_ok());  // no scale
    ASSERT_TRUE(wr.add("e.w3.weight", DType::kI8, {N, K}, std::vector<uint8_t>(N * K, 0)).is_ok());
    const std::string path = temp_file("fp4");
    ASSERT_TRUE(wr.write(path).is_ok());
    auto ck = Checkpoint::open(path);
    fs::remove(path);
    ASSERT_TRUE(ck.is_ok());
    auto got = load_f32(*ck, "e.w1.weight", shape);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(*got, expect);
    auto missing = load_f32(*ck, "e.w2.weight", shape);
    ASSERT_FALSE(missing.is_ok());
    EXPECT_TRUE(contains(missing.status().message(), "e.w2.scale") &&
                contains(missing.status().message(), "e.w2.weight"))
        << missing.status().message();
    auto stored_wrong = load_f32(*ck, "e.w3.weight", shape);
    ASSERT_FALSE(stored_wrong.is_ok());
    EXPECT_TRUE(contains(stored_wrong.status().message(), "[5, 32]")) << stored_wrong.status().message();
}

TEST(QuantLoader, WriterHelpersRoundTripThroughLoader) {
    const int64_t N = 150, K = 96;  // cropped FP8 edge blocks; K a multiple of 32 for MXFP4
    const int64_t shape[] = {N, K};
    const auto w = random_weight(N, K, 21);
    SafetensorsWriter wr;
    ASSERT_TRUE(wr.add_fp8_block("fp8", w.data(), N, K).is_ok());
    ASSERT_TRUE(wr.add_fp8_block("fp8f", w.data(), N, K, /*f32_scale=*/true).is_ok());
    ASSERT_TRUE(wr.add_mxfp4("fp4", w.data(), N, K).is_ok());
    EXPECT_FALSE(wr.add_mxfp4("odd", w.data(), N, 48).is_ok());
    const std::string path = temp_file("helpers");
    ASSERT_TRUE(wr.write(path).is_ok());
    auto ck = Checkpoint::open(path);
    fs::remove(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_EQ(ck->get("fp8f.scale")->dtype, DType::kF32);

    const Fp8BlockQuant q8 = quantize_fp8_block(w.data(), N, K);
    std::vector<float> e8(N * K);
    dequantize_fp8_block(q8.q.data(), q8.scale_ue8m0.data(), N, K, e8.data());
    const Mxfp4Quant q4 = quantize_mxfp4(w.data(), N, K);
    std::vector<float> e4(N * K);
    dequantize_mxfp4(q4.packed.data(), q4.scales.data(), N, K, e4.data());
    EXPECT_EQ(*load_f32(*ck, "fp8.weight", shape), e8);
    EXPECT_EQ(*load_f32(*ck, "fp8f.weight", shape), e8);
    EXPECT_EQ(*load_f32(*ck, "fp4.weight", shape), e4);
}

// The scale grids of spec §4.1 (Flash) follow from the weight shapes, and a tensor at a real Flash
// shape loads through the official names.
TEST(QuantLoader, OfficialFlashShapes) {
    struct Row {
        int64_t n, k, gn, gk;
    };
    for (const Row& r :
         {Row{1024, 4096, 8, 32}, Row{32768, 1024, 256, 8}, Row{512, 4096, 4, 32}, Row{8192, 4096, 64, 32},
          Row{4096, 8192, 32, 64}, Row{2048, 4096, 16, 32}, Row{4096, 2048, 32, 16}, Row{8192, 1024, 64, 8}}) {
        EXPECT_EQ((r.n + 127) / 128, r.gn);
        EXPECT_EQ((r.k + 127) / 128, r.gk);
    }
    const int64_t N = 512, K = 4096;     // layers.L.attn.wkv: [512, 4096] / [4, 32]
    const int64_t EN = 4096, EK = 2048;  // experts.E.w2: I8 [4096, 1024] / [4096, 64]
    const auto w = random_weight(N, K, 3);
    const auto we = random_weight(EN, EK, 4);
    SafetensorsWriter wr;
    ASSERT_TRUE(wr.add_fp8_block("layers.0.attn.wkv", w.data(), N, K).is_ok());
    ASSERT_TRUE(wr.add_mxfp4("layers.3.ffn.experts.7.w2", we.data(), EN, EK).is_ok());
    const std::string path = temp_file("flash");
    ASSERT_TRUE(wr.write(path).is_ok());
    auto ck = Checkpoint::open(path);
    fs::remove(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_TRUE(ck->get("layers.0.attn.wkv.scale", DType::kF8E8M0, std::vector<int64_t>{4, 32}).is_ok());
    EXPECT_TRUE(ck->get("layers.3.ffn.experts.7.w2.weight", DType::kI8, std::vector<int64_t>{4096, 1024}).is_ok());
    EXPECT_TRUE(ck->get("layers.3.ffn.experts.7.w2.scale", DType::kF8E8M0, std::vector<int64_t>{4096, 64}).is_ok());
    auto a = load_f32(*ck, "layers.0.attn.wkv.weight", std::vector<int64_t>{N, K});
    auto b = load_f32(*ck, "layers.3.ffn.experts.7.w2.weight", std::vector<int64_t>{EN, EK});
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    double err = 0, ref = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        err += double((*a)[i] - w[i]) * ((*a)[i] - w[i]);
        ref += double(w[i]) * w[i];
    }
    EXPECT_LT(std::sqrt(err / ref), 0.03);
    EXPECT_EQ(b->size(), size_t(EN * EK));
}

}  // namespace
}  // namespace dsv4
