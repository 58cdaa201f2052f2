// The "k-permuted" activation layout of the wgmma expert GEMM (moe_wgmma_sm90.cu). Its A operand is
// the MXFP4 weights dequantised in registers; one code word (8 consecutive k) becomes four bf16x2
// words (k j, k j + 4), j = 0..3 (mxfp4_pair_rotated.h), and lane t of a warp dequantises physical
// k [16t, 16t + 16) of every 64-k block. wgmma reads B (the activations) from shared memory in its
// own k order, so the activations are stored with the same relabelling: inside every 64-k block,
// logical position L = 16 s + p (s: the k16 step, p: the position inside it) holds physical k
//   phys(L) = 16 ((p & 7) >> 1) + 8 (s >> 1) + 2 (s & 1) + (p >> 3) + 4 (p & 1).
// A GEMM sums over k, so any relabelling applied to both operands gives the same products.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace dsv4::moe_kperm {

// Physical k (0..63) at logical position L (0..63) of a 64-k block.
DSV4_HD constexpr int phys_of(int L) {
    const int s = L >> 4, p = L & 15;
    return 16 * ((p & 7) >> 1) + 8 * (s >> 1) + 2 * (s & 1) + (p >> 3) + 4 * (p & 1);
}
// Logical position of physical k (0..63): the inverse of phys_of.
DSV4_HD constexpr int pos_of(int k) {
    const int T = k >> 4, b3 = (k >> 3) & 1, b2 = (k >> 2) & 1, b1 = (k >> 1) & 1, b0 = k & 1;
    return 16 * (2 * b3 + b1) + 8 * b0 + 2 * T + b2;
}
// Column c of a row in k-permuted order (any c >= 0; blocks of 64 stay in place).
DSV4_HD constexpr int64_t position(int64_t c) { return (c & ~int64_t(63)) | pos_of(int(c & 63)); }

}  // namespace dsv4::moe_kperm
