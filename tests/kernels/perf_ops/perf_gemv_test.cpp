// Dense weight-streaming GEMV (FP8 block-128 with UE8M0 scales, BF16) against an fp64 CPU
// reference, for every variant, f32 and bf16 outputs, the grouped (wo_a) form, batch 1 and token
// counts that are not multiples of the token chunk.
#include "kernels/cuda/gemm/dense_gemv.h"
#include "tests/kernels/perf_ops/perf_test_util.h"

namespace dsv4::cuda::test {
namespace {

struct GemvCase {
    WeightFormat fmt;
    int T, N, K, groups;
    bool out_f32;
};

void run_gemv(const GemvCase& c, uint32_t seed) {
    std::mt19937 g(seed);
    const int rows = c.groups * c.N;
    const int64_t xs = int64_t(c.groups) * c.K;
    std::vector<float> x = randn_bf16(g, size_t(c.T) * xs);
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
    for (int t = 0; t < c.T; ++t)
        for (int r = 0; r < rows; ++r) {
            const int grp = r / c.N;
            double acc = 0;
            for (int k = 0; k < c.K; ++k) acc += double(wf[size_t(r) * c.K + k]) * x[size_t(t) * xs + grp * c.K + k];
            ref[size_t(t) * rows + r] = c.out_f32 ? acc : double(round_bf16(float(acc)));
        }
    DevBuf<uint16_t> d_x(to_bf16(x));
    DevBuf<uint8_t> d_wq(c.fmt == WeightFormat::kFp8Block ? wq : std::vector<uint8_t>{0});
    DevBuf<uint8_t> d_sc(c.fmt == WeightFormat::kFp8Block ? sc : std::vector<uint8_t>{0});
    DevBuf<uint16_t> d_wb(c.fmt == WeightFormat::kBf16 ? wb : std::vector<uint16_t>{0});
    DevBuf<float> d_yf(size_t(c.T) * rows);
    DevBuf<uint16_t> d_yb(size_t(c.T) * rows);
    for (int v = 0; v < dense_gemv_variant_count(); ++v) {
        DenseGemvArgs a;
        a.x = d_x.p;
        a.w = c.fmt == WeightFormat::kFp8Block ? static_cast<const void*>(d_wq.p) : d_wb.p;
        a.w_scale = d_sc.p;
        a.out_f32 = c.out_f32;
        a.y = c.out_f32 ? static_cast<void*>(d_yf.p) : d_yb.p;
        a.format = c.fmt;
        a.n_tokens = c.T;
        a.N = c.N;
        a.K = c.K;
        a.groups = c.groups;
        a.variant = v;
        if (!dense_gemv_legal(v, a)) continue;
        SCOPED_TRACE(dense_gemv_variant_name(v));
        d_yf.poison();
        d_yb.poison();
        const Status st = dense_gemv_launch(a, nullptr);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        CUDA_OK(cudaDeviceSynchronize());
        const std::vector<float> got = c.out_f32 ? d_yf.download() : from_bf16(d_yb.download());
        const ErrStats e = compare(got, ref);
        EXPECT_EQ(e.nan_mismatch, 0);
        EXPECT_LT(e.rel_l2, c.out_f32 ? 1e-4 : 5e-3) << "T " << c.T << " N " << c.N << " K " << c.K;
    }
}

TEST(PerfDenseGemv, Fp8AllVariants) {
    DSV4_REQUIRE_GPU();
    run_gemv({WeightFormat::kFp8Block, 1, 512, 1024, 1, true}, 1);
    run_gemv({WeightFormat::kFp8Block, 3, 256, 2048, 1, false}, 2);
    run_gemv({WeightFormat::kFp8Block, 13, 384, 512, 1, true}, 3);
    run_gemv({WeightFormat::kFp8Block, 5, 128, 1024, 4, true}, 4);  // grouped (wo_a form)
}

TEST(PerfDenseGemv, Bf16AllVariants) {
    DSV4_REQUIRE_GPU();
    run_gemv({WeightFormat::kBf16, 1, 256, 1024, 1, true}, 5);
    run_gemv({WeightFormat::kBf16, 9, 512, 768, 1, false}, 6);
    run_gemv({WeightFormat::kBf16, 2, 128, 512, 2, true}, 7);
}

}  // namespace
}  // namespace dsv4::cuda::test
