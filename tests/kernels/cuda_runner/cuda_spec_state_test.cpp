// Speculative decoding's verify-chunk backup and rollback on the device (cuda::spec_backup /
// spec_rollback, kernels/cuda/ops/spec_state.cu) against the CPU runner's spec_backup / spec_rollback
// (model/spec_state.h) on the same state: three sequences with scattered pages, verify chunks placed
// so that their positions close compressor windows (ratio 4: overlapping, ratio 16) and wrap the
// 32-row ring, every accept count; f32 and fp8 rows. After the backup the states must be equal bit for
// bit; then every row before the speculative area is overwritten (what the chunk and more would
// write) identically on both sides, and after the rollback they must be equal again, and differ from
// the overwritten state wherever a position was rejected. A fourth sequence with no chunk is untouched.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/ops/ops.h"
#include "model/kv_layout.h"
#include "model/spec_state.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"
#include "tests/kernels/cuda_runner/small512_config.h"

namespace dsv4 {
namespace {

struct Case {
    int64_t start, n, accepted;  // verify chunk [start, start + n), positions < start + accepted kept
};

void run_cases(KvRowFormat rows, const std::vector<Case>& cases) {
    const ModelConfig cfg = small512_config();
    const int k = 3;
    auto made = KvLayout::make(cfg, 16, 4, rows, 0, k);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    const KvLayout& L = *made;
    const int B = int(cases.size()) + 1;  // the last sequence has no chunk
    const int64_t token_pages = L.pages_for_tokens(200) - L.n_state_pages;
    const int64_t per_seq = L.n_state_pages + token_pages, n_pages = B * per_seq + 5;
    // Pages scattered: sequence s owns pages n_pages - 1 - (s + B * i).
    std::vector<int32_t> table(size_t(B) * size_t(per_seq));
    for (int s = 0; s < B; ++s)
        for (int64_t i = 0; i < per_seq; ++i) table[size_t(s * per_seq + i)] = int32_t(n_pages - 1 - (s + B * i));
    std::mt19937 g(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> pool(size_t(n_pages * L.page_elems));
    for (float& v : pool) v = u(g);
    auto state_of = [&](const std::vector<float>& p, int s) {
        std::vector<float> st(size_t(L.state_elems));
        for (int64_t e = 0; e < L.state_elems; ++e)
            st[size_t(e)] = p[size_t(table[size_t(s * per_seq + e / L.page_elems)]) * L.page_elems + e % L.page_elems];
        return st;
    };
    auto put_state = [&](std::vector<float>& p, int s, const std::vector<float>& st) {
        for (int64_t e = 0; e < L.state_elems; ++e)
            p[size_t(table[size_t(s * per_seq + e / L.page_elems)]) * L.page_elems + e % L.page_elems] = st[size_t(e)];
    };
    // Headers: no verify chunk yet; pending positions [start - 1, start) (a decode step's last position).
    for (int s = 0; s < B - 1; ++s) {
        std::vector<float> st = state_of(pool, s);
        SpecHeader h;
        h.pending_start = int32_t(cases[size_t(s)].start - 1);
        h.pending_len = 1;
        set_spec_header(L, st.data(), h);
        put_state(pool, s, st);
    }
    std::vector<std::vector<float>> cpu(static_cast<size_t>(B));
    for (int s = 0; s < B; ++s) cpu[size_t(s)] = state_of(pool, s);

    const std::vector<SpecRegion> regions = spec_regions(L);
    ASSERT_FALSE(regions.empty());
    float* d_pool = dev(pool);
    int32_t* d_table = dev(table);
    SpecRegion* d_regions = dev(regions);
    cuda::PagePool pp;
    pp.base = d_pool;
    pp.page_elems = L.page_elems;
    pp.n_state_pages = L.n_state_pages;
    pp.page_tokens = L.page_tokens;
    cuda::SpecStateArgs a;
    a.regions = d_regions;
    a.n_regions = int(regions.size());
    a.spec_tokens = k;
    a.header_offset = L.spec.header_offset;
    auto plan_for = [&](const std::vector<int64_t>& start, const std::vector<int32_t>& n_tok, int32_t** keep) {
        int32_t* d_n = dev(n_tok);
        int64_t* d_start = dev(start);
        keep[0] = d_n;
        keep[1] = reinterpret_cast<int32_t*>(d_start);
        cuda::StepPlan p;
        p.n_seqs = B;
        p.n_tok = d_n;
        p.start_pos = d_start;
        p.page_table = d_table;
        p.pt_stride = int32_t(per_seq);
        return p;
    };
    // Backup.
    std::vector<int64_t> start(static_cast<size_t>(B), 0), from(static_cast<size_t>(B), 0);
    std::vector<int32_t> n_tok(static_cast<size_t>(B), 0);
    for (int s = 0; s < B - 1; ++s) {
        start[size_t(s)] = cases[size_t(s)].start;
        n_tok[size_t(s)] = int32_t(cases[size_t(s)].n);
        from[size_t(s)] = cases[size_t(s)].start + cases[size_t(s)].accepted;
        spec_backup(L, cpu[size_t(s)].data(), cases[size_t(s)].start, cases[size_t(s)].n);
    }
    int32_t* keep[2];
    ASSERT_EQ(cuda::spec_backup(plan_for(start, n_tok, keep), pp, a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> after = host(d_pool, pool.size());
    for (int s = 0; s < B; ++s) EXPECT_EQ(state_of(after, s), cpu[size_t(s)]) << "after the backup, sequence " << s;
    // Everything before the speculative area overwritten, identically on both sides.
    const int64_t spec_area = L.layers[0].ring_backup_offset;
    ASSERT_GT(spec_area, 0);
    std::vector<std::vector<float>> overwritten(static_cast<size_t>(B));
    for (int s = 0; s < B - 1; ++s) {
        std::vector<float> st = state_of(after, s);
        for (int64_t e = 0; e < spec_area; ++e) st[size_t(e)] = u(g);
        put_state(after, s, st);
        cpu[size_t(s)] = st;
        overwritten[size_t(s)] = st;
    }
    ASSERT_EQ(cudaMemcpy(d_pool, after.data(), after.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    // Rollback from the first rejected position.
    for (int s = 0; s < B - 1; ++s) ASSERT_TRUE(spec_rollback(L, cpu[size_t(s)].data(), from[size_t(s)]).is_ok());
    int32_t* keep2[2];
    ASSERT_EQ(cuda::spec_rollback(plan_for(from, n_tok, keep2), pp, a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> rolled = host(d_pool, pool.size());
    for (int s = 0; s < B; ++s) {
        EXPECT_EQ(state_of(rolled, s), cpu[size_t(s)]) << "after the rollback, sequence " << s;
        if (s < B - 1) {
            const SpecHeader h = spec_header(L, cpu[size_t(s)].data());
            EXPECT_EQ(h.verify_len, 0);
            const bool rejected = cases[size_t(s)].accepted < cases[size_t(s)].n;
            const std::vector<float> got = state_of(rolled, s);
            const bool restored = !std::equal(got.begin(), got.begin() + spec_area, overwritten[size_t(s)].begin());
            EXPECT_EQ(restored, rejected) << "sequence " << s;
        }
    }
    EXPECT_EQ(state_of(rolled, B - 1), state_of(pool, B - 1));  // no chunk: untouched throughout
    for (void* p : {(void*)d_pool, (void*)d_table, (void*)d_regions, (void*)keep[0], (void*)keep[1], (void*)keep2[0],
                    (void*)keep2[1]})
        cudaFree(p);
}

TEST(CudaSpecState, BackupAndRollbackEqualTheCpuRunners) {
    SKIP_WITHOUT_GPU();
    // Starts around the ratio-4 and ratio-16 window closes and the 32-row ring's wrap; every accept count.
    std::vector<Case> cases;
    for (int64_t start : {6, 13, 30, 45, 63, 64, 97})
        for (int64_t n : {2, 4})
            for (int64_t acc = 0; acc <= n; ++acc) cases.push_back({start, n, acc});
    for (KvRowFormat rows : {KvRowFormat::kF32, KvRowFormat::kFp8}) {
        // Eight sequences per run: each case in some run, the last sequence without a chunk.
        for (size_t i = 0; i < cases.size(); i += 7) {
            std::vector<Case> part(cases.begin() + int64_t(i), cases.begin() + int64_t(std::min(cases.size(), i + 7)));
            run_cases(rows, part);
        }
    }
}

}  // namespace
}  // namespace dsv4
