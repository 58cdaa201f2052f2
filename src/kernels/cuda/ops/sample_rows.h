// Full sampling on the device (sample_rows): the host sampler's algorithm (src/sample/sampler.cpp,
// the reference) run on logits rows where they live, one CTA per row, so that only the chosen
// token (and the requested logprobs) cross to the host.
//
// Same tokens as the host sampler for the same logits and seed: the weights are bitwise the host's
// (exp in double rounded to float, the correctly rounded expf that glibc returns in all but rare
// cases), the uniform is the same philox_uniform(seed, stream, position), penalties use the same
// float operations in the same order (no contraction into FMA), and the walk goes over the same
// order (id order without filters; probability desc, id asc with top_k / top_p / min_p).
// Tie rule: cumulative sums are double in both, but summed in a different order (host: one
// running sum; device: per-warp shuffle scans / per-digit bucket sums), so where the draw lands
// within ~1e-15 (relative) of a boundary between two tokens the two may pick neighbours. Logprobs
// are computed in double on both sides and agree to float rounding.
// logit_bias: the request path carries none (SamplingParams has no field, the server ignores the
// key); when it does, it is one more per-row token list added to the raw logits before penalties.
// Measured (H200, cuda_sample_rows_test perf, V=129,280): 240 us for one row at temperature 1.0,
// 352 us for 64 rows, 468 us for 256; with top_p 0.9, 615 / 733 / 1,271 us. One CTA per row, so
// one row is latency-bound: splitting a row over several CTAs is the next step if it shows.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace dsv4::cuda {

inline constexpr int kSampleMaxTopLogprobs = 20;  // the OpenAI API's top_logprobs limit

// One entry per token id a row's penalties or stop masking touch (unique ids per row).
struct SamplePenaltyToken {
    int32_t token = 0;
    int32_t output_count = 0;  // occurrences in the output (presence / frequency penalties)
    uint8_t seen = 0;          // in the prompt or the output (repetition penalty)
    uint8_t masked = 0;        // -inf (min_tokens not reached: EOS / stop ids)
    float bias = 0.0f;         // logit_bias, added before the penalties
};

// Per row: the sequence's SamplingParams and SampleContext, flattened. temperature <= 0 = greedy
// over the penalised logits (sample_is_plain_argmax rows use argmax_rows instead).
struct SampleRowArgs {
    int32_t row = 0;  // logits row
    float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
    int32_t top_k = 0;
    float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
    int32_t logprobs = -1;  // -1 = none; else 0..kSampleMaxTopLogprobs alternatives
    uint64_t seed = 0, stream = 0;
    int64_t position = 0;
    int32_t tok_begin = 0, n_tok = 0;  // its SamplePenaltyToken entries
    // >= 0: step_tokens[pending_index] is the row's latest output token, sampled by the previous step
    // and not counted in the entries (overlapped scheduling, runtime/forward_batch.h kPendingToken):
    // the kernel counts it, once more in output_count (presence / frequency) and as seen (repetition),
    // or as an extra entry when the list lacks it. -1: the entries are complete.
    int32_t pending_index = -1;
};

struct SampleRowOut {
    int32_t token = 0;
    float logprob = 0.0f;  // raw-logit logprob of `token` (clamped finite) when logprobs >= 0
    int32_t n_top = 0;
    int32_t top_token[kSampleMaxTopLogprobs];
    float top_logprob[kSampleMaxTopLogprobs];
};

// logits [*, V] f32 (the rows named by args[i].row are modified in place by penalties and then
// restored), weights [n, V] f32 scratch, saved [total penalty entries] f32 scratch; args, toks,
// out: device arrays of n rows / entries. One CTA of 1024 threads per row, 128 KiB dynamic shared.
// step_tokens: the step's token ids, read at args[i].pending_index (null when no row has one).
cudaError_t sample_rows(float* logits, int64_t V, const SampleRowArgs* args, int n, const SamplePenaltyToken* toks,
                        float* weights, float* saved, SampleRowOut* out, cudaStream_t st,
                        const int32_t* step_tokens = nullptr);

}  // namespace dsv4::cuda
