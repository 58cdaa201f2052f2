// RefRunner: ModelRunner on the CPU reference (RefModel). Owns the page pool; each sequence's
// state area is gathered from its state pages before its chunk runs and scattered back after,
// so the runner keeps no per-sequence state of its own (pages are the only truth).
#pragma once

#include <memory>
#include <vector>

#include "model/ref_model.h"
#include "runtime/model_runner.h"

namespace dsv4 {

class RefRunner final : public ModelRunner {
public:
    // page_tokens: tokens per token page; n_pages: pool size.
    static Result<std::unique_ptr<RefRunner>> create(std::shared_ptr<const RefModel> model,
                                                     int64_t page_tokens, int64_t n_pages);

    const ModelConfig& config() const override { return model_->config(); }
    const KvLayout& kv_layout() const override { return layout_; }
    int64_t n_pages() const override { return n_pages_; }
    Status forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) override;

    // Single-sequence entry with full options (tests: all-position logits, named dumps).
    Status forward_seq(const SeqChunk& chunk, const RefForwardOptions& opt, std::vector<float>& logits);

private:
    RefRunner(std::shared_ptr<const RefModel> model, KvLayout layout, int64_t n_pages);

    std::shared_ptr<const RefModel> model_;
    KvLayout layout_;
    int64_t n_pages_;
    std::vector<float> pool_;     // [n_pages, page_elems]
    std::vector<float> scratch_;  // [n_state_pages * page_elems] gathered state area
};

// A trivial page allocator for single-sequence tools and tests (the serving engine has its own).
class SimplePagePool {
public:
    explicit SimplePagePool(int64_t n_pages);
    // Grows `table` to `n` pages; false if the pool is exhausted.
    bool grow(std::vector<int32_t>& table, int64_t n);
    void release(std::vector<int32_t>& table);
    int64_t n_free() const { return int64_t(free_.size()); }

private:
    std::vector<int32_t> free_;
};

}  // namespace dsv4
