// make_kernel_edges_programmatic (runtime/cuda_graph_pdl.h) on a hand-built graph: which edges become
// programmatic (kernel to a dsv4 kernel with one incoming edge; cluster launches only when asked) and
// which stay ordinary (from or to a memset node, into a join, into a kernel outside dsv4), checked edge
// by edge; then the rewritten graph runs and gives the same values as the eager launches.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "runtime/cuda_graph_pdl.h"
#include "runtime/cuda_runner.h"
#include "tests/kernels/cuda_runner/cuda_graph_pdl_test_kernels.h"

namespace dsv4::test_pdl {
namespace {

// A node's label: the kernel's name from "pdl_graph_" on ("k3", "foreign", ...), or "memset".
std::string label(cudaGraphNode_t n) {
    cudaGraphNodeType t{};
    if (cudaGraphNodeGetType(n, &t) != cudaSuccess) return "?";
    if (t == cudaGraphNodeTypeMemset) return "memset";
    if (t != cudaGraphNodeTypeKernel) return "other";
    cudaKernelNodeParams p{};
    const char* name = nullptr;
    if (cudaGraphKernelNodeGetParams(n, &p) != cudaSuccess || cudaFuncGetName(&name, p.func) != cudaSuccess) return "?";
    const char* at = std::strstr(name, "pdl_graph_");
    if (at == nullptr) return name;
    std::string s = at + std::strlen("pdl_graph_");
    return s.substr(0, s.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_"));
}

// Every edge of g as "from->to" mapped to whether it is programmatic.
std::map<std::string, bool> edge_kinds(cudaGraph_t g) {
    size_t n = 0;
    EXPECT_EQ(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n), cudaSuccess);
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    EXPECT_EQ(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n), cudaSuccess);
    std::map<std::string, bool> out;
    for (size_t i = 0; i < n; ++i)
        out[label(from[i]) + "->" + label(to[i])] = data[i].type == cudaGraphDependencyTypeProgrammatic;
    return out;
}

std::vector<float> run_eager(cudaStream_t s1, cudaStream_t s2, cudaEvent_t fork, cudaEvent_t join, const Buffers& b,
                             const std::vector<float>& x0) {
    EXPECT_EQ(cudaMemcpyAsync(b.x, x0.data(), sizeof(float) * kN, cudaMemcpyHostToDevice, s1), cudaSuccess);
    EXPECT_EQ(launch_all(s1, s2, fork, join, b), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> out(kN);
    EXPECT_EQ(cudaMemcpy(out.data(), b.x, sizeof(float) * kN, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
}

TEST(CudaGraphPdl, RewritesExactlyTheEligibleEdges) {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    Buffers b;
    ASSERT_EQ(cudaMalloc(&b.x, sizeof(float) * kN), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b.y, sizeof(float) * kN), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b.z, sizeof(float) * kN), cudaSuccess);
    cudaStream_t s1{}, s2{};
    cudaEvent_t fork{}, join{};
    ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
    std::vector<float> x0(kN);
    for (int i = 0; i < kN; ++i) x0[i] = float(i % 1013) * 0.01f - 3.0f;
    const std::vector<float> want = run_eager(s1, s2, fork, join, b, x0);

    for (const bool clusters : {false, true}) {
        cudaGraph_t g = nullptr;
        ASSERT_EQ(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        const cudaError_t launched = launch_all(s1, s2, fork, join, b);
        ASSERT_EQ(cudaStreamEndCapture(s1, &g), cudaSuccess);
        ASSERT_EQ(launched, cudaSuccess);
        const auto before = edge_kinds(g);
        auto rewritten = cuda_runner_detail::make_kernel_edges_programmatic(g, clusters);
        ASSERT_TRUE(rewritten.is_ok()) << rewritten.status().message();
        const auto after = edge_kinds(g);

        // Programmatic: kernel -> dsv4 kernel with that single incoming edge (a non-dsv4 kernel may
        // be the upstream one); cluster launches only with `clusters`.
        std::map<std::string, bool> expect = {
            {"k1->memset", false},
            {"memset->k2", false},
            {"k2->k3", true},
            {"k3->k4", true},
            {"k3->k5", false},
            {"k4->k5", false},
            {"k5->foreign", false},
            {"foreign->k6", true},
            {"k6->k7_cluster", clusters},
            {"k7_cluster->k8", clusters},
        };
        EXPECT_EQ(before.size(), expect.size());
        for (const auto& [edge, programmatic] : before)
            EXPECT_FALSE(programmatic) << "captured as programmatic: " << edge;
        EXPECT_EQ(after.size(), expect.size());
        for (const auto& [edge, programmatic] : expect) {
            auto it = after.find(edge);
            ASSERT_NE(it, after.end()) << "edge missing after the rewrite: " << edge;
            EXPECT_EQ(it->second, programmatic) << edge << (clusters ? " (clusters)" : "");
        }
        EXPECT_EQ(*rewritten, clusters ? 5 : 3);

        cudaGraphExec_t ge = nullptr;
        ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
        cudaGraphDestroy(g);
        for (int rep = 0; rep < 5; ++rep) {
            // On s1: a plain cudaMemcpy from pageable memory may return before its DMA lands, and would
            // race with the graph on this non-blocking stream.
            ASSERT_EQ(cudaMemcpyAsync(b.x, x0.data(), sizeof(float) * kN, cudaMemcpyHostToDevice, s1), cudaSuccess);
            ASSERT_EQ(cudaGraphLaunch(ge, s1), cudaSuccess);
            ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
            std::vector<float> got(kN);
            ASSERT_EQ(cudaMemcpy(got.data(), b.x, sizeof(float) * kN, cudaMemcpyDeviceToHost), cudaSuccess);
            int differ = 0;
            for (int i = 0; i < kN; ++i) differ += got[i] != want[i];
            EXPECT_EQ(differ, 0) << "clusters=" << clusters << " rep " << rep;
        }
        cudaGraphExecDestroy(ge);
    }
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaFree(b.x);
    cudaFree(b.y);
    cudaFree(b.z);
}

}  // namespace
}  // namespace dsv4::test_pdl
