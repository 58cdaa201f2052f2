// Start-up report of the CUDA runner: which kernels each op class takes (the fast decode kernels
// or the correct-first ones, and why not), per src/kernels/cuda/ops/fast_path.h. Host-only.
#pragma once

#include <string>

#include "model/config.h"
#include "runtime/cuda_weights.h"

namespace dsv4 {

// One line per op class (projection, router, experts, LM head) with its weight format, the path
// and, for the correct-first path, the reason; counts layers where the decision differs. Uses the
// same strides as CudaRunner's calls. Ends with a newline.
// `fast_kernels`: RuntimeOptions::fast_kernels (false: every op is reported on the correct-first kernels).
std::string cuda_fast_kernel_table(const DevWeights& w, const ModelConfig& cfg, bool fast_kernels);

}  // namespace dsv4
