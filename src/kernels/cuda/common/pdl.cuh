// Programmatic dependent launch (PDL): the first statement of every dsv4 kernel.
//
// Why: a decode step is a CUDA graph of several hundred short kernels (about 20 per layer at batch 1),
// and between two of them the GPU drains the first grid and only then launches the second. The runner
// can turn the graph's kernel-to-kernel edges into programmatic ones (RuntimeOptions::graph_pdl,
// cuda_runner_graphs.cpp); the next kernel's CTAs are then launched while the current one runs and
// wait here until it has completed and its writes are visible.
// Rules that make this safe: griddepcontrol.wait comes before every global read or write (a kernel
// may overwrite what its predecessor still reads), so it is the first statement; without a
// programmatic edge (eager launches, graph_pdl off) both instructions do nothing. launch_dependents
// right after the wait lets the successor's CTAs be placed once all of this grid's CTAs have started
// (a grid of several waves releases it with its last wave, so the waiting CTAs never take an SM that
// this grid still needs). The source check scripts/check-pdl.py keeps every __global__ under this rule.
#pragma once

namespace dsv4::cuda::dev {

__device__ __forceinline__ void pdl_begin() {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace dsv4::cuda::dev
