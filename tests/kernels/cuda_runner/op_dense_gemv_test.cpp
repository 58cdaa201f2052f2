// Dense weight-streaming GEMV (FP8 block-128 with UE8M0 scales, BF16) against the fp64 reference
// (ref::linear_f64), every variant of the op's table through check_variants, over a table of edge
// shapes: f32 and bf16 outputs, f32 and bf16 x (f32 x is rounded to bf16 by the kernels, so the
// reference rounds it too), x_stride != groups*K, the grouped (wo_a) form, batch 1 and token counts
// that are not multiples of the token tile; every variant must give bit-identical results on a second
// launch (no atomics).
#include <algorithm>
#include <thread>

#include "kernels/cuda/gemm/dense_gemv.h"
#include "kernels/ref/fp64.h"
#include "tests/kernels/cuda_runner/op_test_util.h"

namespace dsv4::cuda::test {
namespace {

struct GemvCase {
    WeightFormat fmt;
    int T, N, K, groups;
    bool out_f32;
    bool x_f32 = false;
    int x_pad = 0;  // x_stride = groups * K + x_pad (multiple of 8)
    uint32_t seed = 0;
    const char* note = "";  // the decode matrix the shape stands for, if any
};

// The test's name: format, tokens, shape, output and x types, padding.
std::string gemv_case_name(const GemvCase& c) {
    std::string n = std::string(c.fmt == WeightFormat::kFp8Block ? "fp8" : "bf16") + "_T" + std::to_string(c.T) + "_N" +
                    std::to_string(c.N) + "_K" + std::to_string(c.K);
    if (c.groups > 1) n += "_g" + std::to_string(c.groups);
    n += c.out_f32 ? "_yf32" : "_ybf16";
    if (c.x_f32) n += "_xf32";
    if (c.x_pad) n += "_pad" + std::to_string(c.x_pad);
    return n;
}

void run_gemv(const GemvCase& c) {
    std::mt19937 g(c.seed);
    const int rows = c.groups * c.N;
    const int64_t xs = int64_t(c.groups) * c.K + c.x_pad;
    std::vector<float> x32;  // f32 x as given to the kernel (not bf16-representable)
    std::vector<float> x = randn_bf16(g, size_t(c.T) * xs);
    if (c.x_f32) {
        std::normal_distribution<float> d(0.0f, 1.0f);
        x32.resize(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
            x32[i] = d(g);
            x[i] = round_bf16(x32[i]);
        }
    }
    std::vector<float> wf(size_t(rows) * c.K);
    std::vector<uint8_t> wq, sc;
    std::vector<uint16_t> wb;
    if (c.fmt == WeightFormat::kFp8Block) {
        const int kb = c.K / 128, nb = (rows + 127) / 128;
        sc.resize(size_t(nb) * kb);
        std::uniform_int_distribution<int> su(117, 121);
        for (auto& s : sc) s = uint8_t(su(g));
        wq.resize(wf.size());
        std::uniform_int_distribution<int> cu(0, 255);
        for (size_t i = 0; i < wq.size(); ++i) {
            uint8_t code = uint8_t(cu(g));
            if ((code & 0x7f) == 0x7f) code &= 0xfe;  // no NaN codes
            wq[i] = code;
            const int n = int(i / c.K), k = int(i % c.K);
            wf[i] = fp8e4m3_to_f32(code) * ue8m0_to_f32(sc[size_t(n / 128) * kb + k / 128]);
        }
    } else {
        wf = randn_bf16(g, wf.size(), 0.05f);
        wb = to_bf16(wf);
    }
    std::vector<double> ref(size_t(c.T) * rows);
    {  // the fp64 reference of the large shapes is the slow part of this test: spread over cores
        const int nth = int(std::clamp(std::thread::hardware_concurrency(), 1u, 32u));
        std::vector<std::thread> th;
        for (int i = 0; i < nth; ++i)
            th.emplace_back([&, i] {
                ref::linear_f64(wf.data(), rows, c.K, c.N, x.data(), xs, c.T, int64_t(rows) * i / nth,
                                int64_t(rows) * (i + 1) / nth, ref.data());
            });
        for (auto& h : th) h.join();
    }
    if (!c.out_f32)
        for (double& v : ref) v = double(round_bf16(float(v)));
    DevBuf<uint16_t> d_x(to_bf16(x));
    DevBuf<float> d_x32(c.x_f32 ? x32 : std::vector<float>{0});
    DevBuf<uint8_t> d_wq(c.fmt == WeightFormat::kFp8Block ? wq : std::vector<uint8_t>{0});
    DevBuf<uint8_t> d_sc(c.fmt == WeightFormat::kFp8Block ? sc : std::vector<uint8_t>{0});
    DevBuf<uint16_t> d_wb(c.fmt == WeightFormat::kBf16 ? wb : std::vector<uint16_t>{0});
    DevBuf<float> d_yf(size_t(c.T) * rows);
    DevBuf<uint16_t> d_yb(size_t(c.T) * rows);
    DenseGemvArgs a;
    a.x = c.x_f32 ? static_cast<const void*>(d_x32.p) : d_x.p;
    a.x_f32 = c.x_f32;
    a.x_stride = xs;
    a.w = c.fmt == WeightFormat::kFp8Block ? static_cast<const void*>(d_wq.p) : d_wb.p;
    a.w_scale = d_sc.p;
    a.out_f32 = c.out_f32;
    a.y = c.out_f32 ? static_cast<void*>(d_yf.p) : d_yb.p;
    a.format = c.fmt;
    a.n_tokens = c.T;
    a.N = c.N;
    a.K = c.K;
    a.groups = c.groups;
    VariantTable table{dense_gemv_variant_count(), dense_gemv_variant_name, [&](int v) {
                           DenseGemvArgs b = a;
                           b.variant = v;
                           return dense_gemv_legal(v, b);
                       }};
    OpCase op;
    op.ref = std::move(ref);
    op.tol.rel_l2 = c.out_f32 ? 1e-4 : 5e-3;
    op.poison = [&] {
        d_yf.poison();
        d_yb.poison();
    };
    op.run = [&](int v) {
        DenseGemvArgs b = a;
        b.variant = v;
        return dense_gemv_launch(b, nullptr);
    };
    op.read = [&] { return c.out_f32 ? d_yf.download() : from_bf16(d_yb.download()); };
    EXPECT_GT(check_variants(table, op), 0) << "no variant takes the shape";
}

class OpDenseGemv : public ::testing::TestWithParam<GemvCase> {};

TEST_P(OpDenseGemv, EveryVariantMatchesFp64) {
    SKIP_WITHOUT_GPU();
    run_gemv(GetParam());
}

constexpr WeightFormat kF8 = WeightFormat::kFp8Block, kB16 = WeightFormat::kBf16;
// {format, T, N, K, groups, y f32, x f32, x pad, seed, note}
const GemvCase kGemvCases[] = {
    {kF8, 1, 512, 1024, 1, true, false, 0, 1, "batch 1"},
    {kF8, 3, 256, 2048, 1, false, false, 0, 2, ""},
    {kF8, 13, 384, 512, 1, true, false, 0, 3, ""},
    {kF8, 5, 128, 1024, 4, true, false, 0, 4, "grouped (wo_a form)"},
    // Decode shapes of the K-chunked tensor-core GEMM: all token tiles (T 7..200 around 32/64/128),
    // grouped wo_a, K 1024..8192 (split-K ranks of 1..8 blocks), N up to 32768, f32 x with a padded
    // stride (the runtime's form), bf16 x.
    {kF8, 7, 1024, 2048, 1, false, true, 8, 11, ""},
    {kF8, 16, 32768, 1024, 1, true, true, 0, 12, "wq_b"},
    {kF8, 33, 1024, 1024, 8, true, true, 16, 13, "wo_a form"},
    {kF8, 64, 4096, 8192, 1, true, true, 8, 14, "wo_b"},
    {kF8, 64, 1024, 4096, 1, true, false, 0, 15, "wq_a"},
    {kF8, 100, 2048, 4096, 1, false, true, 0, 16, "shared w1"},
    {kF8, 128, 8192, 1024, 1, true, false, 24, 17, ""},
    {kF8, 200, 1024, 2048, 1, true, true, 8, 18, ""},
    {kF8, 1, 4096, 2048, 1, true, true, 8, 19, "shared w2"},
    {kB16, 1, 256, 1024, 1, true, false, 0, 5, "batch 1"},
    {kB16, 9, 512, 768, 1, false, false, 0, 6, ""},
    {kB16, 2, 128, 512, 2, true, false, 0, 7, "grouped"},
    {kB16, 16, 2048, 4096, 1, true, true, 8, 21, "compressor form"},
    {kB16, 64, 4096, 1024, 1, true, true, 0, 22, ""},
    {kB16, 100, 1024, 2048, 1, false, false, 8, 23, ""},
    {kB16, 128, 8192, 512, 1, true, true, 0, 24, "LM head form (K cut)"},
    {kB16, 200, 512, 1024, 1, true, false, 0, 25, ""},
};
INSTANTIATE_TEST_SUITE_P(Shapes, OpDenseGemv, ::testing::ValuesIn(kGemvCases),
                         [](const ::testing::TestParamInfo<GemvCase>& i) { return gemv_case_name(i.param); });

// The heuristic: CUDA cores at n_tokens <= 4, a K-chunked GEMM from 5 tokens on: on wo_b the
// cp.async-ring form up to 64 tokens, the first form with 64-token passes above (ledger-gemm-x);
// on wq_b the bf16-staging form up to 32 tokens, the ring form above; wq_a keeps the first form.
TEST(OpDenseGemv, HeuristicPicksKChunkAboveFourTokens) {
    DenseGemvArgs a;
    a.format = WeightFormat::kFp8Block;
    a.x_f32 = true;
    a.N = 4096;
    a.K = 8192;
    for (int T : {1, 4, 5, 8, 16, 33, 64, 65, 100, 128, 256}) {
        a.n_tokens = T;
        const std::string name = dense_gemv_variant_name(dense_gemv_select_variant(a));
        const char* want = T <= 4    ? "dense_gemv."
                           : T <= 64 ? "dense_gemm_kc3.bt32_bh16_w4_s3"
                                     : "dense_gemm_kc.bt64_bh16_w4_s2";
        EXPECT_EQ(name.rfind(want, 0), 0u) << "T " << T << ": " << name;
    }
    a.N = 32768;  // wq_b
    a.K = 1024;
    for (int T : {8, 32, 33, 256}) {
        a.n_tokens = T;
        EXPECT_EQ(dense_gemv_variant_name(dense_gemv_select_variant(a)),
                  T <= 32 ? "dense_gemm_kc2.bt32_bh16_w4_s2.sm90" : "dense_gemm_kc3.bt32_bh16_w4_s3.sm90")
            << "T " << T;
    }
    a.N = 1024;  // wq_a: unmeasured with the new forms, unchanged
    a.K = 4096;
    a.n_tokens = 16;
    EXPECT_EQ(dense_gemv_variant_name(dense_gemv_select_variant(a)), "dense_gemm_kc.bt32_bh16_w4_s2.sm90");
    a.format = WeightFormat::kBf16;  // LM head: 32 rows per warp
    a.N = 129280;
    a.K = 4096;
    a.n_tokens = 64;
    EXPECT_EQ(dense_gemv_variant_name(dense_gemv_select_variant(a)), "dense_gemm_kc.bt64_bh32_w4_s2.sm90");
}

}  // namespace
}  // namespace dsv4::cuda::test
