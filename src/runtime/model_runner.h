// ModelRunner: the engine's view of a model on some backend. The serving engine (one thread)
// calls forward() once per step; state of each sequence lives in the pages named by its page
// table, so the runner itself keeps no per-sequence state that the scheduler does not know of.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "runtime/forward_batch.h"
#include "model/kv_layout.h"

namespace dsv4 {

class ModelRunner {
public:
    virtual ~ModelRunner() = default;
    virtual const ModelConfig& config() const = 0;
    virtual const KvLayout& kv_layout() const = 0;
    virtual int64_t n_pages() const = 0;   // pages in the pool

    // Runs one step. For every seq with want_logits, appends one row of vocab_size f32 logits
    // (for its last token) to `logits`, in batch order. Errors: a token id outside the vocabulary,
    // a page table too short for start_pos + n_tokens.
    virtual Status forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) = 0;
};

}  // namespace dsv4
