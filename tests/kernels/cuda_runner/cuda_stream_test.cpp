// The bandwidth-ceiling kernels of the benchmarks (kernels/cuda/gemm/stream_copy.h): the copy
// moves every byte, the read reduction's partial XORs combine to the XOR of the whole buffer
// (so its loads are real and cover every word once), at sizes that leave ragged tails for the
// grid-stride loops and with fewer CTAs than the benchmark uses.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/gemm/stream_copy.h"
#include "tests/kernels/cuda_runner/cuda_test_util.h"

namespace dsv4 {
namespace {

std::vector<uint32_t> random_words(size_t n, uint32_t seed) {
    std::mt19937 g(seed);
    std::vector<uint32_t> v(n);
    for (auto& w : v) w = g();
    return v;
}

TEST(CudaStream, CopyMovesEveryByte) {
    SKIP_WITHOUT_GPU();
    for (size_t words : {size_t(4), size_t(4 * 1000 + 4), size_t(4) << 20}) {
        const auto src = random_words(words, uint32_t(words));
        uint32_t* s = dev(src);
        uint32_t* d = dev(std::vector<uint32_t>(words, 0));
        ASSERT_EQ(cuda::stream_copy(d, s, words * 4, nullptr), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(host(d, words), src) << words << " words";
        cudaFree(s);
        cudaFree(d);
    }
}

TEST(CudaStream, ReadXorCoversEveryWordOnce) {
    SKIP_WITHOUT_GPU();
    for (int ctas : {1, 7, 528}) {
        for (size_t words : {size_t(4), size_t(4 * 1000 + 4), size_t(4) << 20}) {
            const auto src = random_words(words, uint32_t(words) + 1);
            uint32_t want[4] = {0, 0, 0, 0};
            for (size_t i = 0; i < words; ++i) want[i % 4] ^= src[i];
            uint32_t* s = dev(src);
            uint32_t* part = dev(std::vector<uint32_t>(size_t(ctas) * 4, 0xdeadbeefu));
            ASSERT_EQ(cuda::stream_read_xor(s, words * 4, part, ctas, nullptr), cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            const auto got = host(part, size_t(ctas) * 4);
            uint32_t x[4] = {0, 0, 0, 0};
            for (size_t i = 0; i < got.size(); ++i) x[i % 4] ^= got[i];
            for (int k = 0; k < 4; ++k) EXPECT_EQ(x[k], want[k]) << ctas << " CTAs, " << words << " words, lane " << k;
            cudaFree(s);
            cudaFree(part);
        }
    }
    EXPECT_EQ(cuda::stream_read_xor(nullptr, 0, nullptr, 0, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace dsv4
