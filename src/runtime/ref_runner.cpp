#include "runtime/ref_runner.h"

#include <algorithm>
#include <cstring>

#include "model/spec_state.h"

namespace dsv4 {

RefRunner::RefRunner(std::shared_ptr<const RefModel> model, KvLayout layout, int64_t n_pages, RefSpeculation spec)
    : model_(std::move(model)), spec_(spec), layout_(std::move(layout)), n_pages_(n_pages) {
    pool_.assign(size_t(n_pages_ * layout_.page_elems), 0.0f);
    scratch_.assign(size_t(layout_.n_state_pages * layout_.page_elems), 0.0f);
}

Result<std::unique_ptr<RefRunner>> RefRunner::create(std::shared_ptr<const RefModel> model, int64_t page_tokens,
                                                     int64_t n_pages, RefSpeculation spec) {
    const bool mtp = spec.max_tokens > 0 && spec.draft == DraftSource::kMtp;
    if (mtp && model->mtp_blocks() < 1)
        return error(StatusCode::kFailedPrecondition,
                     "speculative decoding with MTP drafts needs the checkpoint's MTP block (mtp.0.*), which it lacks");
    DSV4_ASSIGN_OR_RETURN(KvLayout layout, KvLayout::make(model->config(), page_tokens, 4, KvRowFormat::kF32,
                                                          mtp ? 1 : 0, spec.max_tokens));
    if (n_pages < layout.n_state_pages + 1)
        return invalid_argument("page pool of {} pages cannot hold one sequence ({} state pages + 1)", n_pages,
                                layout.n_state_pages);
    return std::unique_ptr<RefRunner>(new RefRunner(std::move(model), std::move(layout), n_pages, spec));
}

Status RefRunner::gather(const SeqChunk& c) {
    const int64_t ns = layout_.n_state_pages, pe = layout_.page_elems;
    if (int64_t(c.page_table.size()) < ns)
        return error(StatusCode::kFailedPrecondition, "sequence {}: page table has {} pages, needs {} state pages",
                     c.seq_id, c.page_table.size(), ns);
    for (int32_t p : c.page_table)
        if (p < 0 || p >= n_pages_)
            return error(StatusCode::kOutOfRange, "sequence {}: page id {} outside the pool [0, {})", c.seq_id, p,
                         n_pages_);
    for (int64_t i = 0; i < ns; ++i)
        std::memcpy(&scratch_[size_t(i * pe)], &pool_[size_t(c.page_table[i]) * pe], sizeof(float) * pe);
    return Status::ok();
}

void RefRunner::scatter(const SeqChunk& c) {
    const int64_t ns = layout_.n_state_pages, pe = layout_.page_elems;
    for (int64_t i = 0; i < ns; ++i)
        std::memcpy(&pool_[size_t(c.page_table[i]) * pe], &scratch_[size_t(i * pe)], sizeof(float) * pe);
}

SeqStateView RefRunner::view_of(const SeqChunk& c) {
    return SeqStateView{&layout_, scratch_.data(), pool_.data(), c.page_table.subspan(size_t(layout_.n_state_pages))};
}

Status RefRunner::forward_seq(const SeqChunk& c, const RefForwardOptions& opt, std::vector<float>& logits) {
    DSV4_RETURN_IF_ERROR(gather(c));
    Status s = model_->forward(view_of(c), c.tokens, c.start_pos, opt, logits);
    if (s.is_ok()) scatter(c);
    return s;
}

Result<bool> RefRunner::mtp_catch_up(const SeqStateView& view, int32_t next, std::vector<float>& logits,
                                     std::vector<float>& mtp_streams) {
    float* st = view.state;
    SpecHeader h = spec_header(layout_, st);
    const int64_t m = h.pending_len, nd = int64_t(config().hc_mult) * config().hidden_size;
    if (m == 0) return false;
    std::vector<int32_t> next_tokens;
    for (int64_t i = 1; i < m; ++i) next_tokens.push_back(spec_pending_token(layout_, st, i));
    next_tokens.push_back(next);
    const std::span<float> rows = spec_pending_streams(layout_, st, m, nd);
    const std::vector<float> streams(rows.begin(), rows.end());
    RefForwardOptions o;
    o.streams_out = &mtp_streams;
    DSV4_RETURN_IF_ERROR(model_->mtp_forward(0, view, streams, next_tokens, h.pending_start, o, logits));
    h.pending_len = 0;
    set_spec_header(layout_, st, h);
    return true;
}

Status RefRunner::speculative_chunk(const SeqChunk& c, const SeqStateView& view, std::vector<float>& logits,
                                    std::vector<int32_t>& drafts) {
    const ModelConfig& cfg = config();
    float* st = view.state;
    const int64_t P = c.start_pos, nd = int64_t(cfg.hc_mult) * cfg.hidden_size;
    const int k = c.draft_tokens;
    const bool mtp = c.mtp && spec_.draft == DraftSource::kMtp;
    if (k < 0 || k > spec_.max_tokens)
        return invalid_argument("{} draft tokens asked; this runner verifies at most {}", k, spec_.max_tokens);
    if (k > 0 && (P == 0 || c.tokens.size() != 1 || !c.want_logits))
        return invalid_argument("a verify chunk is one token after the prompt with want_logits (got {} tokens at {})",
                                c.tokens.size(), P);
    std::vector<float> lg, mtp_streams;
    bool have_draft = false;
    if (P > 0) {
        // Undo the rejected positions of the last verify chunk, then feed the MTP block what waited
        // for this chunk's first token.
        DSV4_RETURN_IF_ERROR(spec_rollback(layout_, st, P));
        SpecHeader h = spec_header(layout_, st);
        if (!c.mtp && h.pending_len > 0) {
            // A sequence that does not speculate keeps no MTP state: nothing waits for its tokens.
            h.pending_len = 0;
            set_spec_header(layout_, st, h);
        }
        if (h.pending_len > 0 && h.pending_start + h.pending_len != P)
            return error(StatusCode::kFailedPrecondition, "the MTP block's pending positions [{}, {}) do not end at {}",
                         h.pending_start, h.pending_start + h.pending_len, P);
        if (mtp) {
            DSV4_ASSIGN_OR_RETURN(have_draft, mtp_catch_up(view, c.tokens[0], lg, mtp_streams));
        }
    }
    std::vector<int32_t> tokens(c.tokens.begin(), c.tokens.end());
    drafts.clear();
    if (k > 0) {
        if (mtp) {
            if (!have_draft)
                return error(StatusCode::kFailedPrecondition, "no MTP input is pending before position {}", P);
            // Recursive drafts: the block at P, P+1, ... on its own output streams. Its ring slots of
            // those positions are put back afterwards: the block runs there for real once accepted.
            const int mtp_layer = cfg.n_layers;
            const int64_t D = layout_.row_words_main, W = layout_.ring_rows;
            std::vector<float> ring(size_t(std::max(k - 1, 0)) * size_t(D));
            for (int i = 1; i < k; ++i)
                std::memcpy(&ring[size_t(i - 1) * D], st + layout_.ring_row(mtp_layer, (P + i - 1) % W),
                            sizeof(float) * D);
            drafts.push_back(greedy_token(lg));
            for (int i = 1; i < k; ++i) {
                const std::vector<float> h(mtp_streams.end() - nd, mtp_streams.end());
                RefForwardOptions o;
                o.streams_out = &mtp_streams;
                DSV4_RETURN_IF_ERROR(
                    model_->mtp_forward(0, view, h, std::span<const int32_t>(&drafts.back(), 1), P + i - 1, o, lg));
                drafts.push_back(greedy_token(lg));
            }
            for (int i = 1; i < k; ++i)
                std::memcpy(st + layout_.ring_row(mtp_layer, (P + i - 1) % W), &ring[size_t(i - 1) * D],
                            sizeof(float) * D);
        } else {
            // The target's own greedy continuation; the state it wrote is put back whole.
            const std::vector<float> saved(st, st + layout_.state_elems);
            int32_t t = tokens[0];
            for (int i = 0; i < k; ++i) {
                DSV4_RETURN_IF_ERROR(model_->forward(view, std::span<const int32_t>(&t, 1), P + i, {}, lg));
                t = greedy_token(lg);
                drafts.push_back(t);
            }
            std::copy(saved.begin(), saved.end(), st);
        }
        tokens.insert(tokens.end(), drafts.begin(), drafts.end());
        spec_backup(layout_, st, P, int64_t(tokens.size()));
    }
    RefForwardOptions o;
    o.want_logits = c.want_logits;
    o.all_logits = k > 0;
    std::vector<float> streams;
    if (mtp) o.streams_out = &streams;
    DSV4_RETURN_IF_ERROR(model_->forward(view, tokens, P, o, logits));
    if (!mtp) return Status::ok();
    // The MTP block's inputs: a verify chunk's positions all wait (which are kept is not known yet);
    // other chunks run the block up to their second-to-last position and leave the last waiting.
    const int64_t n = int64_t(tokens.size());
    int64_t first_pending = P;
    if (k == 0 && n > 1) {
        RefForwardOptions mo;
        mo.want_logits = false;
        DSV4_RETURN_IF_ERROR(model_->mtp_forward(0, view, std::span<const float>(streams).first(size_t((n - 1) * nd)),
                                                 std::span<const int32_t>(tokens).subspan(1), P, mo, lg));
        first_pending = P + n - 1;
    }
    SpecHeader h = spec_header(layout_, st);
    h.pending_start = int32_t(first_pending);
    h.pending_len = int32_t(P + n - first_pending);
    for (int64_t q = first_pending; q < P + n; ++q)
        set_spec_pending_token(layout_, st, q - first_pending, tokens[size_t(q - P)]);
    const std::span<float> dst = spec_pending_streams(layout_, st, h.pending_len, nd);
    std::copy(streams.begin() + (first_pending - P) * nd, streams.end(), dst.begin());
    set_spec_header(layout_, st, h);
    return Status::ok();
}

Status RefRunner::forward_sampled(const ForwardBatch& batch, StepOutput& out) {
    for (const SeqChunk& c : batch.seqs)
        if (c.want_logits && c.sample != DeviceSample::kNone)
            return invalid_argument("sequence {}: this runner does not sample on the device", c.seq_id);
    return run(batch, out);
}

Status RefRunner::run(const ForwardBatch& batch, StepOutput& out) {
    out = StepOutput{};
    const int64_t pe = layout_.page_elems;
    for (const SeqChunk& c : batch.seqs)
        if ((c.mtp || c.draft_tokens > 0) && spec_.max_tokens == 0)
            return invalid_argument("sequence {}: this runner was built without speculative decoding", c.seq_id);
    for (const PageCopy& pc : batch.page_copies) {
        if (pc.src < 0 || pc.src >= n_pages_ || pc.dst < 0 || pc.dst >= n_pages_)
            return error(StatusCode::kOutOfRange, "page copy {} -> {} outside the pool [0, {})", pc.src, pc.dst,
                         n_pages_);
        std::memcpy(&pool_[size_t(pc.dst) * size_t(pe)], &pool_[size_t(pc.src) * size_t(pe)],
                    sizeof(float) * size_t(pe));
    }
    std::vector<float> rows;
    const int64_t V = config().vocab_size;
    for (const SeqChunk& c : batch.seqs) {
        const auto ctx = fmt::format("sequence {}", c.seq_id);
        // With speculation every chunk goes this way, speculating or not: its state may hold an
        // unresolved verify chunk (its own, or one a prefix-cache snapshot carried in) to undo.
        if (spec_.max_tokens > 0) {
            DSV4_RETURN_IF_ERROR(gather(c).with_context(ctx));
            std::vector<int32_t> drafts;
            DSV4_RETURN_IF_ERROR(speculative_chunk(c, view_of(c), rows, drafts).with_context(ctx));
            scatter(c);
            if (c.draft_tokens > 0) out.drafts.push_back(std::move(drafts));
        } else {
            RefForwardOptions opt;
            opt.want_logits = c.want_logits;
            DSV4_RETURN_IF_ERROR(forward_seq(c, opt, rows).with_context(ctx));
        }
        if (c.want_logits)
            for (size_t r = 0; r < rows.size() / size_t(V); ++r)
                out.logits.emplace_back(rows.begin() + long(r * V), rows.begin() + long((r + 1) * V));
    }
    return Status::ok();
}

Status RefRunner::forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) {
    StepOutput out;
    DSV4_RETURN_IF_ERROR(run(batch, out));  // SeqChunk::sample ignored, as forward() promises
    for (auto& row : out.logits) logits.push_back(std::move(row));
    return Status::ok();
}

SimplePagePool::SimplePagePool(int64_t n_pages) {
    for (int64_t i = n_pages - 1; i >= 0; --i) free_.push_back(int32_t(i));
}

bool SimplePagePool::grow(std::vector<int32_t>& table, int64_t n) {
    if (n - int64_t(table.size()) > int64_t(free_.size())) return false;
    while (int64_t(table.size()) < n) {
        table.push_back(free_.back());
        free_.pop_back();
    }
    return true;
}

void SimplePagePool::release(std::vector<int32_t>& table) {
    for (int32_t p : table) free_.push_back(p);
    table.clear();
}

}  // namespace dsv4
