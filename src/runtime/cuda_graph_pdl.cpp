#include "runtime/cuda_graph_pdl.h"

#include <cstring>
#include <unordered_map>
#include <vector>

#include "runtime/cuda_status.h"

namespace dsv4::cuda_runner_detail {
namespace {

bool is_kernel(cudaGraphNode_t n) {
    cudaGraphNodeType t{};
    if (cudaGraphNodeGetType(n, &t) != cudaSuccess) {
        cudaGetLastError();  // not sticky; the node is left as it is
        return false;
    }
    return t == cudaGraphNodeTypeKernel;
}

// A kernel of ours: only those are known to wait (pdl.cuh) before touching memory.
bool is_dsv4_kernel(cudaGraphNode_t n) {
    if (!is_kernel(n)) return false;
    cudaKernelNodeParams p{};
    if (cudaGraphKernelNodeGetParams(n, &p) != cudaSuccess || p.func == nullptr) {
        cudaGetLastError();  // a library kernel may not be readable through the runtime API: not ours
        return false;
    }
    const char* name = nullptr;
    if (cudaFuncGetName(&name, p.func) != cudaSuccess || name == nullptr) {
        cudaGetLastError();
        return false;
    }
    return std::strstr(name, "dsv4") != nullptr;
}

// A kernel launched with a cluster dimension above 1 (dense_gemm_kc's split-K clusters).
bool is_cluster_launch(cudaGraphNode_t n) {
    cudaLaunchAttributeValue v{};
    if (cudaGraphKernelNodeGetAttribute(n, cudaLaunchAttributeClusterDimension, &v) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return uint64_t(v.clusterDim.x) * v.clusterDim.y * v.clusterDim.z > 1;
}

}  // namespace

Result<int> make_kernel_edges_programmatic(cudaGraph_t g, bool clusters) {
    size_t n = 0;
    DSV4_RETURN_IF_ERROR(cuda_error_status(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n), "cudaGraphGetEdges"));
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    if (n > 0)
        DSV4_RETURN_IF_ERROR(
            cuda_error_status(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n), "cudaGraphGetEdges"));
    std::unordered_map<cudaGraphNode_t, int> in_degree;
    for (size_t i = 0; i < n; ++i) ++in_degree[to[i]];
    int rewritten = 0;
    for (size_t i = 0; i < n; ++i) {
        const cudaGraphEdgeData& d = data[i];
        if (d.type != cudaGraphDependencyTypeDefault || d.from_port != cudaGraphKernelNodePortDefault) continue;
        if (in_degree[to[i]] != 1 || !is_kernel(from[i]) || !is_dsv4_kernel(to[i])) continue;
        if (!clusters && (is_cluster_launch(from[i]) || is_cluster_launch(to[i]))) continue;
        DSV4_RETURN_IF_ERROR(
            cuda_error_status(cudaGraphRemoveDependencies(g, &from[i], &to[i], &d, 1), "cudaGraphRemoveDependencies"));
        cudaGraphEdgeData p{};
        p.from_port = cudaGraphKernelNodePortProgrammatic;
        p.type = cudaGraphDependencyTypeProgrammatic;
        DSV4_RETURN_IF_ERROR(
            cuda_error_status(cudaGraphAddDependencies(g, &from[i], &to[i], &p, 1), "cudaGraphAddDependencies"));
        ++rewritten;
    }
    return rewritten;
}

}  // namespace dsv4::cuda_runner_detail
