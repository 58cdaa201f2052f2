// The small row ops around decode attention and expert parallelism, each against a host statement of
// its contract (issue 25 item 2: the ops that had no test of their own):
// - q_rows_bf16: sequence s's token t of q (f32) rounded to bf16, zeros where s has no token t;
// - attn_out_rows: the bf16 attention output back to f32 with the inverse RoPE of the token's position
//   (the CPU reference's apply_rope), only for sequences with a token t;
// - moe_ep_localize: global expert ids to local ones, other ranks' experts to `drop` with their rows zeroed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/ops/ops.h"
#include "kernels/cuda/ops/simt.h"
#include "kernels/ref/ops.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"

namespace dsv4 {
namespace {

// A step plan of B sequences with the given token counts (tokens packed in order) and start positions.
struct PlanOnDevice {
    std::vector<int32_t> tok_begin, n_tok;
    std::vector<int64_t> start_pos;
    int32_t *d_begin = nullptr, *d_n = nullptr;
    int64_t* d_start = nullptr;
    int T = 0;
    PlanOnDevice(const std::vector<int32_t>& counts, const std::vector<int64_t>& starts)
        : n_tok(counts), start_pos(starts) {
        for (int32_t c : counts) {
            tok_begin.push_back(T);
            T += c;
        }
        d_begin = dev(tok_begin);
        d_n = dev(n_tok);
        d_start = dev(start_pos);
    }
    ~PlanOnDevice() {
        cudaFree(d_begin);
        cudaFree(d_n);
        cudaFree(d_start);
    }
    cuda::StepPlan plan() const {
        cuda::StepPlan p;
        p.n_seqs = int32_t(n_tok.size());
        p.tok_begin = d_begin;
        p.n_tok = d_n;
        p.start_pos = d_start;
        p.page_table = nullptr;
        p.tokens = nullptr;
        p.pos = nullptr;
        return p;
    }
};

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(g);
    return v;
}

TEST(CudaOps, QRowsBf16TakesTokenTOfEachSequence) {
    SKIP_WITHOUT_GPU();
    // hd not a multiple of the kernel's 8-element runs, over three of its 2,048-element CTAs; a padded
    // sequence (no tokens) and one with fewer tokens than t + 1.
    const int hd = 2 * 2048 + 44;
    const PlanOnDevice pl({3, 1, 0, 2}, {5, 9, 0, 40});
    const std::vector<float> q = random_floats(size_t(pl.T) * hd, 3, 2.0f);
    float* dq = dev(q);
    uint16_t* dqb = nullptr;
    ASSERT_EQ(cudaMalloc(&dqb, sizeof(uint16_t) * 4 * hd), cudaSuccess);
    for (int t = 0; t < 3; ++t) {
        ASSERT_EQ(cudaMemset(dqb, 0xff, sizeof(uint16_t) * 4 * hd), cudaSuccess);  // every element must be written
        ASSERT_EQ(cuda::q_rows_bf16(pl.plan(), t, dq, hd, dqb, nullptr), cudaSuccess);
        const std::vector<uint16_t> got = host(dqb, size_t(4) * hd);
        int wrong = 0;
        for (int s = 0; s < 4; ++s)
            for (int i = 0; i < hd; ++i) {
                const bool live = t < pl.n_tok[size_t(s)];
                const uint16_t want = live ? f32_to_bf16(q[size_t(pl.tok_begin[size_t(s)] + t) * hd + i]) : uint16_t(0);
                wrong += got[size_t(s) * hd + i] != want;
            }
        EXPECT_EQ(wrong, 0) << "t " << t;
    }
    cudaFree(dq);
    cudaFree(dqb);
}

TEST(CudaOps, AttnOutRowsInverseRopeAtEachTokensPosition) {
    SKIP_WITHOUT_GPU();
    const int H = 3, D = 64, R = 16;
    const ref::RopeTable rope = ref::make_rope_table(10000.0, R, false, 1.0, 4096.0, 32.0, 1.0);
    // Positions far enough out that the angles wrap many times.
    const PlanOnDevice pl({2, 1, 0}, {100000, 7, 0});
    const int B = 3;
    std::vector<uint16_t> ob(size_t(B) * H * D);
    const std::vector<float> vals = random_floats(ob.size(), 5, 1.0f);
    for (size_t i = 0; i < ob.size(); ++i) ob[i] = f32_to_bf16(vals[i]);
    uint16_t* dob = dev(ob);
    float* dfreq = dev(rope.inv_freq);
    const float kSentinel = 777.0f;
    for (int t = 0; t < 2; ++t) {
        std::vector<float> out(size_t(pl.T) * H * D, kSentinel);
        float* dout = dev(out);
        ASSERT_EQ(cuda::attn_out_rows(pl.plan(), t, dob, H, D, dfreq, R, dout, nullptr), cudaSuccess);
        const std::vector<float> got = host(dout, out.size());
        double worst = 0;
        int untouched_wrong = 0;
        for (int s = 0; s < B; ++s) {
            if (t >= pl.n_tok[size_t(s)]) continue;
            const int64_t tok = pl.tok_begin[size_t(s)] + t, p = pl.start_pos[size_t(s)] + t;
            for (int h = 0; h < H; ++h) {
                std::vector<float> want(static_cast<size_t>(D));
                for (int i = 0; i < D; ++i) want[size_t(i)] = bf16_to_f32(ob[(size_t(s) * H + h) * D + i]);
                ref::apply_rope(want.data(), D, rope, p, true);
                for (int i = 0; i < D; ++i)
                    worst = std::max(worst, double(std::fabs(got[(size_t(tok) * H + h) * D + i] - want[size_t(i)])));
            }
        }
        // Tokens whose sequence has no token t are not written.
        for (int s = 0; s < B; ++s)
            for (int i = 0; i < pl.n_tok[size_t(s)]; ++i) {
                if (i == t) continue;
                const size_t tok = size_t(pl.tok_begin[size_t(s)] + i);
                for (int e = 0; e < H * D; ++e) untouched_wrong += got[tok * H * D + e] != kSentinel;
            }
        // cosf / sinf on the GPU and in the C library agree to an ulp or two of the rotated values.
        EXPECT_LE(worst, 1e-5) << "t " << t;
        EXPECT_EQ(untouched_wrong, 0) << "t " << t;
        cudaFree(dout);
    }
    cudaFree(dob);
    cudaFree(dfreq);
}

TEST(CudaOps, MoeEpLocalizeKeepsLocalExpertsAndZeroesTheOthersRows) {
    SKIP_WITHOUT_GPU();
    const int first = 4, count = 4, drop = count, d = 37;
    const std::vector<int32_t> ids = {0, 4, 5, 7, 8, 15, 3, 6, 4, 11};
    const int n = int(ids.size());
    for (bool rows : {true, false}) {
        int32_t* did = dev(ids);
        std::vector<float> z(size_t(n) * d, 1.5f);
        float* dz = dev(z);
        ASSERT_EQ(cuda::moe_ep_localize(did, n, first, count, drop, rows ? dz : nullptr, d, nullptr), cudaSuccess);
        const std::vector<int32_t> got = host(did, size_t(n));
        const std::vector<float> gz = host(dz, z.size());
        for (int i = 0; i < n; ++i) {
            const bool local = ids[size_t(i)] >= first && ids[size_t(i)] < first + count;
            EXPECT_EQ(got[size_t(i)], local ? ids[size_t(i)] - first : drop) << "assignment " << i;
            const float want = rows && !local ? 0.0f : 1.5f;
            int wrong = 0;
            for (int c = 0; c < d; ++c) wrong += gz[size_t(i) * d + c] != want;
            EXPECT_EQ(wrong, 0) << "assignment " << i << (rows ? " (rows)" : " (no rows)");
        }
        cudaFree(did);
        cudaFree(dz);
    }
}

}  // namespace
}  // namespace dsv4
