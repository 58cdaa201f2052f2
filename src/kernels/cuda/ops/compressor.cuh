// The gated-pooling compressor's window emission (spec §2.5), shared by the token-at-a-time state
// machine (kv_state.cu: slots read from the sequence's state rows) and batched prefill
// (prefill_state.cu: slots read from the chunk's projections or, before the chunk, the state).
// One implementation keeps the two paths bit-identical: same reduction order, same block shape.
#pragma once

#include "kernels/cuda/ops/common.cuh"

namespace dsv4::cuda {

// Slot geometry of window w: n_slots = 2r (overlap: slots j < r are the previous window's tokens,
// first half of the channels; j >= r this window's, second half) or r (this window, one half).
// Slot j holds token position slot_pos(c, w, j); channel ch of it sits at half-offset
// slot_half(c, j) * dim within the token's [kappa * dim] row.
__device__ __forceinline__ int64_t slot_pos(const CompressorArgs& c, int64_t w, int j) {
    return c.overlap ? (w - 1) * c.ratio + j : w * c.ratio + j;
}
__device__ __forceinline__ int slot_half(const CompressorArgs& c, int j) { return c.overlap && j >= c.ratio ? 1 : 0; }

// The pooled (softmax-gated) value of channel ch of a window from its slot values fetch(j, ch,
// &gate, &kv) (gate with ape added; -inf = empty), in slot order. One thread per channel.
template <class Fetch>
__device__ __forceinline__ float pool_channel(const CompressorArgs& c, int ch, Fetch fetch) {
    const int n_slots = c.overlap ? 2 * c.ratio : c.ratio;
    float mx = kNegInf;
#pragma unroll 4
    for (int j = 0; j < n_slots; ++j) {
        float g, v;
        fetch(j, ch, &g, &v);
        mx = fmaxf(mx, g);
    }
    float den = 0.0f, num = 0.0f;
#pragma unroll 4
    for (int j = 0; j < n_slots; ++j) {
        float g, v;
        fetch(j, ch, &g, &v);
        const float e = (g == kNegInf) ? 0.0f : expf(g - mx);
        den += e;
        num += e * v;
    }
    return num / den;
}

// RMSNorm (double block sum), RoPE at position w * r and the store in c.fmt at the row's
// token-page address, of window w whose pooled channels are value(ch). Block-cooperative (every
// thread calls it; entry [dim] and red [32] shared); the thread-to-channel map and the sum order
// depend only on blockDim, so the two-phase batched form (values pooled by another kernel) stores
// the same bits as emit_compressed_row with the same block size.
template <class Value>
__device__ void finish_compressed_row(const CompressorArgs& c, const PagePool& pool, const int32_t* table, int64_t w,
                                      const float* inv_freq, int rope_dim, float eps, float* entry, double* red,
                                      Value value) {
    const int r = c.ratio, dim = c.dim;
    double ss = 0.0;
    for (int ch = threadIdx.x; ch < dim; ch += blockDim.x) {
        const float v = value(ch);
        entry[ch] = v;
        ss += double(v) * v;
    }
    ss = block_sum_d(ss, red);
    const float inv = 1.0f / sqrtf(float(ss / double(dim)) + eps);
    for (int ch = threadIdx.x; ch < dim; ch += blockDim.x) entry[ch] = entry[ch] * inv * c.norm[ch];
    __syncthreads();
    for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x)
        rope_pair(entry, dim, rope_dim, inv_freq, w * r, i, false);
    __syncthreads();
    store_row_block(entry, comp_row_ptr(pool, table, r, c.row_off, c.fmt.words, w), c.fmt);
}

// Pools window w from slot values fetch(j, ch, &gate, &kv), then finish_compressed_row.
template <class Fetch>
__device__ void emit_compressed_row(const CompressorArgs& c, const PagePool& pool, const int32_t* table, int64_t w,
                                    const float* inv_freq, int rope_dim, float eps, float* entry, double* red,
                                    Fetch fetch) {
    finish_compressed_row(c, pool, table, w, inv_freq, rope_dim, eps, entry, red,
                          [&](int ch) { return pool_channel(c, ch, fetch); });
}

}  // namespace dsv4::cuda
