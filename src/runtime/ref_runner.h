// RefRunner: ModelRunner on the CPU reference (RefModel). Owns the page pool; each sequence's
// state area is gathered from its state pages before its chunk runs and scattered back after,
// so the runner keeps no per-sequence state of its own (pages are the only truth).
#pragma once

#include <memory>
#include <vector>

#include "model/ref_model.h"
#include "model/ref_speculative.h"
#include "runtime/model_runner.h"

namespace dsv4 {

// Speculative decoding on the reference runner (issue 24): verify chunks of up to max_tokens drafts
// (0: none), drafted by the model's MTP block, or by the target itself (a test mode: every draft is
// the target's own greedy token, so every one is accepted under greedy sampling).
struct RefSpeculation {
    int max_tokens = 0;
    DraftSource draft = DraftSource::kMtp;
};

class RefRunner final : public ModelRunner {
public:
    // page_tokens: tokens per token page; n_pages: pool size. Errors: a pool too small for one
    // sequence; speculation the model or its layout cannot hold (MTP drafts without an MTP block,
    // more drafts than KvLayout::make allows).
    static Result<std::unique_ptr<RefRunner>> create(std::shared_ptr<const RefModel> model, int64_t page_tokens,
                                                     int64_t n_pages, RefSpeculation spec = {});

    const ModelConfig& config() const override { return model_->config(); }
    const KvLayout& kv_layout() const override { return layout_; }
    int64_t n_pages() const override { return n_pages_; }
    int max_draft_tokens() const override { return spec_.max_tokens; }
    Status forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) override;
    Status forward_sampled(const ForwardBatch& batch, StepOutput& out) override;

    // Single-sequence entry with full options (tests: all-position logits, named dumps).
    Status forward_seq(const SeqChunk& chunk, const RefForwardOptions& opt, std::vector<float>& logits);

private:
    RefRunner(std::shared_ptr<const RefModel> model, KvLayout layout, int64_t n_pages, RefSpeculation spec);
    // One chunk on the gathered state area of a runner built with speculation: rollback of the
    // state's unresolved verify chunk, and for a speculating sequence (SeqChunk::mtp) the MTP
    // block's pending positions, drafts and verify (see spec_state.h).
    Status speculative_chunk(const SeqChunk& c, const SeqStateView& view, std::vector<float>& logits,
                             std::vector<int32_t>& drafts);
    // The MTP block over the pending positions, whose next token is now `next`: its logits at the
    // last of them (the first draft's) and its output streams there. Nothing pending: false.
    // forward_sampled without its device-sampling check (forward() ignores SeqChunk::sample).
    Status run(const ForwardBatch& batch, StepOutput& out);
    Status gather(const SeqChunk& c);  // the chunk's state pages into scratch_ (checks the page table)
    void scatter(const SeqChunk& c);   // and back
    SeqStateView view_of(const SeqChunk& c);
    Result<bool> mtp_catch_up(const SeqStateView& view, int32_t next, std::vector<float>& logits,
                              std::vector<float>& mtp_streams);

    std::shared_ptr<const RefModel> model_;
    RefSpeculation spec_;
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
