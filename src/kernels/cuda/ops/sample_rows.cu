// sample_rows: the host sampler (src/sample/sampler.cpp) on the device, one CTA per row. See
// sample_rows.h for what matches the host bit for bit and the tie rule where float sums differ.
//
// Every reduction below has a fixed order (butterfly shuffles, then a fold over the warps in warp
// order), so a seeded row gives the same token run to run. top_k / top_p / the filtered draw are
// all "the first element of the order (weight desc, id asc) where a count or a cumulative weight
// reaches a goal": found by a radix descent over the weight's bits (8 passes of 4 bits, per-digit
// counts and double sums), then the ties at the found weight in id order; no sort of the vocabulary.
#include "kernels/cuda/ops/sample_rows.h"

#include <climits>
#include <cstdint>

#include "core/philox.h"
#include "kernels/cuda/common/pdl.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32, kDigits = 16;
constexpr float kMinLogprob = -1.0e30f;
constexpr float kInf = __builtin_huge_valf();

struct Small {
    double d[kWarps];
    unsigned long long u[kWarps];
    int i[kWarps];
    double dsum[kDigits];
    int dcnt[kDigits];
    double warp_total[kWarps];
    int found;
    int pend_j;        // entry of the pending token, -1: not listed
    float pend_saved;  // its raw logit when it is not listed (restored at the end)
};

template <class T, class F>
__device__ T block_reduce(T v, F op, T* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o; o >>= 1) v = op(v, __shfl_xor_sync(~0u, v, o));
    __syncthreads();  // sh may still be read by the previous call
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    T r = sh[0];
    for (int w = 1; w < kWarps; ++w) r = op(r, sh[w]);
    return r;
}
__device__ double dadd(double a, double b) { return a + b; }
__device__ int iadd(int a, int b) { return a + b; }
__device__ int imin(int a, int b) { return a < b ? a : b; }
__device__ int imax(int a, int b) { return a > b ? a : b; }
__device__ float fmx(float a, float b) { return fmaxf(a, b); }  // NaN-skipping
__device__ unsigned long long umax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// Orders (value desc, id asc) as one unsigned key; 0 = NaN (never a candidate).
__device__ unsigned long long rank_key(float v, int i) {
    if (isnan(v)) return 0ull;
    uint32_t b = __float_as_uint(v);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return (static_cast<unsigned long long>(b) << 32) | static_cast<uint32_t>(~uint32_t(i));
}
__device__ int key_id(unsigned long long k) { return int(~uint32_t(k)); }

__device__ float finite_logprob(double lp) {
    if (!isfinite(lp)) return kMinLogprob;
    return fmaxf(float(lp), kMinLogprob);
}

// Argmax of x (NaN skipped, lowest id on ties); 0 when every entry is NaN, as the host's argmax.
__device__ int block_argmax(const float* x, int V, Small& sm) {
    unsigned long long best = 0;
    for (int i = threadIdx.x; i < V; i += kThreads) best = umax(best, rank_key(x[i], i));
    best = block_reduce(best, umax, sm.u);
    return best ? key_id(best) : 0;
}

// The kept set: positive weights >= min_p, and (when `on`) not after (w, i) in the order.
struct Cut {
    bool on = false;
    float w = 0.0f;
    int i = 0;
};
__device__ bool kept(float w, int i, float min_p, Cut c) {
    return w > 0.0f && w >= min_p && (!c.on || w > c.w || (w == c.w && i <= c.i));
}

// The first kept element, in order, where (by_sum) the running weight reaches `goal` or (else)
// the running count reaches k (1-based). by_sum and never reached (rounding): the last kept one.
__device__ Cut select(const float* W, int V, float min_p, Cut cut, bool by_sum, double goal, int k, double* bsum,
                      int* bcnt, Small& sm) {
    const int tid = threadIdx.x;
    uint32_t pre = 0, hmask = 0;
    int rem = k, n_at = 0;
    double acc = 0.0;
    bool fallback = false;
    for (int p = 0; p < 8; ++p) {
        const int shift = 28 - 4 * p;
        for (int d = 0; d < kDigits; ++d) bsum[d * kThreads + tid] = 0.0, bcnt[d * kThreads + tid] = 0;
        for (int i = tid; i < V; i += kThreads) {
            const float w = W[i];
            if (!kept(w, i, min_p, cut)) continue;
            const uint32_t key = __float_as_uint(w);
            if ((key & hmask) != pre) continue;
            const int d = int((key >> shift) & 15u);
            bsum[d * kThreads + tid] += double(w);
            bcnt[d * kThreads + tid] += 1;
        }
        __syncthreads();
        {  // warp d totals digit d over the 512 per-thread bins
            const int d = tid >> 5, lane = tid & 31;
            double s = 0.0;
            int c = 0;
            for (int j = 0; j < kThreads / 32; ++j) {
                s += bsum[d * kThreads + lane * (kThreads / 32) + j];
                c += bcnt[d * kThreads + lane * (kThreads / 32) + j];
            }
            for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o), c += __shfl_xor_sync(~0u, c, o);
            if (lane == 0) sm.dsum[d] = s, sm.dcnt[d] = c;
        }
        __syncthreads();
        int sel = -1;
        if (!fallback) {
            for (int d = kDigits - 1; d >= 0; --d) {
                if (sm.dcnt[d] == 0) continue;
                if (by_sum ? acc + sm.dsum[d] >= goal : sm.dcnt[d] >= rem) {
                    sel = d;
                    break;
                }
                if (by_sum)
                    acc += sm.dsum[d];
                else
                    rem -= sm.dcnt[d];
            }
            if (sel < 0) fallback = true;
        }
        if (fallback)
            for (int d = 0; d < kDigits && sel < 0; ++d)
                if (sm.dcnt[d] > 0) sel = d;
        if (sel < 0) return cut;  // nothing kept (the caller checked there is)
        pre |= uint32_t(sel) << shift;
        hmask |= 15u << shift;
        n_at = sm.dcnt[sel];
        __syncthreads();  // dcnt/dsum are rewritten next pass
    }
    const float cw = __uint_as_float(pre);
    int j = n_at - 1;  // which tie (0-based, id order)
    if (!fallback) {
        if (by_sum) {
            double c = acc;
            for (int t = 0; t < n_at; ++t) {
                c += double(cw);
                if (c >= goal) {
                    j = t;
                    break;
                }
            }
        } else {
            j = rem - 1;
        }
    }
    auto at = [&](int i) { return i < V && W[i] == cw && kept(W[i], i, min_p, cut); };
    int ci = -1;
    if (n_at == 1) {
        int mine = -1;
        for (int i = tid; i < V; i += kThreads)
            if (at(i)) mine = i;
        ci = block_reduce(mine, imax, sm.i);
    } else {
        const int lane = tid & 31, warp = tid >> 5;
        int seen = 0;
        for (int base = 0; base < V; base += kThreads) {
            const bool f = at(base + tid);
            const unsigned bal = __ballot_sync(~0u, f);
            __syncthreads();
            if (lane == 0) sm.i[warp] = __popc(bal);
            __syncthreads();
            int before = 0, tile = 0;
            for (int w = 0; w < kWarps; ++w) {
                before += w < warp ? sm.i[w] : 0;
                tile += sm.i[w];
            }
            if (seen + tile > j) {
                const int rank = seen + before + __popc(bal & ((1u << lane) - 1u));
                if (f && rank == j) sm.found = base + tid;
                __syncthreads();
                ci = sm.found;
                break;
            }
            seen += tile;
        }
    }
    return Cut{true, cw, ci};
}

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(float* logits, int64_t V64, const SampleRowArgs* args, const SamplePenaltyToken* toks,
                       float* weights, float* saved, SampleRowOut* outs, const int32_t* step_tokens) {
    dev::pdl_begin();
    extern __shared__ __align__(16) unsigned char dyn[];
    double* bsum = reinterpret_cast<double*>(dyn);
    int* bcnt = reinterpret_cast<int*>(bsum + kDigits * kThreads);
    __shared__ Small sm;
    const SampleRowArgs a = args[blockIdx.x];
    const int V = int(V64), tid = threadIdx.x;
    float* L = logits + int64_t(a.row) * V64;
    float* W = weights + int64_t(blockIdx.x) * V64;
    SampleRowOut* out = outs + blockIdx.x;

    // Logprobs of the model's own distribution (raw logits, before penalties).
    double lse = 0.0;
    if (a.logprobs >= 0) {
        float m = -kInf;
        for (int i = tid; i < V; i += kThreads) m = fmaxf(m, L[i]);
        m = block_reduce(m, fmx, reinterpret_cast<float*>(sm.i));
        if (!isfinite(m)) {
            lse = double(m);
        } else {
            double s = 0.0;
            for (int i = tid; i < V; i += kThreads)
                if (L[i] > -kInf) s += exp(double(L[i]) - double(m));
            s = block_reduce(s, dadd, sm.d);
            lse = double(m) + log(s);
        }
        unsigned long long prev = ~0ull;
        int n_top = 0;
        const int k = a.logprobs < kSampleMaxTopLogprobs ? a.logprobs : kSampleMaxTopLogprobs;
        for (int t = 0; t < k; ++t) {
            unsigned long long best = 0;
            for (int i = tid; i < V; i += kThreads) {
                const unsigned long long key = rank_key(L[i], i);
                if (key < prev) best = umax(best, key);
            }
            best = block_reduce(best, umax, sm.u);
            if (!best) break;
            prev = best;
            if (tid == 0) {
                const int id = key_id(best);
                out->top_token[n_top] = id;
                out->top_logprob[n_top] = finite_logprob(double(L[id]) - lse);
            }
            ++n_top;
        }
        if (tid == 0) out->n_top = n_top;
    }

    // The pending output token (SampleRowArgs::pending_index): counted as the host would have
    // counted it, in its entry (ids are unique, so one thread at most finds it) or as one more.
    const bool rep = a.repetition_penalty != 1.0f,
               pres_freq = a.presence_penalty != 0.0f || a.frequency_penalty != 0.0f;
    int pend = -1;
    if (a.pending_index >= 0 && step_tokens && (rep || pres_freq)) {
        pend = step_tokens[a.pending_index];
        if (tid == 0) sm.pend_j = -1;
        __syncthreads();
        for (int j = tid; j < a.n_tok; j += kThreads)
            if (toks[a.tok_begin + j].token == pend) sm.pend_j = j;
        __syncthreads();
        if (pend < 0 || pend >= V) pend = -1;
    }
    const int pend_j = pend >= 0 ? sm.pend_j : -1;
    auto penalise = [&](float l, const SamplePenaltyToken& pt) {
        if (pt.bias != 0.0f) l = __fadd_rn(l, pt.bias);
        if (rep && pt.seen) l = l > 0 ? __fdiv_rn(l, a.repetition_penalty) : __fmul_rn(l, a.repetition_penalty);
        if (pres_freq && pt.output_count > 0)
            l = __fsub_rn(__fsub_rn(l, __fmul_rn(a.frequency_penalty, float(pt.output_count))), a.presence_penalty);
        if (pt.masked) l = -kInf;
        return l;
    };
    // Penalties and stop masking on the raw logits, in place (restored below); the same float
    // operations as the host's, unfused.
    for (int j = tid; j < a.n_tok; j += kThreads) {
        SamplePenaltyToken pt = toks[a.tok_begin + j];
        if (pt.token < 0 || pt.token >= V) continue;
        if (j == pend_j) {
            if (rep) pt.seen = 1;
            if (pres_freq) ++pt.output_count;
        }
        const float l = L[pt.token];
        saved[a.tok_begin + j] = l;
        L[pt.token] = penalise(l, pt);
    }
    if (pend >= 0 && pend_j < 0 && tid == 0) {
        SamplePenaltyToken pt;
        pt.token = pend;
        pt.seen = rep;
        pt.output_count = pres_freq ? 1 : 0;
        sm.pend_saved = L[pend];
        L[pend] = penalise(sm.pend_saved, pt);
    }
    __syncthreads();

    int chosen = -1;
    if (a.temperature <= 0.0f) {
        chosen = block_argmax(L, V, sm);
    } else {
        const float inv_t = __fdiv_rn(1.0f, a.temperature);
        float m = -kInf;
        for (int i = tid; i < V; i += kThreads) {
            const float v = L[i];
            if (v > m) m = v;
        }
        m = block_reduce(m, fmx, reinterpret_cast<float*>(sm.i));
        if (isfinite(m)) {
            for (int i = tid; i < V; i += kThreads) {
                const float v = L[i];
                W[i] = (v > -kInf && !isnan(v)) ? float(exp(double(__fmul_rn(__fsub_rn(v, m), inv_t)))) : 0.0f;
            }
            __syncthreads();
            const double u = double(philox_uniform(a.seed, a.stream, uint64_t(a.position)));
            const bool filtered = a.top_k > 0 || a.top_p < 1.0f || a.min_p > 0.0f;
            if (!filtered) {
                // Id order: warp w walks [w*C, (w+1)*C) in 32-wide segments (shuffle scans).
                const int lane = tid & 31, warp = tid >> 5;
                const int C = ((V + kWarps - 1) / kWarps + 31) / 32 * 32;
                const int lo = warp * C, hi = min(V, lo + C);
                auto seg_scan = [&](int base, float& x) {
                    const int i = base + lane;
                    x = i < hi ? W[i] : 0.0f;
                    double s = double(x);
                    for (int o = 1; o < 32; o <<= 1) {
                        const double y = __shfl_up_sync(~0u, s, o);
                        if (lane >= o) s += y;
                    }
                    return s;
                };
                double cum = 0.0;
                for (int base = lo; base < hi; base += 32) {
                    float x;
                    cum += __shfl_sync(~0u, seg_scan(base, x), 31);
                }
                if (lane == 0) sm.warp_total[warp] = cum;
                __syncthreads();
                double prefix = 0.0, total = 0.0;
                for (int w = 0; w < kWarps; ++w) {
                    if (w == warp) prefix = total;
                    total += sm.warp_total[w];
                }
                const double target = u * total;
                int mine = INT_MAX;
                cum = prefix;
                for (int base = lo; base < hi; base += 32) {
                    float x;
                    const double s = seg_scan(base, x);
                    const unsigned hit = __ballot_sync(~0u, x > 0.0f && cum + s >= target);
                    if (hit) {
                        mine = base + __ffs(hit) - 1;
                        break;
                    }
                    cum += __shfl_sync(~0u, s, 31);
                }
                chosen = block_reduce(mine, imin, sm.i);
                if (chosen == INT_MAX) {  // rounding left the target past the end: the last positive
                    int last = -1;
                    for (int i = tid; i < V; i += kThreads)
                        if (W[i] > 0.0f) last = i;
                    chosen = block_reduce(last, imax, sm.i);
                }
            } else {
                int n_kept = 0;
                for (int i = tid; i < V; i += kThreads) n_kept += kept(W[i], i, a.min_p, Cut{});
                n_kept = block_reduce(n_kept, iadd, sm.i);
                if (n_kept > 0) {
                    Cut cut;
                    if (a.top_k > 0 && n_kept > a.top_k)
                        cut = select(W, V, a.min_p, cut, false, 0.0, a.top_k, bsum, bcnt, sm);
                    auto kept_sum = [&](Cut c) {
                        double s = 0.0;
                        for (int i = tid; i < V; i += kThreads)
                            if (kept(W[i], i, a.min_p, c)) s += double(W[i]);
                        return block_reduce(s, dadd, sm.d);
                    };
                    if (a.top_p < 1.0f) {
                        const double goal = double(a.top_p) * kept_sum(cut);
                        cut = select(W, V, a.min_p, cut, true, goal, 0, bsum, bcnt, sm);
                    }
                    const double total = kept_sum(cut);
                    if (total > 0.0) chosen = select(W, V, a.min_p, cut, true, u * total, 0, bsum, bcnt, sm).i;
                }
            }
        }
        if (chosen < 0) chosen = block_argmax(L, V, sm);
    }
    __syncthreads();
    for (int j = tid; j < a.n_tok; j += kThreads) {
        const SamplePenaltyToken pt = toks[a.tok_begin + j];
        if (pt.token >= 0 && pt.token < V) L[pt.token] = saved[a.tok_begin + j];
    }
    if (pend >= 0 && pend_j < 0 && tid == 0) L[pend] = sm.pend_saved;
    __syncthreads();
    if (tid == 0) {
        out->token = chosen;
        out->logprob = a.logprobs >= 0 ? finite_logprob(double(L[chosen]) - lse) : 0.0f;
        if (a.logprobs < 0) out->n_top = 0;
    }
}

}  // namespace

cudaError_t sample_rows(float* logits, int64_t V, const SampleRowArgs* args, int n, const SamplePenaltyToken* toks,
                        float* weights, float* saved, SampleRowOut* out, cudaStream_t st, const int32_t* step_tokens) {
    if (n <= 0) return cudaSuccess;
    const size_t smem = size_t(kDigits) * kThreads * (sizeof(double) + sizeof(int));
    cudaError_t e = cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
    sample_rows_kernel<<<n, kThreads, smem, st>>>(logits, V, args, toks, weights, saved, out, step_tokens);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
