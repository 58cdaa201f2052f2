// Step 1 of the filtered lightning-indexer scores (indexer_filter.h): every closed row's score on the
// bf16 tensor cores with a proven error bound, and the launcher of the four steps.
//
// Layout: one CTA of 4 warps per plan entry (query token), walking 64-key tiles; a warp owns 16 keys
// (two groups of 8) and all 64 heads (4 tiles of 16). mma.sync m16n8k16 bf16 -> f32: M = 16 heads,
// N = 8 keys, K = 16 dims per step. Dims are relabelled so that lane t owns the contiguous run
// [t ID/4, (t + 1) ID/4) of every key row: at step s its B registers hold physical dims
// t ID/4 + 4s + {0, 1} (logical 2t, 2t + 1) and + {2, 3} (logical 2t + 8, 2t + 9), so a lane reads
// a key's run with 8-byte loads (one per step; rows are only 8-byte aligned in the page pool); q sits
// in shared memory in fragment order under the same relabelling (one 16-byte load per head tile and
// step), once as bf16(q) and once as bf16(q - bf16(q)).
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/ops/indexer_filter.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
constexpr int kThreads = 128;
constexpr int kKeys = 64;   // per CTA tile: 4 warps x 16
constexpr int kHeads = 64;  // head tiles of 16, zero past IH
constexpr int kMaxID = 128;
// The bound's factor on ||k|| sum_h |w_h| ||q_h|| (indexer_filter.h): 2 x the 2^-12 budget.
constexpr double kBoundFactor = 1.0 / 2048.0;
// Absolute part of the bound per unit of its weight (indexer_filter.h): values below f32's normal range
// (the split's remainder, bf16 inputs or products the tensor cores may flush) lose at most 2^-126 each.
constexpr double kFloorFactor = 0x1p-125;

// 16-byte groups of one (head tile, g, t): S16 steps, + 1 of padding (lanes g * 4 + t of a quarter
// warp then read 8 different 16-byte bank groups).
__host__ __device__ constexpr int frag_stride(int S16) { return S16 + 1; }
// uint4 index of lane (g, t)'s A fragment for head tile ht, step s.
__device__ __forceinline__ int frag_at(int ht, int g, int t, int s, int S16) {
    return ((ht * 8 + g) * 4 + t) * frag_stride(S16) + s;
}
size_t approx_smem_bytes(int ID) { return 2 * sizeof(uint4) * size_t(kHeads / 16) * 32 * size_t(frag_stride(ID / 16)); }

__device__ __forceinline__ uint16_t bf16_rn_bits(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

__global__ void __launch_bounds__(kThreads, 4)
    indexer_approx_kernel(StepPlan plan, PagePool pool, IndexerArgs a, float* lo_out) {
    dev::pdl_begin();
    const int se = blockIdx.x;
    if (a.t >= plan.n_tok[se]) return;
    const int64_t n_c = (plan.start_pos[se] + a.t + 1) / a.ratio;
    if (int64_t(blockIdx.y) * kKeys >= n_c || n_c <= a.topk) return;  // all selected: see indexer_select
    extern __shared__ __align__(16) uint4 qf[];                       // [2 (hi, lo)][4 ht][32 (g, t)][stride]
    __shared__ double s_norm_w[kHeads], s_w[kHeads];
    const int ID = a.ID, IH = a.IH, S16 = ID / 16, run = ID / 4;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int64_t tok = plan.tok_begin[se] + a.t;
    const float* q = a.q + tok * int64_t(IH) * ID;
    const float* hw = a.w + tok * IH;
    const int half = (kHeads / 16) * 32 * frag_stride(S16);  // uint4 per copy
    uint16_t* qh = reinterpret_cast<uint16_t*>(qf);
    uint16_t* ql = reinterpret_cast<uint16_t*>(qf + half);
    // Stage q: element (h, d) is register reg = 2 (j >= 2) + (h & 8 ? 1 : 0), half j & 1, of lane
    // (g = h & 7, t = d / run) at step s = (d % run) / 4, j = d % 4. Heads past IH are zeros.
    for (int e = tid; e < kHeads * ID; e += kThreads) {
        const int h = e / ID, d = e % ID;
        const float v = h < IH ? q[int64_t(h) * ID + d] : 0.0f;
        const uint16_t hi = bf16_rn_bits(v);
        const uint16_t lo = bf16_rn_bits(v - __uint_as_float(uint32_t(hi) << 16));  // v - hi is exact
        const int off = d % run, j = off % 4;
        const int reg = (j >= 2 ? 2 : 0) + ((h & 8) ? 1 : 0);
        const int at = frag_at(h >> 4, h & 7, d / run, off / 4, S16) * 8 + reg * 2 + (j & 1);
        qh[at] = hi, ql[at] = lo;
    }
    // |w_h| ||q_h|| per head (a warp per head, fixed order), in double: squares of tiny or huge q
    // neither underflow nor overflow there, so the bound below cannot vanish or saturate wrongly.
    for (int h = warp; h < kHeads; h += kThreads / 32) {
        double ss = 0.0;
        if (h < IH)
            for (int d = lane; d < ID; d += 32)
                ss = fma(double(q[int64_t(h) * ID + d]), double(q[int64_t(h) * ID + d]), ss);
        ss = warp_sum_d(ss);
        if (lane == 0) {
            const double w = h < IH ? fabs(double(hw[h])) : 0.0;
            s_norm_w[h] = w * sqrt(ss);
            s_w[h] = w;
        }
    }
    __syncthreads();
    double wq = 0.0, w1 = 0.0;  // sum_h |w_h| ||q_h||, sum_h |w_h|
    for (int h = 0; h < kHeads; ++h) wq += s_norm_w[h], w1 += s_w[h];
    // The bound per key is e = e_k ||k|| + e_1: the relative part (indexer_filter.h) plus the absolute
    // floors, per head 2^-126 x (sqrt(ID) (||k|| + ||q_h||) + 2 ID) weighted by |w_h| and doubled, and
    // 2^-142 for the f32 roundings of subnormal weighted terms and of the exact score, whatever the
    // weights. Both factors rounded up to f32, and every f32 step below rounds up: e stays an upper bound.
    const double sqrt_id = sqrt(double(ID));
    const float e_k = __double2float_ru(kBoundFactor * wq + kFloorFactor * sqrt_id * w1);
    const float e_1 = __double2float_ru(kFloorFactor * (sqrt_id * wq + 2.0 * ID * w1) + 0x1p-142);
    const float nk_floor = __double2float_ru(sqrt_id * 0x1p-63);
    float wh[4][2];  // weights of this lane's heads 16 ht + g (+ 8), 0 past IH
#pragma unroll
    for (int ht = 0; ht < 4; ++ht)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int h = 16 * ht + g + 8 * r;
            wh[ht][r] = h < IH ? hw[h] : 0.0f;
        }
    const int32_t* table = seq_table(plan, se);
    float* hi_row = a.scores + int64_t(se) * a.max_rows;
    float* lo_row = lo_out + int64_t(se) * a.max_rows;
    const uint4* fh = qf;
    const uint4* fl = qf + half;
    const int64_t stride = int64_t(gridDim.y) * kKeys;
    for (int64_t w0 = int64_t(blockIdx.y) * kKeys; w0 < n_c; w0 += stride) {
        // This lane's run of keys w0 + 16 warp + 8 kg + g, and their squared norms over the 4 lanes t.
        uint2 kb[2][kMaxID / 16];  // [kg][step]: .x = b0, .y = b1
        // Squares of bf16 values are exact in f32 unless they leave f32's normal range: each loses at
        // most 2^-126 below it (the norm's floor below) and overflows to +inf above it (no bound: listed).
        float nk2[2];
#pragma unroll
        for (int kg = 0; kg < 2; ++kg) {
            const int64_t w = w0 + warp * 16 + kg * 8 + g;
            const uint2* kr = nullptr;
            if (w < n_c)
                kr = reinterpret_cast<const uint2*>(reinterpret_cast<const uint16_t*>(comp_row_ptr(
                                                        pool, table, a.ratio, a.idx_row_off, pool.index.words, w)) +
                                                    t * run);
            float ss = 0.0f;
#pragma unroll
            for (int j = 0; j < kMaxID / 16; ++j) {
                kb[kg][j] = kr && j < S16 ? __ldg(kr + j) : make_uint2(0, 0);
                const uint32_t u[2] = {kb[kg][j].x, kb[kg][j].y};
#pragma unroll
                for (int c = 0; c < 2; ++c)
                    ss = fmaf(bf16_lo(u[c]), bf16_lo(u[c]), fmaf(bf16_hi(u[c]), bf16_hi(u[c]), ss));
            }
            ss += __shfl_xor_sync(0xffffffffu, ss, 1);
            ss += __shfl_xor_sync(0xffffffffu, ss, 2);
            nk2[kg] = ss;
        }
        float acc[4][2][4];
#pragma unroll
        for (int ht = 0; ht < 4; ++ht)
#pragma unroll
            for (int kg = 0; kg < 2; ++kg) acc[ht][kg][0] = acc[ht][kg][1] = acc[ht][kg][2] = acc[ht][kg][3] = 0.0f;
#pragma unroll
        for (int s = 0; s < kMaxID / 16; ++s) {
            if (s >= S16) break;
            uint32_t b0[2], b1[2];
#pragma unroll
            for (int kg = 0; kg < 2; ++kg) b0[kg] = kb[kg][s].x, b1[kg] = kb[kg][s].y;
#pragma unroll
            for (int ht = 0; ht < 4; ++ht) {
                if (16 * ht >= IH) break;  // padded head tiles: q = 0, weight 0
                const int at = frag_at(ht, g, t, s, S16);
                const uint4 h4 = fh[at], l4 = fl[at];
                const uint32_t ah[4] = {h4.x, h4.y, h4.z, h4.w}, al[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
                for (int kg = 0; kg < 2; ++kg) {
                    dev::mma_bf16_16816(acc[ht][kg], al, b0[kg], b1[kg]);
                    dev::mma_bf16_16816(acc[ht][kg], ah, b0[kg], b1[kg]);
                }
            }
        }
        // acc[ht][kg][2 r + i] ~ q_(16 ht + g + 8 r) . k_(key 2 t + i of group kg): ReLU, head weights,
        // the sum over the 8 lanes sharing t; the bound from that key's norm (held by lanes 4 (2t + i)).
#pragma unroll
        for (int kg = 0; kg < 2; ++kg)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                float v = 0.0f;
#pragma unroll
                for (int ht = 0; ht < 4; ++ht)
#pragma unroll
                    for (int r = 0; r < 2; ++r) v = fmaf(wh[ht][r], fmaxf(0.0f, acc[ht][kg][2 * r + i]), v);
#pragma unroll
                for (int o = 4; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
                // An upper bound on ||k||: the f32 sum of ID squares is within (ID - 1) 2^-24 < 2^-16 of
                // the exact one (relative), and squares below f32's normal range lose < ID 2^-126 in all.
                const float ss = __shfl_sync(0xffffffffu, nk2[kg], 4 * (2 * t + i));
                const float nk = __fadd_ru(__fsqrt_ru(__fmul_ru(ss, 1.0f + 0x1p-16f)), nk_floor);
                const int64_t w = w0 + warp * 16 + kg * 8 + 2 * t + i;
                if (g == 0 && w < n_c) {
                    const float ef = __fmaf_ru(e_k, nk, e_1);  // +inf for huge keys or q: always listed
                    if (isfinite(v)) {
                        hi_row[w] = __fadd_ru(v, ef);
                        lo_row[w] = __fsub_rd(v, ef);
                    } else {  // the f32 head sum overflowed (or a NaN): no bound; the row is always listed
                        hi_row[w] = __int_as_float(0x7fc00000);
                        lo_row[w] = -INFINITY;
                    }
                }
            }
    }
}
}  // namespace

bool indexer_filter_applies(const PagePool& pool, const IndexerArgs& a) {
    return pool.index.fmt == 1 && a.IH <= kHeads && a.ID % 32 == 0 && a.ID <= kMaxID &&
           ((a.idx_row_off | pool.page_elems | pool.index.words) & 1) == 0 &&
           (reinterpret_cast<uintptr_t>(pool.base) & 7) == 0;
}

cudaError_t indexer_bounds(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, const IndexerFilter& f,
                           cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.max_rows <= 0) return cudaSuccess;
    if (!indexer_filter_applies(pool, a) || !f.lo || !f.n_cand) return cudaErrorInvalidValue;
    const size_t smem = approx_smem_bytes(a.ID);
    DSV4_CUDA_RET(cudaFuncSetAttribute(indexer_approx_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int dev = 0, sms = 132;
    DSV4_CUDA_RET(cudaGetDevice(&dev));
    DSV4_CUDA_RET(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    // As indexer_scores: one wave of CTAs (4 per SM), each walking its tiles, never more than the tiles.
    const int64_t tiles = (a.max_rows + kKeys - 1) / kKeys;
    int64_t gy = 4 * int64_t(sms) / plan.n_seqs;
    gy = gy < 1 ? 1 : (gy > tiles ? tiles : gy);
    indexer_approx_kernel<<<dim3(unsigned(plan.n_seqs), unsigned(gy)), kThreads, smem, st>>>(plan, pool, a, f.lo);
    return cudaGetLastError();
}

cudaError_t indexer_topk_filtered(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a,
                                  const IndexerFilter& f, cudaStream_t st) {
    DSV4_CUDA_RET(indexer_bounds(plan, pool, a, f, st));
    DSV4_CUDA_RET(indexer_candidates(plan, a, f, st));
    DSV4_CUDA_RET(indexer_scores_listed(plan, pool, a, f, st));
    return indexer_select_listed(plan, a, f, st);
}

}  // namespace dsv4::cuda
