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
//   load     all threads, 4 per row: the next tile's raw rows into registers at the top of an
//            iteration (their latency hides behind S and the softmax), dequantised into the other of
//            two bf16 tiles [64 rows][512] (8 column blocks of [64][128 B], 128-byte swizzle; e4m3 x
//            UE8M0 -> bf16 is exact) while this tile's PV runs.
//   S        warpgroup w: S_w = Q K^T over tile rows 32w .. 32w + 31 (m64n32k16, K = 512).
//   softmax  row maxima of the two halves exchanged through shared memory, P = exp2(S - m) rounded
//            to bf16 written (swizzled) into one [64][64] tile, row sums exchanged.
//   O += PV  warpgroup w: output dims 256w .. 256w + 255 (two m64n128k16 accumulators), P as the
//            K-major A operand, the bf16 tile read MN-major as B (one tile serves as K and as V).
// Shared memory (bytes): Q 65,536 | 2 tiles 131,072 | P 8,192 | maxima and sums 1,024; 1,024-byte
//   aligned for the swizzle. 3 block barriers per tile.
// The softmax is the decode kernel's: scores scaled to log2 units, running maxima, P rounded to bf16
// before both its sum and the product, the sink folded in at the end. Zero rows give zeros.
#include <cuda_bf16.h>

#include "kernels/cuda/attention/sparse_prefill.h"
#include "kernels/cuda/gemm/device_util.cuh"
#include "kernels/cuda/gemm/wgmma.cuh"

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
__device__ __forceinline__ int swz(int r, int u, int block) { return (u >> 3) * block + r * 128 + (((u & 7) ^ (r & 7)) << 4); }

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

// Writes the share as bf16 units of row r into a swizzled tile (e4m3 x UE8M0 -> bf16 is exact).
__device__ __forceinline__ void store_share(const RawShare& s, unsigned char* tile, int r, int q) {
#pragma unroll
    for (int j = 0; j < 14; ++j) {
        const int u = q + 4 * j;
        const int blk = u >> 3;
        const uint32_t sw = blk < 4 ? s.sc.x : s.sc.y;
        const float sc = dev::ue8m0((sw >> (8 * (blk & 3))) & 0xffu);
        const uint2 v = s.e4[j];
        const float2 f0 = dev::fp8x2_to_float2(uint16_t(v.x & 0xffff));
        const float2 f1 = dev::fp8x2_to_float2(uint16_t(v.x >> 16));
        const float2 f2 = dev::fp8x2_to_float2(uint16_t(v.y & 0xffff));
        const float2 f3 = dev::fp8x2_to_float2(uint16_t(v.y >> 16));
        uint4 o;
        o.x = dev::pack_bf16x2(f0.x * sc, f0.y * sc);
        o.y = dev::pack_bf16x2(f1.x * sc, f1.y * sc);
        o.z = dev::pack_bf16x2(f2.x * sc, f2.y * sc);
        o.w = dev::pack_bf16x2(f3.x * sc, f3.y * sc);
        *reinterpret_cast<uint4*>(tile + swz(r, u, kColBlock)) = o;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const uint2 lo = s.b16[2 * j], hi = s.b16[2 * j + 1];
        *reinterpret_cast<uint4*>(tile + swz(r, 56 + q + 4 * j, kColBlock)) = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
}

__global__ void __launch_bounds__(kThreads, 1) sparse_prefill_kernel(Args p) {
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
    auto load_tile = [&](int tt) {
        const int row = tt * kBT + lr;
        const bool ok = row < n;
        load_share(share, p.pool + (ok ? offs[row] : 0), ok, lq);
    };
    if (n_tiles > 0) {
        load_tile(0);
        store_share(share, tiles, lr, lq);
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

    const uint32_t q_addr = dev::smem_addr(qs), p_addr = dev::smem_addr(ps);
    for (int tt = 0; tt < n_tiles; ++tt) {
        // Tile tt is in tiles[tt % 2] (visible); the next one's raw rows go to registers now and to
        // the other buffer while PV(tt) runs.
        const bool more = tt + 1 < n_tiles;
        if (more) load_tile(tt + 1);
        const uint32_t tile_addr = dev::smem_addr(tiles + (tt & 1) * kTileBytes);

        // S_w = Q K^T over tile rows 32 wg .. + 31.
        float s[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) s[i] = 0.0f;
        dev::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
            const uint32_t off = (kk >> 2) * kColBlock + (kk & 3) * 32;
            dev::wgmma_ss_m64n32k16(s, dev::wgmma_desc_k128(q_addr + off),
                                    dev::wgmma_desc_k128(tile_addr + off + wg * 32 * 128));
        }
        dev::wgmma_commit();
        dev::wgmma_wait<0>();

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
        float m_new[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = h ? rb : ra;
            m_new[h] = fmaxf(m_run[h], fmaxf(m_part[r], m_part[kHB + r]));
            alpha[h] = m_new[h] == -INFINITY ? 1.0f : exp2f(m_run[h] - m_new[h]);
        }
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
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                acc[c][4 * i] *= alpha[0];
                acc[c][4 * i + 1] *= alpha[0];
                acc[c][4 * i + 2] *= alpha[1];
                acc[c][4 * i + 3] *= alpha[1];
            }
        // O_w += P V: K = the 64 tile rows, N = dims 256 wg + 128 c ...; issued, then the next tile
        // is dequantised into the other buffer while it runs.
        dev::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBT / 16; ++kk) {
            const uint64_t da = dev::wgmma_desc_k128(p_addr + kk * 32);
#pragma unroll
            for (int c = 0; c < 2; ++c)
                dev::wgmma_ss_m64n128k16_tb(
                    acc[c], da, dev::wgmma_desc_mn128(tile_addr + (4 * wg + 2 * c) * kColBlock + kk * 2048, kColBlock));
        }
        dev::wgmma_commit();
        if (more) store_share(share, tiles + ((tt + 1) & 1) * kTileBytes, lr, lq);
        dev::wgmma_wait<0>();
        dev::fence_proxy_async_smem();
        __syncthreads();  // B1: tile tt + 1 visible; tile tt, P and the maxima free
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

}  // namespace

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
    Args k{static_cast<const __nv_bfloat16*>(a.q), static_cast<const unsigned char*>(a.kv_pool), a.row_offsets,
           a.row_start, a.sink, static_cast<__nv_bfloat16*>(a.out), a.n_heads, a.scale * dev::kLog2e};
    cudaError_t e = cudaFuncSetAttribute(sparse_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
    if (e != cudaSuccess) return e;
    sparse_prefill_kernel<<<dim3(unsigned(a.n_heads / kHB), unsigned(a.batch)), kThreads, kSmem, stream>>>(k);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
