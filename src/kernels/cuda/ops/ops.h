// CUDA ops of the DeepSeek-V4 forward (the CPU reference is src/kernels/ref + src/model/ref_*.cpp).
// Host-only header, includable from the CPU build (no device code): plain structs of device
// pointers and launch functions returning cudaError_t (launch errors are checked right after
// every launch). All activations are f32; weights stay in checkpoint formats (WeightDesc) and
// are dequantised element by element inside the kernels, except where linear / moe_experts hand
// decode shapes to the fast kernels (fast_path.h), which round activations to bf16.
//
// Step plan (device arrays written once per step, fixed capacity so that graphs can replay):
//   seq arrays [B]: tok_begin, n_tok, start_pos, valid; page tables [B, pt_stride] int32.
//   token arrays [T]: token id, position, seq index.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cuda/common/kernel_params.h"
#include "model/spec_regions.h"

namespace dsv4::cuda {

enum class WFmt : int32_t {
    kF32 = 0,      // f32 [N, K]
    kBF16 = 1,     // bf16 [N, K]
    kFp8E8M0 = 2,  // e4m3 [N, K] + UE8M0 scales [ceil(N/128), ceil(K/128)]
    kFp8F32 = 3,   // e4m3 [N, K] + f32 scales [ceil(N/128), ceil(K/128)]
    kMxfp4 = 4,    // e2m1 packed [N, K/2] (low nibble = even k) + UE8M0 scales [N, ceil(K/32)]
    // kMxfp4 with the bits of every 32-bit code word permuted at load time (core/mxfp4_pair_rotated.h;
    // K % 8 == 0, so words never straddle rows): the fast expert GEMV's layout
    // (moe_expert_weights_to_fast_layout in fast_path.h). Scales and word positions as kMxfp4.
    kMxfp4PairRotated = 5,
};
const char* wfmt_name(WFmt f);

// A [N, K] weight matrix in checkpoint format (or E experts of one, `expert_stride` bytes apart).
struct WeightDesc {
    WFmt fmt = WFmt::kF32;
    const void* data = nullptr;
    const void* scale = nullptr;
    int32_t N = 0, K = 0;
    int64_t expert_stride = 0;        // bytes between experts' data
    int64_t scale_expert_stride = 0;  // bytes between experts' scales
    // Kernel choice for linear() with this weight (the runner sets both from RuntimeOptions at init):
    // fast = false keeps it on the correct-first f32 kernels; gemv_variant >= 0 forces that dense_gemv
    // registry index where it is legal for the call (else the heuristic).
    bool fast = true;
    int32_t gemv_variant = -1;
    // A tuning file's dense_gemv choices by tokens (owned by the runner; null: none). The forced
    // gemv_variant wins; the runner checked at init that each is legal for this weight.
    const std::vector<ShapeVariant>* gemv_rules = nullptr;
    // Large-token calls (prefill) through cuBLAS (prefill_gemm.h) when set and the call qualifies.
    const struct PrefillGemm* gemm = nullptr;
};

// Per-step plan in device memory.
struct StepPlan {
    int32_t n_seqs = 0;         // B (padded bucket size in graphs)
    const int32_t* tok_begin;   // [B]
    const int32_t* n_tok;       // [B] 0 for padding
    const int64_t* start_pos;   // [B]
    const int32_t* page_table;  // [B, pt_stride]
    int32_t pt_stride = 0;
    const int32_t* tokens;  // [T]
    const int32_t* pos;     // [T] absolute positions
    // [B] page-table row of each entry, or null (entry s uses row s). Batched prefill runs its
    // query tokens as one-token pseudo-sequences that share their sequence's page table.
    const int32_t* table_row = nullptr;
};

// Stored geometry of one cached row (model/kv_rows.h KvRowSpec flattened for device code).
struct RowFormat {
    int32_t fmt = 0;       // KvRowFormat: 0 f32, 1 bf16, 2 fp8 (nope e4m3 | rope bf16 | UE8M0 scales | pad)
    int32_t dim = 0;       // values per row
    int32_t rope_dim = 0;  // trailing dims kept bf16 by fp8 rows
    int32_t words = 0;     // 4-byte words between consecutive rows (KvLayout::row_words_*)
};

// The page pool: n_pages x page_elems 4-byte words (KvLayout offsets); state pages first in every
// page table. State (compressor) elements are f32; K=V rows (window ring + main compressed) are
// stored in `main`, indexer rows in `index`. Non-f32 ring rows never straddle a page.
struct PagePool {
    float* base = nullptr;
    int64_t page_elems = 0;
    int64_t n_state_pages = 0;
    int64_t page_tokens = 0;
    RowFormat main;   // window ring rows and main compressed rows
    RowFormat index;  // indexer rows
};

// ---- spec_state.cu (speculative decoding, model/spec_state.h) -------------------------------
// The verify chunk's backup and rollback in each sequence's state area, the CPU runner's spec_backup /
// spec_rollback over the same regions (model/spec_regions.h: spec_regions(layout), uploaded once).
struct SpecStateArgs {
    const SpecRegion* regions = nullptr;  // device [n_regions]
    int n_regions = 0;
    int spec_tokens = 0;        // KvLayout::spec_tokens
    int64_t header_offset = 0;  // KvLayout::spec.header_offset
};
// For every sequence s with 0 < n_tok[s] <= spec_tokens + 1: saves what positions [start_pos, start_pos +
// n_tok) will overwrite and records them as the verify chunk in the header (longer chunks are not
// verify chunks: skipped). Both functions: cudaErrorInvalidValue for a layout without the speculative
// area (spec_tokens 0, no header).
cudaError_t spec_backup(const StepPlan& plan, const PagePool& pool, const SpecStateArgs& a, cudaStream_t st);
// For every sequence s with n_tok[s] > 0 and a recorded verify chunk [v0, v0 + n): undoes positions
// [start_pos, v0 + n) (nothing when start_pos >= v0 + n), clears the record and drops pending positions
// from start_pos on. A start_pos before v0 (which the CPU form reports as an error) leaves the sequence
// untouched; the engine never schedules one.
cudaError_t spec_rollback(const StepPlan& plan, const PagePool& pool, const SpecStateArgs& a, cudaStream_t st);

// ---- spec_cycle.cu (one speculative cycle per step: RefRunner::speculative_chunk on the device) -----
// Per sequence of the step's plan (index s), uploaded with it, and the cycle's device buffers.
struct SpecCycleArgs {
    const int32_t* mtp = nullptr;       // [B] 1: the sequence speculates (SeqChunk::mtp)
    const int32_t* drafts_k = nullptr;  // [B] its verify chunk's draft count (0: not a verify chunk)
    int32_t* drafts = nullptr;          // [B, spec_tokens] the drafts, written by spec_take_draft
    int spec_tokens = 0;                // KvLayout::spec_tokens (S)
    int64_t header_offset = -1, pending_tokens_offset = -1, pending_streams_offset = -1;  // KvLayout::spec
    int stream_elems = 0;                      // hc_mult * hidden: one position's final streams
    int64_t mtp_ring_offset = 0;               // the MTP block's window ring in the state area (KvLayout)
    int mtp_ring_rows = 0, mtp_row_words = 0;  // W and KvLayout::row_words_main
    uint32_t* ring_scratch = nullptr;          // [B, spec_tokens, mtp_row_words] rows the drafts borrow
};
// The plan of one MTP pass (the runner's second set of plan arrays) and its inputs: the block at
// positions pos with input streams `streams` [rows, stream_elems] and next-token ids `next`.
struct SpecPassPlan {
    int32_t *tok_begin, *n_tok, *pos, *logit_rows, *next;
    int64_t* start_pos;
    float* streams;
};
// The catch-up pass: sequence s (mtp_live: it speculates, runs, start_pos > 0) whose header holds m
// pending positions [A, A + m) ending at its chunk's start gets m tokens in slots s (S+1)..: positions
// A.., next tokens = pending tokens 1.. then the chunk's first token (plan.tokens, pending ids already
// filled), streams = the pending streams (unused slots zero); logit row = its last. Every live
// sequence's pending count is cleared (consumed, or dropped for one that does not speculate). Others
// get n_tok 0.
cudaError_t spec_catchup_plan(const StepPlan& plan, const PagePool& pool, const SpecCycleArgs& a,
                              const SpecPassPlan& out, cudaStream_t st);
// Draft pass `pass` (1 <= pass < S): live sequences with more than `pass` drafts run the block at
// start_pos + pass - 1 on draft number `pass` (drafts[s, pass - 1]) with the previous pass's output
// streams (X row out.logit_rows[s], read before it is rewritten to s); one token per sequence, slot s.
cudaError_t spec_draft_plan(const StepPlan& plan, const SpecCycleArgs& a, const SpecPassPlan& out, int pass,
                            const float* X, cudaStream_t st);
// drafts[s, index] = ids[s] for live sequences with more than `index` drafts (else 0).
cudaError_t spec_take_draft(const StepPlan& plan, const SpecCycleArgs& a, const int32_t* ids, int index,
                            cudaStream_t st);
// tokens[tok_begin[s] + 1 + j] = drafts[s, j], j < drafts_k[s]: the verify chunk's token list.
cudaError_t spec_fill_drafts(const StepPlan& plan, const SpecCycleArgs& a, int32_t* tokens, cudaStream_t st);
// Saves (restore false) or puts back the MTP ring rows of positions start_pos .. start_pos + k - 2 of
// live sequences (the recursive drafts write them; the block runs there for real once accepted).
cudaError_t spec_mtp_ring(const StepPlan& plan, const PagePool& pool, const SpecCycleArgs& a, bool restore,
                          cudaStream_t st);
// After the step's forward: each speculating sequence's pending positions (all of a verify chunk's,
// else its last) with their tokens and final streams (X rows of the step) into its state.
cudaError_t spec_pending_write(const StepPlan& plan, const PagePool& pool, const SpecCycleArgs& a, const float* X,
                               cudaStream_t st);
// dst[r] = src[rows[r]] for r < n, rows of `width` f32.
cudaError_t gather_rows(const float* src, const int32_t* rows, int n, int64_t width, float* dst, cudaStream_t st);

// ---- linear.cu -----------------------------------------------------------------------------
// y[t, n] (+)= sum_k W[n, k] x[t, goff(n) + k], goff(n) = (n / n_per_group) * group_in (the grouped
// output projection); plain linear: n_per_group = N, group_in = 0. x rows ldx apart, y rows ldy.
// FP8-block (UE8M0) / BF16 weights of decode-GEMV shapes go to the fast weight-streaming GEMV with
// x rounded to bf16 (fast_path.h; DSV4_FAST_KERNELS=0 forces the f32 kernel).
// x_bf16 (optional): x rounded to bf16 (round_to_bf16), same row stride ldx; the fast path then
// stages it instead of rounding f32 x itself (identical values, half the x traffic); ignored by the
// f32 kernels.
cudaError_t linear(const WeightDesc& w, int expert, const float* x, int64_t ldx, int n_per_group, int64_t group_in,
                   float* y, int64_t ldy, int T, bool accumulate, cudaStream_t st, const void* x_bf16 = nullptr);
// out[T, d] = W row tokens[t] (embedding lookup, any WFmt) repeated `copies` times per token.
cudaError_t embed(const WeightDesc& w, const int32_t* tokens, int T, int copies, float* out, cudaStream_t st);

// ---- norm_rope.cu ---------------------------------------------------------------------------
// Row r of width n: y = rmsnorm(x) (* weight if non-null) when do_norm; then RoPE (inverse if
// asked) on the trailing rope_dim dims at pos[r / rows_per_token] when inv_freq non-null.
cudaError_t norm_rope(const float* x, int64_t ldx, float* y, int64_t ldy, int rows, int n, bool do_norm,
                      const float* weight, float eps, const float* inv_freq, int rope_dim, const int32_t* pos,
                      int rows_per_token, bool inverse, cudaStream_t st);
// norm_rope in its 128-thread-per-row form whatever n (rows of n = 512 otherwise take a warp-per-row
// form that must give the same bits; tests compare the two).
cudaError_t norm_rope_block_form(const float* x, int64_t ldx, float* y, int64_t ldy, int rows, int n, bool do_norm,
                                 const float* weight, float eps, const float* inv_freq, int rope_dim,
                                 const int32_t* pos, int rows_per_token, bool inverse, cudaStream_t st);
// norm_rope (inverse = false) with the row rounded to bf16 on the way out: y bf16 [rows, ldy],
// bit-identical to norm_rope then round_to_bf16.
cudaError_t norm_rope_to_bf16(const float* x, int64_t ldx, void* y, int64_t ldy, int rows, int n, bool do_norm,
                              const float* weight, float eps, const float* inv_freq, int rope_dim, const int32_t* pos,
                              int rows_per_token, cudaStream_t st);
// norm_rope (inverse = false) in place on bf16 rows y [rows, ldy] of n = 512 (rope_dim 64 or no RoPE;
// else cudaErrorInvalidValue): each row widened to f32, normed and rotated as norm_rope_to_bf16 does,
// rounded back. Used where the prefill GEMM wrote the rows as bf16 (linear_bf16_out).
cudaError_t norm_rope_bf16(void* y, int64_t ldy, int rows, int n, bool do_norm, const float* weight, float eps,
                           const float* inv_freq, int rope_dim, const int32_t* pos, int rows_per_token,
                           cudaStream_t st);
// RoPE (or its inverse) in place on the trailing rope_dim dims of bf16 rows y [rows, n] (contiguous)
// at pos[r / rows_per_token], computed in f32 and rounded back: the same bits as widening the row to
// f32, norm_rope without the norm, then round_to_bf16. Odd rope_dim or n, y not 4-byte aligned or
// rows_per_token <= 0: cudaErrorInvalidValue.
cudaError_t rope_rows_bf16(void* y, int64_t rows, int n, const float* inv_freq, int rope_dim, const int32_t* pos,
                           int rows_per_token, bool inverse, cudaStream_t st);
cudaError_t scale_inplace(float* x, int64_t n, float s, cudaStream_t st);
// X[t, j, :] += e[t, :] for t < T, j < copies (X [T, copies, d], e [T, d]; the MTP block's input, spec §2.11).
cudaError_t add_broadcast_rows(float* X, const float* e, int T, int copies, int d, cudaStream_t st);
// out[i] = bf16(x[i]) (round to nearest even), n elements; n % 4 == 0, x 16-B and out 8-B aligned,
// else cudaErrorInvalidValue. out: bf16 [n].
cudaError_t round_to_bf16(const float* x, int64_t n, void* out, cudaStream_t st);
// h[t, i] = silu(min(a, lim)) * clamp(b, -lim, lim) * 1 (lim <= 0: no clamp). a, b, h [T, I].
cudaError_t swiglu(const float* a, const float* b, float* h, int64_t n, float lim, cudaStream_t st);

// ---- mhc.cu ---------------------------------------------------------------------------------
struct MhcArgs {
    const float* fn;     // [(2+n)n, n d] (head: [n, n d])
    const float* base;   // [(2+n)n] (head: [n])
    const float* scale;  // [3] (head: [1])
    const float* norm;   // [d] weight of the RMSNorm fed by the collapse
    int n, d, sinkhorn_iters;
    float hc_eps, rms_eps;
    double* mix_ws = nullptr;  // optional workspace of mix_ws_rows rows of (2+n)n + 1 doubles: the
                               // mixing dot products then run over many CTAs instead of one per token
    int64_t mix_ws_rows = 0;   // capacity of mix_ws in rows (0: T rows). With n == 4 and >= 2T rows the
                               // n*d reduction is also split into chunks of 256-512 (mhc_mix_chunks)
};
// Number of n*d chunks per token the mixing dot products are split into for T tokens (1 when
// the workspace has no room for more or n != 4); each chunk is one CTA of mhc_mix_chunk_kernel.
int mhc_mix_chunks(int T, const MhcArgs& a);
// Per token: Sinkhorn coefficients of X[t] (stored to coeffs [T, 24]), u = collapse, xn = rmsnorm(u).
cudaError_t mhc_pre(const float* X, int T, const MhcArgs& a, float* coeffs, float* xn, cudaStream_t st);
// mhc_pre in its two launches (the op profiler times them apart): the mixing dot products into
// a.mix_ws (nothing without a workspace), then Sinkhorn + collapse + norm.
cudaError_t mhc_pre_mix(const float* X, int T, const MhcArgs& a, cudaStream_t st);
cudaError_t mhc_pre_apply(const float* X, int T, const MhcArgs& a, float* coeffs, float* xn, cudaStream_t st);
// mhc_post followed by the next site's mhc_pre_mix in one launch (the same X, coefficients and
// partials as the two calls; X bit-identical). Only where mhc_post_mix_fusable(T, next): T <= 8,
// n = 4, a mix workspace split into chunks that divide d, n d / chunks a multiple of 32 up to 1024;
// otherwise cudaErrorInvalidValue.
bool mhc_post_mix_fusable(int T, const MhcArgs& next);
cudaError_t mhc_post_mix(float* X, const float* y, const float* coeffs, int T, const MhcArgs& next, cudaStream_t st);
// X[t] = post * y[t] + comb^T X[t] in place.
cudaError_t mhc_post(float* X, const float* y, const float* coeffs, int T, int n, int d, cudaStream_t st);
// Final head: for r < R: h = mhc_head(X[rows[r]]), out[r] = rmsnorm(h) * norm.
cudaError_t mhc_head(const float* X, const int32_t* rows, int R, const MhcArgs& a, float* out, cudaStream_t st);

// ---- kv_state.cu ----------------------------------------------------------------------------
// Resets the state area of sequences with start_pos 0 and n_tok > 0: zeros, then -inf on the
// ranges [gate_off[i], gate_off[i] + gate_len[i]) (compressor gates).
cudaError_t reset_state(const StepPlan& plan, const PagePool& pool, int64_t state_elems, const int64_t* gate_off,
                        const int64_t* gate_len, int n_ranges, cudaStream_t st);

struct CompressorArgs {
    int ratio = 0, dim = 0;
    bool overlap = false;
    int64_t kv_off = 0, gate_off = 0;  // state area offsets
    int64_t row_off = 0;               // token page offset of this compressor's rows
    RowFormat fmt;                     // stored row format (fmt.dim == dim)
    const float* kv = nullptr;         // [T, kappa*dim] projected kv
    const float* gate = nullptr;       // [T, kappa*dim] projected gate (ape not yet added)
    const float* ape = nullptr;        // [ratio, kappa*dim]
    const float* norm = nullptr;       // [dim]
};
struct KvStepArgs {
    int t = 0;  // token step within each sequence's chunk
    int W = 0, D = 0;
    int64_t ring_off = 0;
    const float* kv = nullptr;  // [T, D] normed, roped kv
    int n_comp = 0;             // 0, 1 (main) or 2 (main + indexer)
    CompressorArgs comp[2];
    const float* rope_inv_freq = nullptr;  // compress table [rope_dim/2]
    int rope_dim = 0;
    float eps = 1e-6f;
};
// Token step t of every sequence: ring write, compressor pushes, compressed rows at window ends.
cudaError_t kv_step(const StepPlan& plan, const PagePool& pool, const KvStepArgs& a, cudaStream_t st);

// Writes n rows of format f from f32 values src [n, f.dim] (device) into the pool at word offsets
// dst_words[n] (device, int64, from `base`; each row lies in one page; 8-byte aligned for bf16 /
// fp8). Byte for byte what kv_step stores and what model/kv_rows.h encode_kv_row produces: the one
// row writer for tests and for filling pools with synthetic data (the proxy benchmark). Word
// offsets of a sequence's rows: KvLayout::ring_row / comp_row_in_page / index_row_in_page through
// its page table (state area element e lives in page table[e / page_elems] at e % page_elems).
cudaError_t write_kv_rows(const float* src, int64_t n, const int64_t* dst_words, float* base, const RowFormat& f,
                          cudaStream_t st);

// ---- prefill_state.cu -----------------------------------------------------------------------
// Batched prefill: what kv_step does token by token, for every token of the step at once, so the
// layer's attention can run all query tokens together (as one-token pseudo-sequences, see
// StepPlan::table_row and RowListArgs::stage_from). Order within a layer:
//   stage_kv_rows -> compress_chunk -> compress_state_chunk -> attention -> ring_write_chunk.
// The result (ring, compressor state rows that are read again, compressed rows) equals running
// kv_step for t = 0 .. max_t - 1, bit for bit: the rows are pooled by the same device code
// (compressor.cuh) and stored by the same writer.
//
// Rows of a.kv [T, D] (f32) stored in the pool's main format at stage_word + i * main.words
// (the staging area: T rows after the pages, one contiguous block).
cudaError_t stage_kv_rows(const PagePool& pool, const float* kv, int T, int64_t stage_word, cudaStream_t st);
// Every compressed row whose window closes inside a sequence's chunk (positions start_pos ..
// start_pos + n_tok - 1), pooled from the chunk's projections and, for window slots before the
// chunk, the state rows; max_t bounds n_tok. With a scratch of [a.n_comp][T][ld] floats (T: the
// step's tokens, ld >= every compressor's dim) the channels are pooled over many CTAs first, then
// each row is normalised and stored (same bits; faster for long windows); else one CTA per row.
cudaError_t compress_chunk(const StepPlan& plan, const PagePool& pool, const KvStepArgs& a, int max_t, cudaStream_t st,
                           float* scratch = nullptr, int T = 0, int ld = 0);
// The compressor state rows as token-at-a-time processing leaves them (the rows later windows
// read: the open window's tokens and, with overlap, the last closed window). After compress_chunk.
cudaError_t compress_state_chunk(const StepPlan& plan, const PagePool& pool, const KvStepArgs& a, cudaStream_t st);
// The last min(n_tok, W) staging rows of each sequence copied to their ring slots. After the
// layer's attention has read the ring.
cudaError_t ring_write_chunk(const StepPlan& plan, const PagePool& pool, const KvStepArgs& a, int64_t stage_word,
                             cudaStream_t st);

// ---- indexer.cu -----------------------------------------------------------------------------
struct IndexerArgs {
    int t = 0, ratio = 0, IH = 0, ID = 0, topk = 0;
    int64_t idx_row_off = 0;
    const float* q = nullptr;  // [T, IH*ID] roped index queries
    const float* w = nullptr;  // [T, IH] head weights (already scaled)
    float* scores = nullptr;   // [B, max_rows] workspace (not written for sequences with n_c <= topk)
    int64_t max_rows = 0;
    // [B, topk] out: selected rows, best first (ties: lowest index); all n_c rows in index order when
    // n_c <= topk (ref::index_select)
    int32_t* sel = nullptr;
    int32_t* n_sel = nullptr;  // [B] out
};
cudaError_t indexer_topk(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, cudaStream_t st);
// indexer_topk in its two launches (the op profiler times them apart): scores, then the top-k.
cudaError_t indexer_scores(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, cudaStream_t st);
cudaError_t indexer_select(const StepPlan& plan, const IndexerArgs& a, cudaStream_t st);
// Exact top-k of scores [R, n] per row (NaN ranks last, ties lowest index): idx [R, k] best first.
cudaError_t topk_rows(const float* scores, int R, int n, int k, int32_t* idx, cudaStream_t st);
// Greedy sampling: argmax of logits [R, V] per row (NaN skipped, ties lowest index, 0 when the row
// holds no number). ws (optional, [R, kArgmaxParts]): each row is split over up to kArgmaxParts CTAs
// and joined by a second launch (the same result); null: one CTA per row.
inline constexpr int kArgmaxParts = 64;
cudaError_t argmax_rows(const float* logits, int R, int64_t V, int32_t* out, cudaStream_t st,
                        unsigned long long* ws = nullptr);

// ---- attention/attn_decode_simt.cu ----------------------------------------------------------
// Split-KV sink attention of token step t over the window ring plus compressed rows (HCA: all,
// CSA: the indexer's selection), then a log-sum-exp combine folding in the sink and the inverse
// RoPE. Variant parameters: see attn_variants.h.
struct AttnArgs {
    int t = 0, H = 0, D = 0, W = 0, ratio = 0;
    bool csa = false;
    int64_t ring_off = 0, row_off = 0;
    int topk = 0;
    const int32_t* sel = nullptr;     // [B, topk] (CSA)
    const int32_t* n_sel = nullptr;   // [B] (CSA)
    const float* q = nullptr;         // [T, H*D]
    const float* sink = nullptr;      // [H]
    const float* inv_freq = nullptr;  // layer's RoPE table [rope_dim/2]
    int rope_dim = 0;
    float scale = 1.0f;
    float* part_acc = nullptr;  // [B, H, splits, D]
    float* part_ml = nullptr;   // [B, H, splits, 2]
    float* out = nullptr;       // [T, H*D]
};
struct AttnVariant;
// The old path: CUDA-core split-KV kernel reading rows of any format (DSV4_FAST_KERNELS=0, f32 rows,
// head_dim != 512).
cudaError_t attn_decode(const StepPlan& plan, const PagePool& pool, const AttnArgs& a, const AttnVariant& v, int splits,
                        cudaStream_t st);

// ---- attention/attn_rows_simt.cu ------------------------------------------------------------
// Glue of the fast decode attention (kernels/cuda/attention/sparse_decode.h) for token step t:
// per-sequence row lists as CSR, q in bf16, and the bf16 output back to f32 with inverse RoPE.
// All buffers have fixed capacity (graph-safe); a sequence with t >= n_tok (graph padding, B03)
// gets zero rows and a zero q, and its output rows are not written.
struct RowListArgs {
    int t = 0, W = 0, ratio = 0;
    bool csa = false;
    int64_t ring_off = 0, row_off = 0;  // layer's ring (state area) and main row (token page) offsets
    int topk = 0;
    const int32_t* sel = nullptr;    // [B, topk] CSA selection (indexer_topk)
    const int32_t* n_sel = nullptr;  // [B]
    int unit_bytes = 1;              // offset unit: 1 (fp8 rows: bytes), 2 (bf16 rows: elements)
    int64_t* offsets = nullptr;      // out [capacity]: pool offsets of each row, sequence by sequence
    int32_t* row_start = nullptr;    // out [B + 1]: CSR bounds
    int64_t capacity = 0;            // rows beyond it are dropped (size it B x max rows per sequence)
    // Batched prefill (prefill_state.cu): window positions >= stage_from[s] are read from the
    // step's staging rows instead of the ring (the ring is written back after the layer's
    // attention). Staging row i (the step's token i) starts at pool word stage_word + i * main.words;
    // position q of entry s is token tok_begin[s] + t - (p - q). Null: ring only.
    const int64_t* stage_from = nullptr;  // [B]
    int64_t stage_word = 0;
};
// Rows of sequence s (query position p = start_pos + t): window slots (p - n_win + 1 .. p) mod W
// oldest first, n_win = min(p + 1, W); then CSA: sel[s, 0 .. n_sel), HCA: w = 0 .. (p+1)/ratio.
cudaError_t build_row_lists(const StepPlan& plan, const PagePool& pool, const RowListArgs& a, cudaStream_t st);
// qb [B, hd] bf16 (RNE) = q[tok_begin[s] + t] (f32 [T, hd]); zeros for padded sequences.
cudaError_t q_rows_bf16(const StepPlan& plan, int t, const float* q, int hd, void* qb, cudaStream_t st);
// out[tok, h] (f32 [T, H*D]) = inverse RoPE at p of ob[s, h] (bf16 [B, H, D]); D <= 1024.
cudaError_t attn_out_rows(const StepPlan& plan, int t, const void* ob, int H, int D, const float* inv_freq,
                          int rope_dim, float* out, cudaStream_t st);

// ---- moe/moe_simt.cu -----------------------------------------------------------------------
struct MoeArgs {
    int T = 0, E = 0, K = 0, d = 0, I = 0;
    const float* logits = nullptr;     // [T, E] router logits
    const float* bias = nullptr;       // [E] (learned) or null
    const int32_t* tid2eid = nullptr;  // [V, K] (hash) or null
    const int32_t* tokens = nullptr;   // [T]
    float route_scale = 1.0f;
    bool norm_topk = true;
    float limit = 0.0f;
    int32_t* ids = nullptr;     // [T, K]
    float* wts = nullptr;       // [T, K]
    int32_t* counts = nullptr;  // [E] then cursors [E] then offsets [E+1]: int32 [3E+1]
    int32_t* perm = nullptr;    // [T*K] assignment (t*K+k) per permuted slot
    int32_t* slot = nullptr;    // [T*K] permuted slot of assignment t*K+k
    const float* x = nullptr;   // [T, d]
    float* h = nullptr;         // [T*K, I] permuted hidden
    float* yp = nullptr;        // [T*K, d] permuted expert outputs
    WeightDesc w1, w3, w2;      // experts (expert_stride set)
    // Expert parallelism (docs/design.md): when ep_count > 0 this rank computes only the routed
    // experts [ep_first, ep_first + ep_count), whose weights w1/w3/w2 hold at local index
    // e - ep_first; routing still runs over all E experts, and an assignment to another rank's
    // expert contributes nothing here (moe_combine sums this rank's experts only). 0: all E.
    int ep_first = 0, ep_count = 0;
    // Kernel choice (from RuntimeOptions): fast = false takes the correct-first kernels; moe_variant
    // >= 0 forces that expert-kernel registry index where legal (else the heuristic).
    bool fast = true;
    int32_t moe_variant = -1;
    // From this many tokens (T) the fast path runs the experts as the grouped GEMM
    // (moe_grouped_launch) instead of the GEMV (same bits); 0: never. grouped_variant >= 0 forces
    // that registry index where legal.
    int grouped_min_tokens = 0;
    int32_t grouped_variant = -1;
    // A tuning file's choices by tokens and mean rows per expert (owned by the runner; null: none);
    // the forced moe_variant / grouped_variant win. Checked legal at runner init.
    const std::vector<ShapeVariant>* moe_rules = nullptr;
    const std::vector<ShapeVariant>* grouped_rules = nullptr;
    // The grouped GEMM on the warpgroup tensor-core kernel (moe_wgmma_sm90.cu: x and h k-permuted,
    // not bitwise the GEMV's) where legal; false: the mma.sync kernel. A forced grouped_variant wins.
    bool grouped_wgmma = true;
    // A decode-only step (one token per sequence): MoeExpertArgs::decode_step.
    bool decode_step = false;
};
// Routing, permutation, expert GEMMs (SwiGLU with clamp); leaves yp/slot for moe_combine.
// Stacked MXFP4 experts of legal shapes take the fast decode kernels (fast_path.h: bf16 x and
// hidden, f32 out; workspaces carved from these buffers); moe_combine follows the same decision.
cudaError_t moe_experts(const MoeArgs& a, cudaStream_t st);
// out[t] = sum_k yp[slot[t,k]] + shared[t] (shared may be null: no shared term). Under expert
// parallelism the sum runs over this rank's experts only.
cudaError_t moe_combine(const MoeArgs& a, const float* shared, float* out, cudaStream_t st);

}  // namespace dsv4::cuda
