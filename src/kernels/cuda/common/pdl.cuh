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

// pdl_begin() for a kernel that streams weights: first, this CTA's share of [w, w + bytes) is
// prefetched into L2 (one cp.async.bulk.prefetch by thread 0; the grid's CTAs split the range in
// 16-byte-aligned chunks), so that under a programmatic edge the weights stream in while the
// predecessor still runs. Only memory that no kernel of a step writes may be touched before the wait:
// weights, never activations or KV rows. w 16-byte aligned; bytes <= 0 prefetches nothing.
__device__ __forceinline__ void pdl_begin_prefetch(const void* w, long long bytes) {
    if (bytes > 0 && threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        const long long ctas = (long long)gridDim.x * gridDim.y * gridDim.z;
        const long long b = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
        const long long chunk = ((bytes + ctas - 1) / ctas + 15) & ~15ll;
        const long long begin = b * chunk;
        if (begin < bytes) {
            const long long n = (chunk < bytes - begin ? chunk : bytes - begin) & ~15ll;
            if (n > 0)
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(static_cast<const char*>(w) + begin),
                             "r"(static_cast<unsigned>(n))
                             : "memory");
        }
    }
    pdl_begin();
}

}  // namespace dsv4::cuda::dev
