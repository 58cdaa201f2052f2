// Split-KV sparse decode attention, sm90 (mma.sync bf16 tensor cores, cp.async pipeline).
//
// Thread roles: one CTA = (head block of HB heads, one KV split, one sequence), NW warps.
//   load    all threads issue cp.async for the next tile (STAGES deep); FP8 rows are then
//           dequantised by all threads into one bf16 tile (e4m3 x UE8M0 -> bf16 is exact).
//   S=QK^T  m16n8k16 tiles of [HB x BT] round-robin over warps, K = 512 from smem.
//   softmax warp w owns heads w, w+NW, ...: online max/sum in log2 units, P rounded to bf16.
//   O+=PV   warp w owns output dims [w*512/NW, (w+1)*512/NW) for all HB heads, f32 registers.
// Shared memory: Q [HB][520] bf16 | STAGES tiles [BT][520] bf16 (FP8: STAGES raw [BT][584] B +
//   one bf16 tile) | S [HB][BT+4] f32 | P [HB][BT+8] bf16 | m, l, alpha [HB] f32.
//   Rows padded by 16 B so ldmatrix row groups fall on distinct banks.
// Bound: ~128 FLOP per bf16 KV byte (224 per FP8 byte) with 64 heads: balanced between HBM and
//   tensor throughput on H200. Last measured (docs/perf/ledger.md E2, E5): neither - CSA fp8
//   8K batch 64 in 80 us = 67 TFLOP/s (~9% of the bf16 GEMM peak), ~0.4 TB/s of model bytes;
//   bound by the serialized QK -> softmax -> PV phases and their block barriers.
#pragma once

#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda::attn {

constexpr int kD = 512;
constexpr int kRowStride = kD + 8;  // bf16 elements per smem row
constexpr int kFp8Row = 584;

struct KernelArgs {
    const __nv_bfloat16* q;
    const void* pool;
    const int64_t* offsets;
    const int32_t* row_start;
    const float* sink;
    __nv_bfloat16* out;
    float* ws;
    int n_heads;
    int n_splits;
    float scale_log2;
};

template <int BT, int HB, int NW, int STAGES, bool FP8>
struct Cfg {
    static constexpr int kThreads = NW * 32;
    static constexpr int kDW = kD / NW;  // output dims per warp
    static constexpr int kSS = BT + 4;   // S row stride (f32)
    static constexpr int kPS = BT + 8;   // P row stride (bf16)
    static constexpr size_t kQBytes = size_t(HB) * kRowStride * 2;
    static constexpr size_t kTileBytes = size_t(BT) * kRowStride * 2;
    static constexpr size_t kRawBytes = FP8 ? size_t(BT) * kFp8Row : kTileBytes;
    static constexpr size_t kStageBytes = STAGES * kRawBytes + (FP8 ? kTileBytes : 0);
    static constexpr size_t kSBytes = size_t(HB) * kSS * 4;
    static constexpr size_t kPBytes = size_t(HB) * kPS * 2;
    static constexpr size_t kSmem = kQBytes + kStageBytes + kSBytes + kPBytes + 3 * HB * 4;
    static_assert(BT % 32 == 0 && HB % 16 == 0 && kDW % 16 == 0 && HB % NW == 0);
};

template <int BT, int HB, int NW, int STAGES, bool FP8>
__global__ void __launch_bounds__(NW * 32, 1) sparse_decode_kernel(KernelArgs p) {
    dev::pdl_begin();
    using C = Cfg<BT, HB, NW, STAGES, FP8>;
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);
    unsigned char* stage_base = smem + C::kQBytes;
    __nv_bfloat16* ktile_fp8 = reinterpret_cast<__nv_bfloat16*>(stage_base + STAGES * C::kRawBytes);
    float* s_sc = reinterpret_cast<float*>(stage_base + C::kStageBytes);
    __nv_bfloat16* p_s = reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<unsigned char*>(s_sc) + C::kSBytes);
    float* m_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(p_s) + C::kPBytes);
    float* l_s = m_s + HB;
    float* a_s = l_s + HB;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hb = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
    const int row0 = p.row_start[b];
    const int n_rows = p.row_start[b + 1] - row0;
    int chunk = (n_rows + p.n_splits - 1) / p.n_splits;
    chunk = (chunk + BT - 1) / BT * BT;
    const int begin = min(n_rows, split * chunk);
    const int n = min(n_rows, begin + chunk) - begin;
    const int n_tiles = (n + BT - 1) / BT;
    const int64_t* offs = p.offsets + row0 + begin;

    // Q block: HB rows of 512 bf16 (64 x 16 B each).
    const __nv_bfloat16* qg = p.q + (int64_t(b) * p.n_heads + int64_t(hb) * HB) * kD;
    for (int i = tid; i < HB * 64; i += C::kThreads)
        dev::cp_async16(qs + (i >> 6) * kRowStride + (i & 63) * 8, qg + (i >> 6) * kD + (i & 63) * 8, 16);
    if (tid < HB) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }

    auto load_tile = [&](int t, int stage) {
        unsigned char* dst = stage_base + stage * C::kRawBytes;
        if constexpr (!FP8) {
            const __nv_bfloat16* pool = static_cast<const __nv_bfloat16*>(p.pool);
            __nv_bfloat16* tile = reinterpret_cast<__nv_bfloat16*>(dst);
            for (int i = tid; i < BT * 64; i += C::kThreads) {
                const int r = i >> 6, c = i & 63, row = t * BT + r;
                const bool ok = row < n;
                const __nv_bfloat16* src = ok ? pool + offs[row] + c * 8 : pool;
                dev::cp_async16(tile + r * kRowStride + c * 8, src, ok ? 16 : 0);
            }
        } else {
            const unsigned char* pool = static_cast<const unsigned char*>(p.pool);
            for (int i = tid; i < BT * (kFp8Row / 8); i += C::kThreads) {
                const int r = i / (kFp8Row / 8), c = i % (kFp8Row / 8), row = t * BT + r;
                const bool ok = row < n;
                const unsigned char* src = ok ? pool + offs[row] + c * 8 : pool;
                dev::cp_async8(dst + r * kFp8Row + c * 8, src, ok ? 8 : 0);
            }
        }
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) load_tile(s, s);
        dev::cp_async_commit();
    }

    constexpr int kMT = HB / 16, kNT = C::kDW / 8;
    constexpr int kNPW = (BT / 8) * kMT / NW;  // S n-tiles per warp
    static_assert(NW % kMT == 0 && kNPW >= 1 && kNPW * NW == (BT / 8) * kMT);
    float acc[kMT][kNT][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.0f;

    const int g = lane >> 2, tq = lane & 3;
    for (int t = 0; t < n_tiles; ++t) {
        dev::cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (t + STAGES - 1 < n_tiles) load_tile(t + STAGES - 1, (t + STAGES - 1) % STAGES);
        dev::cp_async_commit();

        const __nv_bfloat16* kt;
        if constexpr (FP8) {
            const unsigned char* raw = stage_base + (t % STAGES) * C::kRawBytes;
            for (int i = tid; i < BT * 64; i += C::kThreads) {
                const int r = i >> 6, grp = i & 63;
                const unsigned char* rr = raw + r * kFp8Row;
                uint4 o;
                if (grp < 56) {
                    const uint2 v = *reinterpret_cast<const uint2*>(rr + grp * 8);
                    const float sc = dev::ue8m0(rr[576 + grp / 8]);
                    const float2 f0 = dev::fp8x2_to_float2(uint16_t(v.x & 0xffff));
                    const float2 f1 = dev::fp8x2_to_float2(uint16_t(v.x >> 16));
                    const float2 f2 = dev::fp8x2_to_float2(uint16_t(v.y & 0xffff));
                    const float2 f3 = dev::fp8x2_to_float2(uint16_t(v.y >> 16));
                    o.x = dev::pack_bf16x2(f0.x * sc, f0.y * sc);
                    o.y = dev::pack_bf16x2(f1.x * sc, f1.y * sc);
                    o.z = dev::pack_bf16x2(f2.x * sc, f2.y * sc);
                    o.w = dev::pack_bf16x2(f3.x * sc, f3.y * sc);
                } else {
                    const uint2 lo = *reinterpret_cast<const uint2*>(rr + 448 + (grp - 56) * 16);
                    const uint2 hi = *reinterpret_cast<const uint2*>(rr + 456 + (grp - 56) * 16);
                    o = make_uint4(lo.x, lo.y, hi.x, hi.y);
                }
                *reinterpret_cast<uint4*>(ktile_fp8 + r * kRowStride + grp * 8) = o;
            }
            __syncthreads();
            kt = ktile_fp8;
        } else {
            kt = reinterpret_cast<const __nv_bfloat16*>(stage_base + (t % STAGES) * C::kRawBytes);
        }

        // S = Q K^T over [HB x BT]: warp owns one m-tile and kNPW consecutive n-tiles, so each
        // Q fragment read from shared memory feeds kNPW mma.
        {
            const int mt = warp % kMT, nt0 = (warp / kMT) * kNPW;
            float c[kNPW][4];
#pragma unroll
            for (int j = 0; j < kNPW; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
            const __nv_bfloat16* qa = qs + (mt * 16 + (lane & 15)) * kRowStride + (lane >> 4) * 8;
            const __nv_bfloat16* kb = kt + (nt0 * 8 + (lane & 7)) * kRowStride + ((lane >> 3) & 1) * 8;
#pragma unroll 4
            for (int kk = 0; kk < kD / 16; ++kk) {
                uint32_t a[4];
                dev::ldmatrix_x4(a, qa + kk * 16);
#pragma unroll
                for (int j = 0; j < kNPW; ++j) {
                    uint32_t bb[2];
                    dev::ldmatrix_x2(bb, kb + j * 8 * kRowStride + kk * 16);
                    dev::mma_bf16_16816(c[j], a, bb[0], bb[1]);
                }
            }
#pragma unroll
            for (int j = 0; j < kNPW; ++j) {
                float* srow = s_sc + (mt * 16 + g) * C::kSS + (nt0 + j) * 8 + 2 * tq;
                srow[0] = c[j][0];
                srow[1] = c[j][1];
                srow[8 * C::kSS] = c[j][2];
                srow[8 * C::kSS + 1] = c[j][3];
            }
        }
        __syncthreads();

        // Online softmax, one warp per head (round-robin).
        for (int h = warp; h < HB; h += NW) {
            float v[BT / 32];
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < BT / 32; ++i) {
                const int j = lane + 32 * i;
                v[i] = (t * BT + j < n) ? s_sc[h * C::kSS + j] * p.scale_log2 : -INFINITY;
                mx = fmaxf(mx, v[i]);
            }
            mx = dev::warp_max(mx);
            const float m_old = m_s[h];
            const float m_new = fmaxf(m_old, mx);
            float alpha = 1.0f, sum = 0.0f;
            if (m_new != -INFINITY) alpha = exp2f(m_old - m_new);
#pragma unroll
            for (int i = 0; i < BT / 32; ++i) {
                const float pv = (m_new == -INFINITY) ? 0.0f : exp2f(v[i] - m_new);
                const __nv_bfloat16 pb = __float2bfloat16_rn(pv);
                p_s[h * C::kPS + lane + 32 * i] = pb;
                sum += __bfloat162float(pb);
            }
            sum = dev::warp_sum(sum);
            __syncwarp();
            if (lane == 0) {
                m_s[h] = m_new;
                l_s[h] = l_s[h] * alpha + sum;
                a_s[h] = alpha;
            }
        }
        __syncthreads();

        // O = alpha * O + P V.
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
            const float lo = a_s[mt * 16 + g], hi = a_s[mt * 16 + g + 8];
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
                acc[mt][nt][0] *= lo;
                acc[mt][nt][1] *= lo;
                acc[mt][nt][2] *= hi;
                acc[mt][nt][3] *= hi;
            }
        }
#pragma unroll
        for (int kk = 0; kk < BT / 16; ++kk) {
            uint32_t a[kMT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
                dev::ldmatrix_x4(a[mt], p_s + (mt * 16 + (lane & 15)) * C::kPS + kk * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < kNT / 2; ++np) {
                uint32_t bv[4];
                dev::ldmatrix_x4_trans(
                    bv, kt + (kk * 16 + (lane & 15)) * kRowStride + warp * C::kDW + np * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt) {
                    dev::mma_bf16_16816(acc[mt][2 * np], a[mt], bv[0], bv[1]);
                    dev::mma_bf16_16816(acc[mt][2 * np + 1], a[mt], bv[2], bv[3]);
                }
            }
        }
    }
    dev::cp_async_wait<0>();
    __syncthreads();

    // Epilogue: final output (one split) or the split's unnormalised partial + (m, l).
    const int h0 = hb * HB;
    if (p.n_splits == 1) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int h = mt * 16 + g + half * 8;
                const float m = m_s[h], sk = p.sink[h0 + h] * dev::kLog2e;
                const float M = fmaxf(m, sk);
                float f = 0.0f;
                if (M != -INFINITY) {
                    const float em = (m == -INFINITY) ? 0.0f : exp2f(m - M);
                    f = em / (l_s[h] * em + exp2f(sk - M));
                }
                __nv_bfloat16* o = p.out + (int64_t(b) * p.n_heads + h0 + h) * kD + warp * C::kDW + 2 * tq;
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
                    *reinterpret_cast<uint32_t*>(o + nt * 8) =
                        dev::pack_bf16x2(acc[mt][nt][2 * half] * f, acc[mt][nt][2 * half + 1] * f);
            }
        }
    } else {
        const int64_t base = (int64_t(b) * p.n_splits + split) * p.n_heads + h0;
        float* wo = p.ws + base * kD;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                float* o = wo + int64_t(mt * 16 + g + half * 8) * kD + warp * C::kDW + 2 * tq;
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
                    *reinterpret_cast<float2*>(o + nt * 8) =
                        make_float2(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
            }
        const int64_t ml = int64_t(gridDim.z) * p.n_splits * p.n_heads * kD;
        if (tid < HB) {
            p.ws[ml + base + tid] = m_s[tid];
            p.ws[ml + int64_t(gridDim.z) * p.n_splits * p.n_heads + base + tid] = l_s[tid];
        }
    }
}

// Merge split partials by log-sum-exp and fold in the sink. grid (n_heads, batch), 128 threads.
__global__ void __launch_bounds__(128) sparse_decode_combine_kernel(KernelArgs p, int batch) {
    dev::pdl_begin();
    const int h = blockIdx.x, b = blockIdx.y, S = p.n_splits, H = p.n_heads;
    const int64_t ml = int64_t(batch) * S * H * kD;
    const int64_t lo = ml + int64_t(batch) * S * H;
    const float sk = p.sink[h] * dev::kLog2e;
    float M = sk;
    for (int s = 0; s < S; ++s) M = fmaxf(M, p.ws[ml + (int64_t(b) * S + s) * H + h]);
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (M != -INFINITY) {
        float den = exp2f(sk - M);
        for (int s = 0; s < S; ++s) {
            const int64_t i = (int64_t(b) * S + s) * H + h;
            const float m = p.ws[ml + i];
            if (m == -INFINITY) continue;
            const float w = exp2f(m - M);
            den += w * p.ws[lo + i];
            const float4 v = reinterpret_cast<const float4*>(p.ws + i * kD)[threadIdx.x];
            o.x += w * v.x;
            o.y += w * v.y;
            o.z += w * v.z;
            o.w += w * v.w;
        }
        const float inv = 1.0f / den;
        o.x *= inv;
        o.y *= inv;
        o.z *= inv;
        o.w *= inv;
    }
    uint2 r = make_uint2(dev::pack_bf16x2(o.x, o.y), dev::pack_bf16x2(o.z, o.w));
    reinterpret_cast<uint2*>(p.out + (int64_t(b) * H + h) * kD)[threadIdx.x] = r;
}

}  // namespace dsv4::cuda::attn
