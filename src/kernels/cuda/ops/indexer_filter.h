// The lightning indexer's scores (spec §2.8) for long rows, computed exactly only where the top-k
// needs them. indexer_scores (indexer_scores.cu) gives every closed row w of a query token its exact
// f32 score I(w) = f32(sum_h w_h ReLU(q_h . k_w)), the dots summed in double: on the FP64 tensor
// cores that is ~60% of their peak, and in the last 4K-token step of a 16K prompt it was 23% of the
// step (ledger E62). The top-k only needs the exact scores of rows that can still be selected:
//
//   1. indexer_approx_kernel: every row on the bf16 tensor cores, q split into two bf16 terms
//      (q = hi + lo + r, |r| <= 2^-16 |q|), keys bf16 as stored, f32 accumulation, and a bound
//      e_w = 2^-11 ||k_w|| sum_h |w_h| ||q_h|| on |approx - I(w)|. The bound covers the split's
//      remainder (2^-16), the tensor cores' f32 accumulation of the 2 x 128 exact products (each
//      MMA aligns its addends to the largest and truncates them to f32's 24 bits, in the model of
//      Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores", 2021, who
//      measured V100, T4 and A100; assumed for Hopper, not documented by NVIDIA: at most ~2^-14.4
//      of the products' absolute sum over 16 MMAs of 17 addends; budgeted as 2^-12),
//      the f32 sum over the heads (2^-18) and the rounding of I(w) to f32 (2^-24), by
//      Cauchy-Schwarz (sum_i |q_i k_i| <= ||q|| ||k||) and ReLU being 1-Lipschitz, with a factor
//      of 2 to spare.
//      Writes hi_w = approx + e_w (rounded up) into the score row and lo_w = approx - e_w (rounded
//      down) into the filter workspace.
//   2. indexer_candidates_kernel (indexer.cu): T = the k-th largest lo. A row with hi_w < T has
//      I(w) < T <= I of k other rows, so it is not in the top-k whatever the tie rule. The others
//      (at least k; all of them when T is not finite) are listed in row order.
//   3. indexer_score_dmma16_kernel over the list: the listed rows' exact scores, the same
//      arithmetic as the unfiltered path (same bits), at their list positions of the score row.
//   4. indexer_select_listed: the top-k of the listed scores, ties to the lower position (= the
//      lower row), mapped back to row ids.
//
// The k selected rows and their order are those of indexer_scores + indexer_select. Rows whose bound
// is NaN (a NaN or infinite q, k or weight) are always listed. The bound is computed in double
// (norms of tiny or huge q and keys neither underflow nor overflow), with an absolute floor of
// 2^-125 sum_h |w_h| (sqrt(ID) (||k|| + ||q_h||) + 2 ID) for values below f32's normal range (the
// split's remainder, bf16 inputs or products the tensor cores may flush) and 2^-142 for the f32
// roundings of subnormal weighted terms and of the exact score, rounded up to f32; a head sum that
// overflows f32 gives hi = NaN, lo = -inf (always listed).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/ops/ops.h"

namespace dsv4::cuda {

struct IndexerFilter {
    // [B, max_rows] f32 scratch of IndexerArgs's shape: the lower bounds, then the candidate list
    // (int32 row ids) in the same storage.
    float* lo = nullptr;
    int32_t* n_cand = nullptr;  // [B] candidates per plan entry
};

// Whether the filtered path can run: bf16 index rows at even word offsets (8-byte loads of a key's
// dims), at most 64 heads, ID a multiple of 32 up to 128; else indexer_scores alone.
bool indexer_filter_applies(const PagePool& pool, const IndexerArgs& a);

// indexer_topk's result (a.sel, a.n_sel; same plan, pool and args) through steps 1-4, for entries with
// more closed rows than a.topk; f holds the scratch. a.scores ends holding the listed rows' exact
// scores at their list positions (f.lo: the list, f.n_cand: its length) instead of every row's.
// cudaErrorInvalidValue when !indexer_filter_applies.
cudaError_t indexer_topk_filtered(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a,
                                  const IndexerFilter& f, cudaStream_t st);

// The four steps alone (the op profiler times them apart): the bounds (a.scores: upper, f.lo: lower;
// cudaErrorInvalidValue when !indexer_filter_applies); the candidate list from them; the listed rows'
// exact scores; their top-k as row ids.
cudaError_t indexer_bounds(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a, const IndexerFilter& f,
                           cudaStream_t st);
cudaError_t indexer_candidates(const StepPlan& plan, const IndexerArgs& a, const IndexerFilter& f, cudaStream_t st);
cudaError_t indexer_scores_listed(const StepPlan& plan, const PagePool& pool, const IndexerArgs& a,
                                  const IndexerFilter& f, cudaStream_t st);
cudaError_t indexer_select_listed(const StepPlan& plan, const IndexerArgs& a, const IndexerFilter& f, cudaStream_t st);

}  // namespace dsv4::cuda
