// Sparse attention with a sink (spec §2.4; bf16 and 584-byte FP8 rows) against the fp64 reference
// (ref::sink_attention_f64): every variant of sparse_decode's table (split-KV, forced and planned
// splits) and the wgmma prefill kernel as one more row, through check_variants, over a table of edge
// shapes: batch 1, row counts that are not multiples of the tile, zero-row sequences (exact zeros),
// long lists, a -inf sink, scattered and repeated pool offsets, scores that rise after the first tile.
#include <algorithm>
#include <numeric>

#include "kernels/cuda/attention/sparse_decode.h"
#include "kernels/cuda/attention/sparse_decode_check.h"
#include "kernels/cuda/attention/sparse_prefill.h"
#include "kernels/ref/fp64.h"
#include "tests/kernels/cuda_runner/op_test_util.h"

namespace dsv4::cuda::test {
namespace {

constexpr int kH = 64, kD = 512;

struct Pool {
    std::vector<std::vector<float>> rows;  // decoded row values (what attention sees)
    std::vector<uint8_t> bytes;            // device image of the pool
};

// Stores v as pool row r (pool rows of KvFormat f): bf16, or FP8 quantised per 64 nope dims with a
// UE8M0 scale and RoPE dims bf16; p.rows[r] gets the decoded values (what attention sees).
void write_row(Pool& p, int r, std::vector<float> v, KvFormat f) {
    const size_t rb = f == KvFormat::kBf16 ? kD * 2 : kKvFp8RowBytes;
    uint8_t* dst = p.bytes.data() + rb * r;
    if (f == KvFormat::kBf16) {
        for (int i = 0; i < kD; ++i) {
            const uint16_t b = f32_to_bf16(v[i]);
            std::memcpy(dst + 2 * i, &b, 2);
            v[i] = round_bf16(v[i]);
        }
    } else {
        for (int blk = 0; blk < 7; ++blk) {
            float amax = 0;
            for (int i = 0; i < 64; ++i) amax = std::max(amax, std::abs(v[blk * 64 + i]));
            const uint8_t s = ue8m0_ceil(amax > 0 ? amax / 448.0f : 1.0f);
            dst[576 + blk] = s;
            const float sc = ue8m0_to_f32(s);
            for (int i = 0; i < 64; ++i) {
                const uint8_t c = f32_to_fp8e4m3(v[blk * 64 + i] / sc);
                dst[blk * 64 + i] = c;
                v[blk * 64 + i] = fp8e4m3_to_f32(c) * sc;
            }
        }
        for (int i = 448; i < kD; ++i) {
            const uint16_t b = f32_to_bf16(v[i]);
            std::memcpy(dst + 448 + 2 * (i - 448), &b, 2);
            v[i] = round_bf16(v[i]);
        }
    }
    p.rows[size_t(r)] = std::move(v);
}

// n_rows random rows (write_row).
Pool make_pool(std::mt19937& g, int n_rows, KvFormat f) {
    Pool p;
    p.bytes.assign((f == KvFormat::kBf16 ? kD * 2 : kKvFp8RowBytes) * size_t(n_rows), 0);
    p.rows.resize(size_t(n_rows));
    for (int r = 0; r < n_rows; ++r) write_row(p, r, randn_bf16(g, kD), f);
    return p;
}

// One case of the table. rising: each list of >= 300 rows gets two planted rows, alpha x (the sum of
// its 64 heads' q), alpha 0.5 at list position 140 (third tile) and 1.0 at its last position: every
// head's score jumps far past its running maximum twice after the first tile, so the online softmax
// must rescale O and l there (sparse_prefill's lazy maximum moves only on jumps above 2^8). Outputs
// then reach ~10: the absolute bound scales with them.
struct AttnCase {
    const char* name;
    KvFormat fmt;
    std::vector<int> n_rows;  // rows per sequence
    int forced_splits = 0;    // 0: planned by the launch
    uint32_t seed = 0;
    bool neg_inf_sink = false;
    bool rising = false;
};

// The op's variant table with the prefill kernel as its last row (FP8 rows, 64 heads, no split).
int prefill_row() { return sparse_decode_variant_count(); }
std::string attn_variant_name(int v) { return v == prefill_row() ? "sparse_prefill" : sparse_decode_variant_name(v); }

void run_case(const AttnCase& c) {
    const KvFormat fmt = c.fmt;
    const std::vector<int>& n_rows = c.n_rows;
    std::mt19937 g(c.seed);
    const int B = int(n_rows.size());
    const int pool_rows = 3000;
    Pool pool = make_pool(g, pool_rows, fmt);
    std::vector<std::vector<int>> lists(B);
    std::vector<int32_t> start{0};
    std::vector<int64_t> offs;
    const int64_t elems = fmt == KvFormat::kBf16 ? kD : kKvFp8RowBytes;
    std::uniform_int_distribution<int> pick(0, pool_rows - 1);
    int max_rows = 0;
    for (int b = 0; b < B; ++b) {
        for (int i = 0; i < n_rows[b]; ++i) {
            const int r = pick(g);  // scattered, possibly repeated rows
            lists[b].push_back(r);
            offs.push_back(int64_t(r) * elems);
        }
        start.push_back(int32_t(offs.size()));
        max_rows = std::max(max_rows, n_rows[b]);
    }
    std::vector<float> q = randn_bf16(g, size_t(B) * kH * kD, 2.0f);
    if (c.rising) {
        for (int b = 0; b < B; ++b) {
            if (n_rows[b] < 300) continue;
            std::vector<float> qsum(kD, 0.0f);
            for (int h = 0; h < kH; ++h)
                for (int i = 0; i < kD; ++i) qsum[size_t(i)] += q[(size_t(b) * kH + h) * kD + i];
            const int slots[2] = {140, n_rows[b] - 1};
            const float alpha[2] = {0.5f, 1.0f};
            for (int k = 0; k < 2; ++k) {
                const int r = pool_rows - 1 - 2 * b - k;  // a row of its own, planted into the list
                std::vector<float> v(qsum);
                for (float& x : v) x *= alpha[k];
                write_row(pool, r, v, fmt);
                lists[b][size_t(slots[k])] = r;
                offs[size_t(start[b] + slots[k])] = int64_t(r) * elems;
            }
        }
    }
    std::vector<float> sink = randn_bf16(g, kH);
    if (c.neg_inf_sink) std::fill(sink.begin(), sink.end(), -INFINITY);
    const float scale = 1.0f / std::sqrt(float(kD));

    OpCase op;
    op.ref.assign(size_t(B) * kH * kD, 0.0);
    for (int b = 0; b < B; ++b) {
        std::vector<const float*> rows;
        for (int r : lists[b]) rows.push_back(pool.rows[size_t(r)].data());
        for (int h = 0; h < kH; ++h)
            ref::sink_attention_f64(q.data() + (size_t(b) * kH + h) * kD, kD, rows.data(), int64_t(rows.size()),
                                    sink[size_t(h)], scale, op.ref.data() + (size_t(b) * kH + h) * kD);
    }
    op.tol = {1e-2, c.rising ? 3e-1 : 3e-2};

    DevBuf<uint8_t> d_pool(pool.bytes);
    DevBuf<uint16_t> d_q(to_bf16(q));
    DevBuf<int64_t> d_offs(offs.empty() ? std::vector<int64_t>{0} : offs);
    DevBuf<int32_t> d_start(start);
    DevBuf<float> d_sink(sink);
    DevBuf<uint16_t> d_out(size_t(B) * kH * kD);
    // Room for the most splits any launch plans (64) or is forced to.
    DevBuf<float> ws(sparse_decode_workspace_floats(B, kH, std::max(64, c.forced_splits)));
    SparseDecodeArgs a;
    a.q = d_q.p;
    a.kv_pool = d_pool.p;
    a.row_offsets = d_offs.p;
    a.row_start = d_start.p;
    a.sink = d_sink.p;
    a.out = d_out.p;
    a.workspace = ws.p;
    a.format = fmt;
    a.batch = B;
    a.n_heads = kH;
    a.max_rows = max_rows;
    a.scale = scale;
    a.n_splits = c.forced_splits;
    VariantTable table{sparse_decode_variant_count() + 1, attn_variant_name, [&](int v) {
                           if (v == prefill_row()) return c.forced_splits == 0 && *sparse_prefill_decline(a) == 0;
                           return sparse_decode_variant_legal(v, fmt, kH);
                       }};
    op.poison = [&] {
        d_out.poison();
        ws.poison();
    };
    op.run = [&](int v) {
        SparseDecodeArgs b = a;
        if (v == prefill_row()) {
            b.variant = -1;
            const cudaError_t e = sparse_prefill_run(b, nullptr);
            return e == cudaSuccess ? Status::ok() : Status(StatusCode::kInternal, cudaGetErrorString(e));
        }
        b.variant = v;
        return sparse_decode_launch(b, nullptr);
    };
    op.read = [&] { return from_bf16(d_out.download()); };
    // The prefill kernel must take every FP8 case without a forced split (the runner falls back quietly
    // when it declines, so a wrong decline would otherwise only drop this kernel's check).
    const bool prefill_expected = fmt == KvFormat::kFp8 && c.forced_splits == 0;
    if (prefill_expected) {
        EXPECT_STREQ(sparse_prefill_decline(a), "");
    }
    bool prefill_ran = false;
    // Zero-row sequences give exact zeros (B03).
    op.check = [&](int v, const std::vector<float>& out) {
        prefill_ran = prefill_ran || v == prefill_row();
        for (int b = 0; b < B; ++b) {
            if (n_rows[b] != 0) continue;
            for (int i = 0; i < kH * kD; ++i) ASSERT_EQ(out[size_t(b) * kH * kD + i], 0.0f) << "b " << b;
        }
    };
    EXPECT_GT(check_variants(table, op), 0) << "no variant takes the case";
    EXPECT_EQ(prefill_ran, prefill_expected) << "sparse_prefill's row";
}

class OpSparseAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(OpSparseAttention, EveryVariantMatchesFp64) {
    SKIP_WITHOUT_GPU();
    run_case(GetParam());
}

constexpr KvFormat kBf = KvFormat::kBf16, kF8 = KvFormat::kFp8;
// {name, format, rows per sequence, forced splits, seed, -inf sink, rising}
const AttnCase kAttnCases[] = {
    {"bf16_batch1", kBf, {200}, 0, 1},
    {"bf16_one_split_fused_finalise", kBf, {0, 77, 640, 1, 33}, 1, 2},
    {"bf16_forced_splits_some_empty", kBf, {0, 77, 640, 1, 33}, 4, 3},
    {"bf16_planned_ragged", kBf, {129, 0, 7}, 0, 4},
    {"bf16_neg_inf_sink", kBf, {0, 40}, 2, 11, true},
    {"fp8_batch1", kF8, {200}, 0, 1},
    {"fp8_one_split_fused_finalise", kF8, {0, 77, 640, 1, 33}, 1, 2},
    {"fp8_forced_splits_some_empty", kF8, {0, 77, 640, 1, 33}, 4, 3},
    {"fp8_planned_ragged", kF8, {129, 0, 7}, 0, 4},
    {"fp8_neg_inf_sink", kF8, {0, 40}, 1, 12, true},
    {"fp8_one_row", kF8, {1}, 0, 31},
    {"fp8_rows_off_the_tile", kF8, {64, 65, 0, 127, 3, 640, 129, 1, 200, 63}, 0, 32},
    {"fp8_long_lists_neg_inf_sink", kF8, {700, 5, 0, 1300}, 0, 33, true},
    {"fp8_rising_scores", kF8, {640, 300, 7, 1000}, 0, 34, false, true},
    {"fp8_rising_scores_one_split", kF8, {640, 300, 7, 1000}, 1, 35, false, true},
};
INSTANTIATE_TEST_SUITE_P(Shapes, OpSparseAttention, ::testing::ValuesIn(kAttnCases),
                         [](const ::testing::TestParamInfo<AttnCase>& i) { return std::string(i.param.name); });

TEST(OpSparseAttention, PlanSplits) {
    EXPECT_EQ(sparse_decode_plan_splits(1, 1, 640, 32, 264), 16);   // capped by 640/32 = 20 -> 16
    EXPECT_EQ(sparse_decode_plan_splits(1, 1, 8000, 32, 264), 64);  // capped at 64
    EXPECT_EQ(sparse_decode_plan_splits(64, 1, 640, 32, 264), 4);
    EXPECT_EQ(sparse_decode_plan_splits(256, 1, 640, 32, 264), 1);
    EXPECT_EQ(sparse_decode_plan_splits(8, 2, 136, 32, 528), 4);  // 5 tiles -> 4
    EXPECT_EQ(sparse_decode_plan_splits(4, 1, 0, 32, 264), 1);
}

// The check `dsv4 tune` runs before timing a sparse_decode choice (sparse_decode_check.h): the seed
// experiment's split-KV targets at batch 8 and 64 (8 to 1 and 4 splits), 640 rows (8K context), pass
// within the op tests' bounds, and a target that changes the split count changes it in the report.
TEST(OpSparseAttention, TunerCheckPassesForTheSeedExperimentsTargets) {
    SKIP_WITHOUT_GPU();
    for (int batch : {8, 64})
        for (int target : {0, 128, 256, 512}) {
            auto c = check_sparse_decode(KvFormat::kFp8, kH, batch, 640, -1, target, 3);
            ASSERT_TRUE(c.is_ok()) << c.status().to_string();
            EXPECT_LE(c->error(), 1.0) << "batch " << batch << " target " << target << ": rel L2 " << c->rel_l2
                                       << " max abs " << c->max_abs;
            EXPECT_GT(c->rel_l2, 0.0);  // bf16 output: never bitwise the fp64 value
            if (target > 0) {
                EXPECT_EQ(c->splits, sparse_decode_plan_splits(batch, 2, 640, 32, target));
            }
        }
    EXPECT_FALSE(check_sparse_decode(KvFormat::kFp8, kH, 0, 640, -1, 0, 3).is_ok());
}

// The prefill kernel's fast FP8 dequantisation equals the float form bit for bit (every code but NaN,
// every scale byte it takes); larger scale bytes take the float form inside the kernel.
TEST(OpSparseAttention, FastDequantEqualsFloatForm) {
    SKIP_WITHOUT_GPU();
    EXPECT_EQ(sparse_prefill_dequant_mismatches(), 0);
}

// The prefill kernel declines bf16 rows and head counts off 64 (its fp64 checks are rows of the table above).
TEST(OpSparseAttention, PrefillKernelDeclines) {
    SparseDecodeArgs a;
    a.format = KvFormat::kBf16;
    EXPECT_STRNE(sparse_prefill_decline(a), "");
    a.format = KvFormat::kFp8;
    a.n_heads = 96;
    EXPECT_STRNE(sparse_prefill_decline(a), "");
}

}  // namespace
}  // namespace dsv4::cuda::test
