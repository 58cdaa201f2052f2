// ForwardBatch: what one engine step asks the model to compute. Built by the scheduler side,
// consumed by a ModelRunner. Plain data, passed by const reference.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4 {

// What a runner returns for a want_logits row: the logits (the host samples), or a token id it
// sampled itself where the logits live (a GPU runner: only 4 bytes per sequence cross PCIe instead
// of vocab_size f32). A mode is only set when ModelRunner::supports_device_sample(mode) says so.
enum class DeviceSample : uint8_t {
    kNone = 0,    // return the vocab_size f32 logits row
    kGreedy = 1,  // return argmax of the logits: lowest id on ties, NaN skipped, 0 if all NaN
                  // (exactly sample_token's greedy result when sample_is_plain_argmax holds)
    kFull = 2,    // sample_token's whole algorithm with SeqChunk::params (penalties, masks,
                  // temperature, min_p / top_k / top_p, the seeded draw, logprobs)
};

// A token id the penalties or stop masking of one row touch (ids unique within a row).
struct PenaltyToken {
    int32_t token = 0;
    int32_t output_count = 0;  // occurrences in the output so far
    bool seen = false;         // in the prompt or the output (repetition penalty)
    bool masked = false;       // set to -inf (min_tokens not reached: EOS / stop ids)
    float bias = 0.0f;         // logit_bias, added first
};

// A kFull row's SamplingParams and SampleContext, flattened (the runner layer does not know the
// sampler's types). Ranges as in SamplingParams; logprobs at most 20 (kMaxDeviceTopLogprobs).
struct DeviceSampleParams {
    float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
    int32_t top_k = 0;
    float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
    int32_t logprobs = -1;
    uint64_t seed = 0, stream = 0;
    int64_t position = 0;  // index of the token being sampled within the output
    std::span<const PenaltyToken> penalty_tokens;
};
inline constexpr int kMaxDeviceTopLogprobs = 20;

// A chunk token the host does not know yet when the step is launched (overlapped scheduling,
// ModelRunner::launch): the token the runner sampled for the same sequence (seq_id) as a device-
// sampled row of the step launched just before this one. The runner substitutes it on its side.
inline constexpr int32_t kPendingToken = -1;

// One sequence's slice of work in a step: a prefill chunk (many tokens) or a decode step (one).
struct SeqChunk {
    int64_t seq_id = 0;                         // engine-wide unique id of the sequence
    std::span<const int32_t> tokens;            // [n_tokens] token ids of this chunk (or kPendingToken)
    int64_t start_pos = 0;                      // absolute position of tokens[0]; 0 = a new sequence
    bool want_logits = true;                    // produce logits for the last token of the chunk
    std::span<const int32_t> page_table;        // pages owned by the sequence, in KvLayout order
    DeviceSample sample = DeviceSample::kNone;  // with want_logits: logits row or sampled token
    DeviceSampleParams params{};                // with sample == kFull
    // Speculative decoding (issue 24; ModelRunner::max_draft_tokens() > 0):
    // - mtp: the sequence speculates, so the runner keeps its MTP block's state current (every chunk
    //   of such a sequence, prefill and plain decode included, sets it; model/spec_state.h);
    // - draft_tokens k > 0 (one token, want_logits, sample kNone, kGreedy or kFull): a verify chunk. The
    //   runner drafts k tokens d1..dk after tokens[0], runs [tokens[0], d1..dk] at
    //   start_pos..start_pos+k and returns k + 1 rows (row i: the token after position start_pos + i;
    //   logits rows, or with kGreedy their k + 1 argmax ids in StepOutput::tokens) and the drafts
    //   (StepOutput::drafts). The sequence's next chunk starts at the first position the engine did
    //   not accept; the runner undoes the rest then.
    bool mtp = false;
    int32_t draft_tokens = 0;
};

// One whole page of the pool copied onto another (prefix caching: a sequence's state pages saved
// as a snapshot at a block boundary, or a cached snapshot restored into a new sequence's pages).
struct PageCopy {
    int32_t src = 0, dst = 0;
};

struct ForwardBatch {
    std::vector<SeqChunk> seqs;
    // Done before the step computes anything, in order (a later copy may read an earlier one's
    // destination); the step's chunks then see the copied pages. A batch may hold copies only.
    std::vector<PageCopy> page_copies;
    int64_t n_tokens() const {
        int64_t n = 0;
        for (const auto& s : seqs) n += int64_t(s.tokens.size());
        return n;
    }
};

}  // namespace dsv4
