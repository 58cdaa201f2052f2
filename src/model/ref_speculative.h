// Greedy speculative decoding of one sequence on the CPU reference (issue 24): the reference
// statement of the algorithm the engine implements, and of the state a rejected draft must not leave
// behind. Each cycle drafts k tokens (the MTP block, spec §2.11, applied recursively on its own output
// streams, as SGLang's EAGLE-style use of it does; or the target model itself, a test mode in which
// every draft is right), verifies them in one target chunk of k + 1 tokens, accepts the longest
// agreeing prefix j and emits it plus the target's own next token.
//
// Rollback: the state area of a sequence (every layer's window ring, every compressor's pending
// rows, the MTP block's ring) is copied when a cycle starts (all positions < S valid); the recursive
// drafts and a verify chunk whose drafts were not all accepted change it for positions >= S, so it is
// restored and the accepted tokens are run again. What a rejected position q breaks there is (1) its
// ring slot q mod W: the row of position q - W it replaced is still in the window of the positions
// before q that run next; and (2) the compressor states: where q closes a window of an overlapping
// (CSA) compressor, the close moves the current window's rows into the previous-window half. Restoring
// those ring rows and the compressor states alone gives the same tokens and logits (checked once by
// hand on the tests below; restoring the ring rows alone does not). Compressed rows in token pages
// need no restore: a row of a window that closed at a rejected position is only read by queries at or
// after that position, and it is written again when the window closes for real.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/ref_model.h"

namespace dsv4 {

enum class DraftSource {
    kMtp,   // the model's MTP block 0 (needs RefModel::mtp_blocks() >= 1)
    kSelf,  // the target model, one token at a time (test mode: every draft agrees up to near-ties)
};

struct RefSpecOptions {
    int k = 1;  // draft tokens per verify step, 1..8
    DraftSource draft = DraftSource::kMtp;
    // Test hook: may change the k drafts of a cycle before they are verified (e.g. a wrong last
    // draft, to force a partial acceptance); empty: unchanged.
    std::function<void(std::vector<int32_t>& drafts)> edit_drafts;
};

struct RefSpecStats {
    int64_t verify_steps = 0;  // target chunks of k + 1 tokens
    int64_t drafted = 0;       // draft tokens verified
    int64_t accepted = 0;      // of them, accepted
    int64_t rollbacks = 0;     // cycles whose state was restored and whose accepted tokens ran again
    // Tokens emitted per verify step (accepted drafts + the target's token), the "accept length".
    double accept_length() const { return verify_steps ? double(accepted + verify_steps) / double(verify_steps) : 0.0; }
};

// Argmax of one logits row: lowest id on ties, NaN never chosen over a number (the drafts' rule).
int32_t greedy_token(std::span<const float> row);

// Plain greedy decoding: prompt [P] prefilled in one chunk, then n_new tokens one position at a time,
// each the argmax (lowest id on ties) of its logits. Returns the n_new tokens; token_logits (optional)
// receives the logits each was chosen from, [n_new, vocab] f32.
// Errors: an empty prompt, n_new < 1, token ids outside the vocabulary.
Result<std::vector<int32_t>> ref_greedy(const RefModel& model, std::span<const int32_t> prompt, int n_new,
                                        std::vector<float>* token_logits = nullptr);

// The same n_new tokens by speculative decoding (same argmax rule), and the same logits up to the last
// bits the chunk size moves in the reference's batched projections (so the same tokens unless a logit
// pair is a near-tie). stats (optional) counts the verify steps and drafts; token_logits as ref_greedy's
// (the verify step's rows). Errors: those of ref_greedy, k outside 1..8, kMtp on a model without an
// MTP block.
Result<std::vector<int32_t>> ref_speculative_greedy(const RefModel& model, std::span<const int32_t> prompt, int n_new,
                                                    const RefSpecOptions& opt, RefSpecStats* stats = nullptr,
                                                    std::vector<float>* token_logits = nullptr);

}  // namespace dsv4
