// Helpers of the CUDA runner tests: sequences driven through a ModelRunner. The device helpers every
// CUDA test shares (GPU skip, copies, metrics, the variant harness) are in op_test_util.h.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/cuda_runner.h"
#include "tests/kernels/cuda_runner/op_test_util.h"

namespace dsv4 {

// One sequence driven through a runner in the end-to-end tests: its id, page table and next position.
struct RunnerSeq {
    int64_t id = 1;
    std::vector<int32_t> table;
    int64_t pos = 0;
};

// One forward step of the sequences, chunks[i] the tokens of seqs[i] (each advanced by its chunk);
// logits as ModelRunner::forward returns them. A failing forward fails the test.
inline std::vector<std::vector<float>> run_seqs(ModelRunner& r, std::vector<RunnerSeq*> seqs,
                                                const std::vector<std::vector<int32_t>>& chunks) {
    ForwardBatch b;
    for (size_t i = 0; i < seqs.size(); ++i)
        b.seqs.push_back(SeqChunk{seqs[i]->id, chunks[i], seqs[i]->pos, true, seqs[i]->table});
    std::vector<std::vector<float>> out;
    Status s = r.forward(b, out);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->pos += int64_t(chunks[i].size());
    return out;
}

// Page table for n_tokens: page ids from first_id going down by stride (scattered or large ids).
inline std::vector<int32_t> page_table_for(const ModelRunner& r, int64_t n_tokens, int64_t first_id, int64_t stride) {
    std::vector<int32_t> t;
    const int64_t n = r.kv_layout().pages_for_tokens(n_tokens);
    for (int64_t i = 0; i < n; ++i) t.push_back(int32_t(first_id - i * stride));
    return t;
}

}  // namespace dsv4
