// Programmatic dependent launch inside a captured CUDA graph (RuntimeOptions::graph_pdl).
#pragma once

#include <cuda_runtime.h>

#include "core/status.h"

namespace dsv4::cuda_runner_detail {

// Rewrites, in place, every edge of g that runs from a kernel node to a dsv4 kernel node (its
// function's mangled name holds "dsv4") whose only incoming edge it is, as a programmatic edge:
// the downstream kernel's CTAs may then launch once every CTA of the upstream one has called
// griddepcontrol.launch_dependents, and wait in griddepcontrol.wait for its completion
// (kernels/cuda/common/pdl.cuh: every dsv4 kernel starts so; scripts/check-pdl.py checks it).
// Library kernels (cuBLASLt) downstream of an edge, nodes of other types and joins keep their
// ordinary edges, and so do edges from or to a thread-block-cluster launch unless `clusters`.
// Returns the number of edges rewritten; a CUDA error as a Status.
Result<int> make_kernel_edges_programmatic(cudaGraph_t g, bool clusters);

}  // namespace dsv4::cuda_runner_detail
