// Sparse MQA attention for prefill query tokens on Hopper's warpgroup MMA (wgmma): the same operation
// and arguments as sparse_decode (sparse_decode.h; spec §2.4 "Core attention"), one query token per
// CTA with all 64 heads of a head block as the MMA's M, no split-KV (a prefill block has hundreds of
// query tokens, enough CTAs to fill the GPU), FP8 584-byte rows only.
//
// Why: sparse_decode runs QK, softmax and PV as mma.sync phases of 32 heads with block barriers and
// reached ~65 TFLOP/s on a 4K-token prefill (docs/perf/ledger.md E35); here both products are wgmma
// with the operands in shared memory.
//
// Thread roles: 2 warpgroups (256 threads), one CTA = (64 heads, one query token).
//   load     all threads, 4 per row: raw rows into registers two tiles ahead (their latency hides
//            behind a softmax and two products), dequantised into the other of two bf16 tiles [64
//            rows][512] (8 column blocks of [64][128 B], 128-byte swizzle; e4m3 x UE8M0 -> bf16 is
//            exact) while this tile's PV runs; the next tile's S is issued behind that PV.
//   S        warpgroup w: S_w = Q K^T over tile rows 32w .. 32w + 31 (m64n32k16, K = 512).
//   softmax  row maxima of the two halves exchanged through shared memory, P = exp2(S - m) rounded
//            to bf16 written (swizzled) into one [64][64] tile, row sums exchanged.
//   O += PV  warpgroup w: output dims 256w .. 256w + 255 (two m64n128k16 accumulators), P as the
//            K-major A operand, the bf16 tile read MN-major as B (one tile serves as K and as V).
// Shared memory (bytes): Q 65,536 | 2 tiles 131,072 | P 8,192 | maxima and sums 1,024; 1,024-byte
//   aligned for the swizzle. 2 block barriers and 1 warpgroup barrier per tile.
// The softmax is the decode kernel's: scores scaled to log2 units, running maxima, P rounded to bf16
// before both its sum and the product, the sink folded in at the end. Zero rows give zeros.
#include <cuda_bf16.h>

#include "kernels/cuda/attention/sparse_prefill.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/mbarrier.cuh"
#include "kernels/cuda/common/wgmma.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kD = 512, kHB = 64, kBT = 64, kThreads = 256;
constexpr int kColBlock = kBT * 128;  // one 64-dim column block of the tile (and of Q: 64 heads)
constexpr int kQBytes = 8 * kHB * 128, kTileBytes = 8 * kColBlock;
constexpr int kPBytes = kHB * kBT * 2;
constexpr size_t kSmem = 1024 + kQBytes + 2 * size_t(kTileBytes) + kPBytes + 4 * kHB * 4;
static_assert(kThreads == 4 * kBT, "four threads share each raw row");

struct Args {
    const __nv_bfloat16* q;
    const unsigned char* pool;
    const int64_t* offsets;
    const int32_t* row_start;
    const float* sink;
    __nv_bfloat16* out;
    int n_heads;
    float scale_log2;
};

// Byte offset of 16-byte unit u (0..63: dims 8u .. 8u + 7) of row r in a tile of 8 column blocks
// of [rows][128 B], block stride `block`, 128-byte swizzle.
__device__ __forceinline__ int swz(int r, int u, int block) {
    return (u >> 3) * block + r * 128 + (((u & 7) ^ (r & 7)) << 4);
}

// This thread's share of one tile's raw rows, held in registers from the load until the dequantisation
// (4 threads per row, lane = 4 (row % 8) + q): the e4m3 words q, q + 4, .. 52 + q (units 8 dims each),
// the bf16 pairs 2 q, 2 q + 1 and 2 q + 8, 2 q + 9 of the 16 words at byte 448 (units 56 + q, 60 + q),
// and the UE8M0 scale word (bytes 576 .. 583).
struct RawShare {
    uint2 e4[14];
    uint2 b16[4];
    uint2 sc;
};

__device__ __forceinline__ void load_share(RawShare& s, const unsigned char* row, bool ok, int q) {
    const uint2 z = make_uint2(0u, 0u);
#pragma unroll
    for (int j = 0; j < 14; ++j) s.e4[j] = ok ? __ldg(reinterpret_cast<const uint2*>(row + 8 * (q + 4 * j))) : z;
#pragma unroll
    for (int j = 0; j < 4; ++j)
        s.b16[j] = ok ? __ldg(reinterpret_cast<const uint2*>(row + 448 + 8 * (2 * q + (j & 1) + 8 * (j >> 1)))) : z;
    s.sc = ok ? __ldg(reinterpret_cast<const uint2*>(row + 576)) : z;
}

// Two e4m3 codes (bytes 2 p and 2 p + 1 of w) x 2^(e - 127) as bf16x2, through floats: exact for
// every code and UE8M0 byte e (255: NaN), the reference form.
__device__ __forceinline__ uint32_t dequant_pair_float(uint32_t w, int p, uint32_t e) {
    const float2 f = dev::fp8x2_to_float2(uint16_t(w >> (16 * p)));
    const float sc = dev::ue8m0(e);
    return dev::pack_bf16x2(f.x * sc, f.y * sc);
}

// The same for e < 128 in 4 instructions instead of ~8: the code's sign, exponent and mantissa
// bits placed into a bf16's (sign at 15, the 7 other bits at 4..10) make e4m3 x 2^-120 exactly,
// subnormals and zeros included (both formats' subnormals scale by the same 2^-120); one bf16
// multiply by 2^(e - 7) (normal for e < 128; e4m3 x 2^(e - 127) has at most 4 significant bits,
// so the product rounds as the float form does). prmt's sign-replicate selectors build the two
// sign-extended 16-bit lanes; the shift's spill from the low lane into bits 16..19 is masked off.
// The NaN codes 0x7f / 0xff decode as finite values here (a row quantised from finite values never
// holds them). scale2 = dequant_scale2(e).
__device__ __forceinline__ uint32_t dequant_pair_fast(uint32_t w, int p, uint32_t scale2) {
    uint32_t v;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(v) : "r"(w), "r"(p ? 0xB3A2u : 0x9180u));
    const uint32_t x = (v << 4) & 0x87f087f0u;
    uint32_t y;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(y) : "r"(x), "r"(scale2));
    return y;
}
// bf16x2 of 2^(e - 7) in both halves (e < 128).
__device__ __forceinline__ uint32_t dequant_scale2(uint32_t e) { return e * 0x00800080u + 0x3c003c00u; }

// The UE8M0 byte of the share's 64-dim block blk (0..6).
__device__ __forceinline__ uint32_t share_scale(const RawShare& s, int blk) {
    return ((blk < 4 ? s.sc.x : s.sc.y) >> (8 * (blk & 3))) & 0xffu;
}

// Writes the share as bf16 units of row r into a swizzled tile (e4m3 x UE8M0 -> bf16 is exact).
// Scale bytes of 128 and more (scales >= 2, outside dequant_pair_fast's range) take the float form.
// A row past the list (ok false) is stored as zeros without the conversion (its scores are masked,
// and zeros keep its P x V products finite).
__device__ __forceinline__ void store_share(const RawShare& s, unsigned char* tile, int r, int q, bool ok) {
    if (!ok) {
#pragma unroll
        for (int u = q; u < 64; u += 4) *reinterpret_cast<uint4*>(tile + swz(r, u, kColBlock)) = make_uint4(0, 0, 0, 0);
        return;
    }
    const bool fast = ((s.sc.x | (s.sc.y & 0x00ffffffu)) & 0x80808080u) == 0u;
#pragma unroll
    for (int j = 0; j < 14; ++j) {
        const int u = q + 4 * j;
        const uint32_t e = share_scale(s, u >> 3);  // block u / 8 == j / 2
        const uint2 v = s.e4[j];
        uint4 o;
        if (fast) {
            const uint32_t s2 = dequant_scale2(e);
            o = make_uint4(dequant_pair_fast(v.x, 0, s2), dequant_pair_fast(v.x, 1, s2), dequant_pair_fast(v.y, 0, s2),
                           dequant_pair_fast(v.y, 1, s2));
        } else {
            o = make_uint4(dequant_pair_float(v.x, 0, e), dequant_pair_float(v.x, 1, e), dequant_pair_float(v.y, 0, e),
                           dequant_pair_float(v.y, 1, e));
        }
        *reinterpret_cast<uint4*>(tile + swz(r, u, kColBlock)) = o;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const uint2 lo = s.b16[2 * j], hi = s.b16[2 * j + 1];
        *reinterpret_cast<uint4*>(tile + swz(r, 56 + q + 4 * j, kColBlock)) = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
}

__global__ void __launch_bounds__(kThreads, 1) sparse_prefill_kernel(Args p) {
    dev::pdl_begin();
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = dev::align_smem_1024(smem_raw);
    unsigned char* qs = smem;
    unsigned char* tiles = qs + kQBytes;  // [2] bf16 tiles
    unsigned char* ps = tiles + 2 * kTileBytes;
    float* m_part = reinterpret_cast<float*>(ps + kPBytes);  // [2][64]
    float* l_part = m_part + 2 * kHB;                        // [2][64]

    const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    const int h0 = blockIdx.x * kHB, b = blockIdx.y;
    const int row0 = p.row_start[b];
    const int n = p.row_start[b + 1] - row0;
    const int n_tiles = (n + kBT - 1) / kBT;
    const int64_t* offs = p.offsets + row0;
    // Raw-row share of this thread: row lr of every tile, quarter lq.
    const int lr = tid >> 2, lq = tid & 3;

    // Q: 64 heads x 512 dims, swizzled like the tiles (64-row column blocks).
    const __nv_bfloat16* qg = p.q + (int64_t(b) * p.n_heads + h0) * kD;
    for (int i = tid; i < kHB * 64; i += kThreads) {
        const int r = i >> 6, u = i & 63;
        dev::cp_async16(qs + swz(r, u, kHB * 128), qg + r * kD + u * 8, 16);
    }
    dev::cp_async_commit();
    RawShare share;
    // The row offset of tile tt + 1 is read one iteration ahead (off_next): loading it right before
    // the row made every tile's loads wait out a dependent L2 round trip (ncu, ledger E53).
    auto row_off = [&](int tt) -> int64_t {
        const int row = tt * kBT + lr;
        return row < n ? offs[row] : int64_t(-1);
    };
    bool share_ok = false;
    auto load_tile = [&](int64_t off) {
        share_ok = off >= 0;
        load_share(share, p.pool + (share_ok ? off : 0), share_ok, lq);
    };
    int64_t off_next = -1;
    if (n_tiles > 0) {
        load_tile(row_off(0));
        off_next = row_off(1);
        store_share(share, tiles, lr, lq, share_ok);
    }
    dev::cp_async_wait<0>();
    dev::fence_proxy_async_smem();
    __syncthreads();

    // Rows this thread holds in the wgmma accumulator layout: 16 * warp + g and + 8.
    const int ra = 16 * warp + g, rb = ra + 8;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    float acc[2][64];
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[c][i] = 0.0f;

    // wgmma descriptors built once: a descriptor's start-address field is the byte address / 16 in
    // its low 14 bits, so desc(addr + off) = desc(addr) + off / 16 for 16-byte multiples inside shared
    // memory (< 256 KB, no carry out of the field). Building each one from its address cost ~13
    // instructions per wgmma, ~30% of the kernel's instructions (ncu, ledger E53).
    const uint64_t dq = dev::wgmma_desc_k128(dev::smem_addr(qs)), dp = dev::wgmma_desc_k128(dev::smem_addr(ps));
    const uint64_t dk0 = dev::wgmma_desc_k128(dev::smem_addr(tiles)) + uint64_t(wg * 32 * 128 / 16);
    const uint64_t dv0 = dev::wgmma_desc_mn128(dev::smem_addr(tiles), kColBlock) + uint64_t(4 * wg * kColBlock / 16);
    // S_w = Q K^T over rows 32 wg .. + 31 of the tile in buffer tt % 2, issued (not waited).
    float s[16];
    auto issue_s = [&](int tt) {
        const uint64_t dk = dk0 + uint64_t((tt & 1) * (kTileBytes / 16));
#pragma unroll
        for (int i = 0; i < 16; ++i) s[i] = 0.0f;
        dev::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
            const uint32_t off = (kk >> 2) * kColBlock + (kk & 3) * 32;
            dev::wgmma_ss_m64n32k16(s, dq + off / 16, dk + off / 16);
        }
        dev::wgmma_commit();
    };
    // After each wait: s was written by the asynchronous wgmmas and the softmax reads it at once; the
    // empty asm statements keep the compiler from moving those reads above the wait. (acc's reads
    // follow block barriers and shared-memory loads they depend on; pinning acc as well made ptxas
    // inject a warpgroup arrive and cost ~2% of the kernel, ledger E53.)
    auto pin_s = [&]() {
#pragma unroll
        for (int i = 0; i < 16; ++i) dev::wgmma_pin(s[i]);
    };
    if (n_tiles > 0) {
        issue_s(0);
        if (n_tiles > 1) {
            load_tile(off_next);
            off_next = row_off(2);
        }
        dev::wgmma_wait<0>();
        pin_s();
    }
    // Per tile: softmax of S(tt) (two block barriers: the halves' maxima, then P and the sums), then
    // PV(tt) issued; tile tt + 1 dequantised into the other buffer while it runs, and S(tt + 1)
    // issued right behind it (the tensor pipe runs both back to back; the single wait covers both),
    // then tile tt + 2's raw rows loaded. A warpgroup's S reads only the rows its own threads stored
    // (rows 32 wg .. + 31, lr = tid / 4), so a warpgroup barrier orders the store before S(tt + 1);
    // the next tile's barrier B2 comes after both warpgroups waited on PV(tt), so P, the maxima and
    // the buffer of tile tt are free when they are written again.
    for (int tt = 0; tt < n_tiles; ++tt) {
        const bool more = tt + 1 < n_tiles;
        const uint64_t dv = dv0 + uint64_t((tt & 1) * (kTileBytes / 16));

        // Scores in log2 units, masked past the list; this half's row maxima.
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int col = tt * kBT + wg * 32 + 8 * i + 2 * t4 + (j & 1);
                float& v = s[4 * i + j];
                v = col < n ? v * p.scale_log2 : -INFINITY;
                mx[j >> 1] = fmaxf(mx[j >> 1], v);
            }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        }
        if (t4 == 0) {
            m_part[wg * kHB + ra] = mx[0];
            m_part[wg * kHB + rb] = mx[1];
        }
        __syncthreads();  // B2: both halves' maxima
        // The running maximum moves only when a row's tile maximum passes it by more than kLazyMax
        // (log2 units): P = exp2(S - m) then stays at most 2^kLazyMax, far inside f32 and bf16, and
        // the O and l rescale (128 multiplies per thread) is skipped for the warp when no row of it
        // moved, which after the first tiles is almost always. The result is the same softmax; P's
        // bf16 rounding falls on other values (within the bf16 tolerance of the decode kernel).
        constexpr float kLazyMax = 8.0f;
        float m_new[2], alpha[2], sum[2] = {0.0f, 0.0f};
        bool moved = false;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = h ? rb : ra;
            const float m_tile = fmaxf(m_part[r], m_part[kHB + r]);
            m_new[h] = m_tile > m_run[h] + kLazyMax ? m_tile : m_run[h];
            alpha[h] = m_new[h] == m_run[h] ? 1.0f : exp2f(m_run[h] - m_new[h]);
            moved |= m_new[h] != m_run[h];
        }
        const bool rescale = __any_sync(0xffffffffu, moved);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float p0 = m_new[h] == -INFINITY ? 0.0f : exp2f(s[4 * i + 2 * h] - m_new[h]);
                const float p1 = m_new[h] == -INFINITY ? 0.0f : exp2f(s[4 * i + 2 * h + 1] - m_new[h]);
                const uint32_t pk = dev::pack_bf16x2(p0, p1);
                const float2 pr = dev::unpack_bf16x2(pk);
                sum[h] += pr.x + pr.y;
                const int r = h ? rb : ra;
                // P [64 heads][64 tile rows] bf16, 128-byte swizzle: unit 4 wg + i, word t4.
                *reinterpret_cast<uint32_t*>(ps + r * 128 + ((((wg << 2) + i) ^ (r & 7)) << 4) + 4 * t4) = pk;
            }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 1);
            sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
        }
        if (t4 == 0) {
            l_part[wg * kHB + ra] = sum[0];
            l_part[wg * kHB + rb] = sum[1];
        }
        dev::fence_proxy_async_smem();
        __syncthreads();  // B3: P and the sums visible
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = h ? rb : ra;
            l_run[h] = l_run[h] * alpha[h] + (l_part[r] + l_part[kHB + r]);
            m_run[h] = m_new[h];
        }
        if (rescale) {
#pragma unroll
            for (int c = 0; c < 2; ++c)
#pragma unroll
                for (int i = 0; i < 16; ++i) {
                    acc[c][4 * i] *= alpha[0];
                    acc[c][4 * i + 1] *= alpha[0];
                    acc[c][4 * i + 2] *= alpha[1];
                    acc[c][4 * i + 3] *= alpha[1];
                }
        }
        // O_w += P V: K = the 64 tile rows, N = dims 256 wg + 128 c ...; issued, then the next tile
        // is dequantised into the other buffer while it runs.
        dev::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBT / 16; ++kk) {
            const uint64_t da = dp + uint64_t(kk * 32 / 16);
#pragma unroll
            for (int c = 0; c < 2; ++c)
                dev::wgmma_ss_m64n128k16_tb(acc[c], da, dv + uint64_t((2 * c * kColBlock + kk * 2048) / 16));
        }
        dev::wgmma_commit();
        if (more) {
            store_share(share, tiles + ((tt + 1) & 1) * kTileBytes, lr, lq, share_ok);
            dev::fence_proxy_async_smem();
            dev::named_barrier_sync(1 + wg, 128);  // this warpgroup's rows of tile tt + 1 visible
            issue_s(tt + 1);
            if (tt + 2 < n_tiles) {
                load_tile(off_next);
                off_next = row_off(tt + 3);
            }
        }
        dev::wgmma_wait<0>();
        pin_s();
    }

    // o = acc / (l + exp(sink - m)) in the decode kernel's form (n_splits == 1).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = h ? rb : ra;
        const float m = m_run[h], sk = p.sink[h0 + r] * dev::kLog2e;
        const float M = fmaxf(m, sk);
        float f = 0.0f;
        if (M != -INFINITY) {
            const float em = m == -INFINITY ? 0.0f : exp2f(m - M);
            f = em / (l_run[h] * em + exp2f(sk - M));
        }
        __nv_bfloat16* o = p.out + (int64_t(b) * p.n_heads + h0 + r) * kD + wg * 256 + 2 * t4;
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int i = 0; i < 16; ++i)
                *reinterpret_cast<uint32_t*>(o + c * 128 + 8 * i) =
                    dev::pack_bf16x2(acc[c][4 * i + 2 * h] * f, acc[c][4 * i + 2 * h + 1] * f);
    }
}

// One thread per (code c, scale byte e < 128): the pair (c, c ^ 0x80) in both byte positions of a
// word through both forms; counts differing bits patterns (NaN codes skipped, see dequant_pair_fast).
__global__ void dequant_check_kernel(unsigned long long* mismatches) {
    dev::pdl_begin();
    const uint32_t c = threadIdx.x, e = blockIdx.x;
    if ((c & 0x7fu) == 0x7fu) return;
    const uint32_t w = c | ((c ^ 0x80u) << 8) | ((c ^ 0x80u) << 16) | (c << 24);
    const uint32_t s2 = dequant_scale2(e);
    unsigned long long bad = 0;
    for (int p = 0; p < 2; ++p) bad += dequant_pair_fast(w, p, s2) != dequant_pair_float(w, p, e);
    if (bad) atomicAdd(mismatches, bad);
}

// store_share as the kernel runs it, one CTA per (scale byte e, block b holding it), one thread per
// (row, quarter) with its own code pattern: the other six blocks' bytes are 120, so e >= 128 in any one block must send
// the whole row down the float form; every stored unit is compared with dequant_pair_float (NaN codes skipped), and a
// row past the list must store zeros.
__global__ void store_share_check_kernel(unsigned long long* mismatches) {
    dev::pdl_begin();
    extern __shared__ __align__(16) unsigned char tile[];  // kTileBytes
    const uint32_t e = blockIdx.x, b = blockIdx.y, q = threadIdx.x & 3;
    const int r = int(threadIdx.x >> 2);  // 0..63
    RawShare sh;
    uint32_t bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = i == int(b) ? e : 120u;
    sh.sc = make_uint2(bytes[0] | bytes[1] << 8 | bytes[2] << 16 | bytes[3] << 24,
                       bytes[4] | bytes[5] << 8 | bytes[6] << 16 | bytes[7] << 24);
    auto code = [&](int j, int k) -> uint32_t {  // byte k of share word j: a code that is not NaN
        const uint32_t c = (uint32_t(r) * 37u + uint32_t(j) * 11u + uint32_t(k) * 5u + q * 101u) & 0xffu;
        return (c & 0x7fu) == 0x7fu ? c ^ 0x01u : c;
    };
    for (int j = 0; j < 14; ++j) {
        uint32_t w[2] = {0, 0};
        for (int k = 0; k < 8; ++k) w[k >> 2] |= code(j, k) << (8 * (k & 3));
        sh.e4[j] = make_uint2(w[0], w[1]);
    }
    for (int j = 0; j < 4; ++j) sh.b16[j] = make_uint2(0x3f803f80u + r, 0xbf80bf80u + j);
    const bool ok = r != 63;  // the last row stands for a row past the list
    store_share(sh, tile, r, int(q), ok);
    __syncwarp();
    unsigned long long bad = 0;
    for (int j = 0; j < 14; ++j) {
        const int u = int(q) + 4 * j;
        const uint32_t eu = share_scale(sh, u >> 3);
        const uint4 got = *reinterpret_cast<const uint4*>(tile + swz(r, u, kColBlock));
        const uint2 v = sh.e4[j];
        const uint4 want = ok ? make_uint4(dequant_pair_float(v.x, 0, eu), dequant_pair_float(v.x, 1, eu),
                                           dequant_pair_float(v.y, 0, eu), dequant_pair_float(v.y, 1, eu))
                              : make_uint4(0, 0, 0, 0);
        bad += got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w;
    }
    if (bad) atomicAdd(mismatches, bad);
}
}  // namespace

int64_t sparse_prefill_dequant_mismatches() {
    unsigned long long* d = nullptr;
    if (cudaMalloc(&d, sizeof(*d)) != cudaSuccess) return -1;
    unsigned long long h = 0;
    bool ok = cudaMemset(d, 0, sizeof(*d)) == cudaSuccess;
    if (ok) {
        dequant_check_kernel<<<128, 256>>>(d);
        ok = cudaFuncSetAttribute(store_share_check_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kTileBytes) ==
             cudaSuccess;
        if (ok) store_share_check_kernel<<<dim3(256, 7), 256, kTileBytes>>>(d);
        ok = ok && cudaGetLastError() == cudaSuccess &&
             cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost) == cudaSuccess;
    }
    cudaFree(d);
    return ok ? int64_t(h) : -1;
}

const char* sparse_prefill_decline(const SparseDecodeArgs& a) {
    if (a.format != KvFormat::kFp8) return "bf16 rows (the prefill kernel reads 584-byte FP8 rows)";
    if (a.n_heads <= 0 || a.n_heads % kHB != 0) return "n_heads not a multiple of 64";
    if (!a.q || !a.kv_pool || !a.row_offsets || !a.row_start || !a.sink || !a.out) return "null pointer argument";
    if (reinterpret_cast<uintptr_t>(a.q) % 16 != 0 || reinterpret_cast<uintptr_t>(a.out) % 4 != 0)
        return "q not 16-byte or out not 4-byte aligned";
    return "";
}

cudaError_t sparse_prefill_run(const SparseDecodeArgs& a, cudaStream_t stream) {
    if (a.batch <= 0) return cudaSuccess;
    if (*sparse_prefill_decline(a) != '\0') return cudaErrorInvalidValue;
    Args k{static_cast<const __nv_bfloat16*>(a.q),
           static_cast<const unsigned char*>(a.kv_pool),
           a.row_offsets,
           a.row_start,
           a.sink,
           static_cast<__nv_bfloat16*>(a.out),
           a.n_heads,
           a.scale * dev::kLog2e};
    cudaError_t e =
        cudaFuncSetAttribute(sparse_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
    if (e != cudaSuccess) return e;
    sparse_prefill_kernel<<<dim3(unsigned(a.n_heads / kHB), unsigned(a.batch)), kThreads, kSmem, stream>>>(k);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
