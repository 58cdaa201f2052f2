// Helpers shared by the CUDA runner/op tests: skip without a GPU, host <-> device copies.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/cuda_runner.h"

// Skips the current test (GTEST_SKIP) when no usable CUDA device is present.
#define SKIP_WITHOUT_GPU() \
    if (!::dsv4::cuda_device_available()) GTEST_SKIP() << "no CUDA device"

namespace dsv4 {

// Device copy of v (at least one element allocated); the caller frees it with cudaFree.
template <class T>
T* dev(const std::vector<T>& v) {
    T* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, sizeof(T) * std::max<size_t>(v.size(), 1)), cudaSuccess);
    if (!v.empty()) {
        EXPECT_EQ(cudaMemcpy(p, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    return p;
}

// Host copy of n elements at device pointer p.
template <class T>
std::vector<T> host(const T* p, size_t n) {
    std::vector<T> v(n);
    if (n) {
        EXPECT_EQ(cudaMemcpy(v.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return v;
}

// n token ids in [0, vocab) from mt19937(seed).
inline std::vector<int32_t> test_token_ids(int n, int64_t vocab, uint32_t seed) {
    std::mt19937 g(seed);
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = int32_t(g() % uint32_t(vocab));
    return v;
}

// Largest |a[i] - b[i]| (expects equal sizes).
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
    return m;
}

// Index of the first largest element.
inline size_t argmax_index(const std::vector<float>& v) {
    return size_t(std::max_element(v.begin(), v.end()) - v.begin());
}
// The same as a token id.
inline int32_t argmax_i32(const std::vector<float>& v) { return int32_t(argmax_index(v)); }

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
