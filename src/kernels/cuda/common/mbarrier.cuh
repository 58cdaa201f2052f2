// Hopper shared-memory barriers and warp-specialisation helpers for the sm90a kernels (PTX ISA 8.0:
// "mbarrier", "cp.async.mbarrier.arrive", "setmaxnreg", "bar.sync"). An mbarrier is one 8-byte word
// in shared memory counting arrivals of the current phase; waiters name the phase by its parity
// (0 for the first phase, then alternating). Header-only, device code only; needs sm_90a.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/device_util.cuh"

namespace dsv4::cuda::dev {

// Sets the arrival count of every phase; one thread, before a __syncthreads that publishes it.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// One arrival (release: this thread's earlier shared-memory accesses happen before the phase ends).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival once every cp.async this thread issued so far has landed; counted in the init count
// (.noinc), so a phase completes when all the producer threads' copies are in shared memory.
__device__ __forceinline__ void mbar_arrive_cp_async(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Blocks until the phase of the given parity has completed (acquire).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    const uint32_t a = smem_addr(bar);
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(a), "r"(parity)
            : "memory");
    } while (!done);
}
// Registers per thread of the executing warpgroup from here on (a multiple of 8, 24 .. 256): a
// producer warpgroup gives registers back (dec) so that the consumer warpgroups can take them (inc).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace dsv4::cuda::dev
