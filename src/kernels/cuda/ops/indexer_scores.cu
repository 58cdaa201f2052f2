// Lightning-indexer scores (spec §2.8 step 3): I(p, w) = sum_h w_h * ReLU(q_h . k_w) for every closed
// indexer row w < n_c of a sequence's token step when n_c > topk (at most topk closed rows are all
// selected without scores: ref::index_select, indexer_select), in double precision like ref: each q_h . k_w is a
// sum of exact f32 x f32 products, so the f32 score matches the CPU reference except for the final
// rounding of a double sum taken in another order (the top-k that follows is exact over these f32
// scores, so CPU and GPU select the same rows).
//
// Main form (IH <= 64 heads, ID a multiple of 32 up to 128): FP64 tensor cores, mma.sync m16n8k8
// f64 (indexer_score_dmma16_kernel below). Why: the indexer is a batched [64 heads x 128] x [128 x n_c]
// product per sequence; with DFMA on CUDA cores and shared-memory operands (the session-3 "tiled" form)
// it ran at ~5 TFLOP/s and cost 445 us per CSA layer at batch 64 and 8K context, about 12% of the
// decode step (docs/perf/ledger.md E16). Measured there: the Ampere shape m8n8k4 ~105 us, m16n8k8 ~70
// us per CSA layer (the m8n8k4 kernel was then removed). Bound: FP64 tensor throughput at peak would
// be ~32 us; measured at ~0.2 of it, not yet profiled.
// Other shapes: one warp per key, double FMAs on CUDA cores (general, slow).
#include "kernels/cuda/ops/common.cuh"
#include "kernels/cuda/ops/indexer_filter.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {

namespace {
constexpr int kKeysPerCta = 64;
constexpr int kScoreThreads = 256;

// ---- general form: one warp per key ---------------------------------------------------------
__global__ void indexer_score_kernel(StepPlan plan, PagePool pool, IndexerArgs a) {
    dev::pdl_begin();
    const int s = blockIdx.x;
    if (a.t >= plan.n_tok[s]) return;
    const int64_t p = plan.start_pos[s] + a.t;
    const int64_t n_c = (p + 1) / a.ratio;
    const int64_t w0 = int64_t(blockIdx.y) * kKeysPerCta;
    if (w0 >= n_c || n_c <= a.topk) return;  // every row selected: no scores needed (indexer_select)
    extern __shared__ float sm[];
    const int ldq = a.ID + 1;
    float* qs = sm;  // [IH, ID + 1]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float* kw = sm + int64_t(a.IH) * ldq + int64_t(warp) * a.ID;  // this warp's key row [ID]
    const int64_t tok = plan.tok_begin[s] + a.t;
    const float* q = a.q + tok * int64_t(a.IH) * a.ID;
    const float* hw = a.w + tok * a.IH;
    for (int i = threadIdx.x; i < a.IH * a.ID; i += blockDim.x) qs[(i / a.ID) * ldq + i % a.ID] = q[i];
    __syncthreads();
    const int32_t* table = seq_table(plan, s);
    float* scores = a.scores + int64_t(s) * a.max_rows;
    const int64_t w_end = n_c < w0 + kKeysPerCta ? n_c : w0 + kKeysPerCta;
    for (int64_t w = w0 + warp; w < w_end; w += nw) {
        for (int i = lane; i < a.ID; i += 32) kw[i] = load_row(pool, table, a.ratio, a.idx_row_off, pool.index, w, i);
        __syncwarp();
        double acc = 0.0;
        for (int h = lane; h < a.IH; h += 32) {
            const float* qh = qs + h * ldq;
            double dot = 0.0;
            for (int i = 0; i < a.ID; ++i) dot += double(qh[i]) * double(kw[i]);
            acc += double(hw[h]) * fmax(0.0, dot);
        }
        acc = warp_sum_d(acc);
        if (lane == 0) scores[w] = float(acc);
        __syncwarp();
    }
}

// ---- FP64 tensor-core form -----------------------------------------------------------------
constexpr int kMmaHeads = 64;  // head tiles of 8, zero-padded past IH
constexpr int kMmaMaxID = 128;
constexpr int kMmaThreads = 128;
constexpr int kMmaKeys = 64;  // keys per CTA tile: 4 warps x 16

// Thread roles: CTA = 4 warps over 64 keys (a warp owns 16 keys: two 8-key groups, all 64 heads as 4
// head tiles of 16); one wave of CTAs walks the 64-key tiles blockIdx.y, blockIdx.y + gridDim.y, ...
// so the grid is bounded by the SMs, not by the longest context. mma m16n8k8 f64: M = 16 heads,
// N = 8 keys, K = 8 dims per step. Fragments: A a0 (g, t), a1 (g+8, t), a2 (g, t+4),
// a3 (g+8, t+4); B b0 (t, g), b1 (t+4, g); C (g, 2t+i), (g+8, 2t+i). Dims relabelled as physical
// S8 kappa + s for slot kappa of step s (S8 = ID / 8), so lane t's B values are two contiguous runs
// of its key row (dims S8 t + s and S8 (t + 4) + s). q sits in shared memory in fragment order: lane
// (g, t)'s four A values of head tile ht and step s (a0..a3) are 32 contiguous bytes at
// qs_lane(ht, g, t, s, S8) (two 16-byte loads straight into the DMMA's register quad; the previous
// [head][dim] layout cost ~12 register moves per pair of DMMAs, ncu in ledger E53); rows of g are
// 16 bytes further apart than a multiple of 128, so a quarter-warp's loads touch every bank once.
// Epilogue: ReLU and head weights per lane (its 8 heads), then a fixed shuffle tree over the 8 lanes
// sharing t (deterministic). kList (indexer_filter.h): the tiles walk the entry's candidate list
// (row ids list[0 .. n_list)) instead of rows 0 .. n_c, and the score of list entry i goes to
// position i of the score row; each row's arithmetic is the same.
__device__ __forceinline__ void dmma_16888(double (&d)[4], const double (&a)[4], double b0, double b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b0), "d"(b1));
}

// Doubles per (head tile, g) group of the fragment-order q: S8 steps x 4 lanes t x 4 values, + 2 pad.
__host__ __device__ constexpr int dmma16_group(int S8) { return 16 * S8 + 2; }
// Index of a0 of lane (g, t) for head h = 16 ht + g (+ 8: a1/a3) and step s; the value of head h and
// slot kappa (dim S8 kappa + s) is at qs_frag(h, kappa, s).
__device__ __forceinline__ int qs_lane(int ht, int g, int t, int s, int S8) {
    return (8 * ht + g) * dmma16_group(S8) + 16 * s + 4 * t;
}
__device__ __forceinline__ int qs_frag(int h, int kappa, int s, int S8) {
    return qs_lane(h >> 4, h & 7, kappa & 3, s, S8) + ((h >> 3) & 1) + 2 * (kappa >> 2);
}
size_t dmma16_smem_bytes(int ID) { return sizeof(double) * size_t(kMmaHeads / 2) * size_t(dmma16_group(ID / 8)); }

template <bool kList>
__global__ void __launch_bounds__(kMmaThreads, 3)
    indexer_score_dmma16_kernel(StepPlan plan, PagePool pool, IndexerArgs a, const int32_t* list,
                                const int32_t* n_list) {
    dev::pdl_begin();
    const int s = blockIdx.x;
    if (a.t >= plan.n_tok[s]) return;
    const int64_t n_rows = (plan.start_pos[s] + a.t + 1) / a.ratio;
    if (n_rows <= a.topk) return;  // all selected: see indexer_select
    // Tiles cover entries 0 .. n_c of the row ids (the rows themselves, or the candidate list).
    const int64_t n_c = kList ? int64_t(n_list[s]) : n_rows;
    const int32_t* ids = kList ? list + int64_t(s) * a.max_rows : nullptr;
    auto row_id = [&](int64_t i) -> int64_t { return kList ? int64_t(ids[i]) : i; };
    if (int64_t(blockIdx.y) * kMmaKeys >= n_c) return;
    extern __shared__ __align__(16) double qs[];  // fragment order, see qs_frag
    const int ID = a.ID, IH = a.IH, S8 = ID / 8;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int64_t tok = plan.tok_begin[s] + a.t;
    const float* q = a.q + tok * int64_t(IH) * ID;
    {
        const int n4 = kMmaHeads * ID / 4;
        const bool q_aligned = (reinterpret_cast<uintptr_t>(q) & 15) == 0;
        constexpr int kBatch = 8;
        for (int e0 = tid; e0 < n4; e0 += kMmaThreads * kBatch) {
            float4 v[kBatch];
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int e = e0 + b * kMmaThreads, h = e / (ID / 4);
                v[b] = make_float4(0, 0, 0, 0);
                if (e < n4 && h < IH) {
                    const float* p = q + int64_t(e) * 4;
                    v[b] = q_aligned ? *reinterpret_cast<const float4*>(p) : make_float4(p[0], p[1], p[2], p[3]);
                }
            }
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int e = e0 + b * kMmaThreads;
                if (e >= n4) break;
                // dims d..d+3: slot kappa = d / S8, steps s4..s4+3 (S8 % 4 == 0)
                const int h = e / (ID / 4), d = (e % (ID / 4)) * 4, kappa = d / S8, s4 = d % S8;
                double* dst = qs + qs_frag(h, kappa, s4, S8);  // steps s4 .. s4 + 3: 16 doubles apart
                dst[0] = v[b].x, dst[16] = v[b].y, dst[32] = v[b].z, dst[48] = v[b].w;
            }
        }
    }
    double wh[4][2];  // weights of this lane's heads 16 ht + g (+ 8), 0 past IH
#pragma unroll
    for (int ht = 0; ht < 4; ++ht)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int h = 16 * ht + g + 8 * r;
            wh[ht][r] = h < IH ? double(a.w[tok * IH + h]) : 0.0;
        }
    __syncthreads();
    const int32_t* table = seq_table(plan, s);
    float* scores = a.scores + int64_t(s) * a.max_rows;
    const bool bf16_rows = pool.index.fmt == 1 && ((a.idx_row_off | pool.page_elems | pool.index.words) & 1) == 0;
    const int n_chunks = S8 / 4;  // 4 steps per chunk: 4 contiguous dims of each of the lane's two runs
    const int64_t stride = int64_t(gridDim.y) * kMmaKeys;
    auto tile_rows = [&](int64_t w0, const float*(&r)[2]) {
#pragma unroll
        for (int kg = 0; kg < 2; ++kg) {
            const int64_t w = w0 + warp * 16 + kg * 8 + g;
            r[kg] = w < n_c ? comp_row_ptr(pool, table, a.ratio, a.idx_row_off, pool.index.words, row_id(w)) : nullptr;
        }
    };
    // v[kg][run]: dims S8 (t + 4 run) + 4 c .. + 3 of key group kg (8-byte loads, one chunk ahead).
    auto load_chunk = [&](const float* const(&r)[2], int c, uint2(&v)[2][2]) {
#pragma unroll
        for (int kg = 0; kg < 2; ++kg)
#pragma unroll
            for (int run = 0; run < 2; ++run)
                v[kg][run] = r[kg] ? *reinterpret_cast<const uint2*>(reinterpret_cast<const uint16_t*>(r[kg]) +
                                                                     S8 * (t + 4 * run) + 4 * c)
                                   : make_uint2(0, 0);
    };
    const float* row[2];
    tile_rows(int64_t(blockIdx.y) * kMmaKeys, row);
    uint2 next[2][2] = {{make_uint2(0, 0), make_uint2(0, 0)}, {make_uint2(0, 0), make_uint2(0, 0)}};
    if (bf16_rows) load_chunk(row, 0, next);
    for (int64_t w0 = int64_t(blockIdx.y) * kMmaKeys; w0 < n_c; w0 += stride) {
        const float* nrow[2];
        tile_rows(w0 + stride, nrow);
        double acc[4][2][4];
#pragma unroll
        for (int ht = 0; ht < 4; ++ht)
#pragma unroll
            for (int kg = 0; kg < 2; ++kg) acc[ht][kg][0] = acc[ht][kg][1] = acc[ht][kg][2] = acc[ht][kg][3] = 0.0;
#pragma unroll 1
        for (int c = 0; c < n_chunks; ++c) {
            double b[2][2][4];  // [kg][run][step j]
            if (bf16_rows) {
                uint2 cur[2][2];
#pragma unroll
                for (int kg = 0; kg < 2; ++kg) cur[kg][0] = next[kg][0], cur[kg][1] = next[kg][1];
                if (c + 1 < n_chunks)
                    load_chunk(row, c + 1, next);
                else
                    load_chunk(nrow, 0, next);
#pragma unroll
                for (int kg = 0; kg < 2; ++kg)
#pragma unroll
                    for (int run = 0; run < 2; ++run) {
                        b[kg][run][0] = double(__uint_as_float(cur[kg][run].x << 16));
                        b[kg][run][1] = double(__uint_as_float(cur[kg][run].x & 0xffff0000u));
                        b[kg][run][2] = double(__uint_as_float(cur[kg][run].y << 16));
                        b[kg][run][3] = double(__uint_as_float(cur[kg][run].y & 0xffff0000u));
                    }
            } else {
#pragma unroll
                for (int kg = 0; kg < 2; ++kg)
#pragma unroll
                    for (int run = 0; run < 2; ++run)
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            b[kg][run][j] =
                                row[kg] ? double(row_elem(row[kg], pool.index, S8 * (t + 4 * run) + 4 * c + j)) : 0.0;
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int ht = 0; ht < 4; ++ht) {
                    if (16 * ht >= IH) break;  // padded head tiles: q = 0, weight 0
                    const double* fa = qs + qs_lane(ht, g, t, 4 * c + j, S8);
                    const double2 a01 = *reinterpret_cast<const double2*>(fa);
                    const double2 a23 = *reinterpret_cast<const double2*>(fa + 2);
                    const double av[4] = {a01.x, a01.y, a23.x, a23.y};
                    dmma_16888(acc[ht][0], av, b[0][0][j], b[0][1][j]);
                    dmma_16888(acc[ht][1], av, b[1][0][j], b[1][1][j]);
                }
            }
        }
        // acc[ht][kg][2 r + i] = q_(16 ht + g + 8 r) . k_(key 2 t + i of group kg).
        double part[2][2];
#pragma unroll
        for (int kg = 0; kg < 2; ++kg)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                double v = 0.0;
#pragma unroll
                for (int ht = 0; ht < 4; ++ht)
#pragma unroll
                    for (int r = 0; r < 2; ++r) v += wh[ht][r] * fmax(0.0, acc[ht][kg][2 * r + i]);
#pragma unroll
                for (int o = 4; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
                part[kg][i] = v;
            }
        if (g == 0) {
#pragma unroll
            for (int kg = 0; kg < 2; ++kg)
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int64_t w = w0 + warp * 16 + kg * 8 + 2 * t + i;
                    if (w < n_c) scores[w] = float(part[kg][i]);
                }
        }
        row[0] = nrow[0], row[1] = nrow[1];
    }
}

// The FP64 tensor-core form over the rows (list null) or each entry's candidate list.
cudaError_t launch_dmma16(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, const int32_t* list,
                          const int32_t* n_list, cudaStream_t st) {
    auto* kernel = list ? indexer_score_dmma16_kernel<true> : indexer_score_dmma16_kernel<false>;
    const size_t smem = dmma16_smem_bytes(a.ID);
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    int dev = 0, sms = 132;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    // 3 CTAs per SM fit (66 KB of q, 168 registers): one wave of CTAs, each walking its tiles
    // (a partial second wave would leave most SMs idle at its end), never more CTAs than tiles.
    const int64_t tiles = (a.max_rows + kMmaKeys - 1) / kMmaKeys;
    int64_t gy = 3 * int64_t(sms) / plan.n_seqs;
    gy = gy < 1 ? 1 : (gy > tiles ? tiles : gy);
    kernel<<<dim3(unsigned(plan.n_seqs), unsigned(gy)), kMmaThreads, smem, st>>>(plan, pool, a, list, n_list);
    return cudaGetLastError();
}
}  // namespace

cudaError_t indexer_scores_listed(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a,
                                  const IndexerFilter& f, cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.max_rows <= 0) return cudaSuccess;
    if (!(a.IH <= kMmaHeads && a.ID % 32 == 0 && a.ID <= kMmaMaxID)) return cudaErrorInvalidValue;
    return launch_dmma16(plan, pool, a, reinterpret_cast<const int32_t*>(f.lo), f.n_cand, st);
}

cudaError_t indexer_scores(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, cudaStream_t st) {
    if (plan.n_seqs <= 0 || a.max_rows <= 0) return cudaSuccess;
    if (a.IH <= kMmaHeads && a.ID % 32 == 0 && a.ID <= kMmaMaxID)
        return launch_dmma16(plan, pool, a, nullptr, nullptr, st);
    const size_t smem = sizeof(float) * (size_t(a.IH) * size_t(a.ID + 1) + size_t(kScoreThreads / 32) * size_t(a.ID));
    if (smem > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(indexer_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (e != cudaSuccess) return e;
    }
    const dim3 grid(unsigned(plan.n_seqs), unsigned((a.max_rows + kKeysPerCta - 1) / kKeysPerCta));
    indexer_score_kernel<<<grid, kScoreThreads, smem, st>>>(plan, pool, a);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
