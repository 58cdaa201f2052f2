#include "runtime/ref_runner.h"

#include <algorithm>
#include <cstring>

namespace dsv4 {

RefRunner::RefRunner(std::shared_ptr<const RefModel> model, KvLayout layout, int64_t n_pages)
    : model_(std::move(model)), layout_(std::move(layout)), n_pages_(n_pages) {
    pool_.assign(size_t(n_pages_ * layout_.page_elems), 0.0f);
    scratch_.assign(size_t(layout_.n_state_pages * layout_.page_elems), 0.0f);
}

Result<std::unique_ptr<RefRunner>> RefRunner::create(std::shared_ptr<const RefModel> model,
                                                     int64_t page_tokens, int64_t n_pages) {
    DSV4_ASSIGN_OR_RETURN(KvLayout layout, KvLayout::make(model->config(), page_tokens, 4));
    if (n_pages < layout.n_state_pages + 1)
        return invalid_argument("page pool of {} pages cannot hold one sequence ({} state pages + 1)",
                                n_pages, layout.n_state_pages);
    return std::unique_ptr<RefRunner>(new RefRunner(std::move(model), std::move(layout), n_pages));
}

Status RefRunner::forward_seq(const SeqChunk& c, const RefForwardOptions& opt, std::vector<float>& logits) {
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
    SeqStateView view{&layout_, scratch_.data(), pool_.data(), c.page_table.subspan(size_t(ns))};
    Status s = model_->forward(view, c.tokens, c.start_pos, opt, logits);
    if (s.is_ok())
        for (int64_t i = 0; i < ns; ++i)
            std::memcpy(&pool_[size_t(c.page_table[i]) * pe], &scratch_[size_t(i * pe)], sizeof(float) * pe);
    return s;
}

Status RefRunner::forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) {
    const int64_t pe = layout_.page_elems;
    for (const PageCopy& pc : batch.page_copies) {
        if (pc.src < 0 || pc.src >= n_pages_ || pc.dst < 0 || pc.dst >= n_pages_)
            return error(StatusCode::kOutOfRange, "page copy {} -> {} outside the pool [0, {})", pc.src, pc.dst, n_pages_);
        std::memcpy(&pool_[size_t(pc.dst) * size_t(pe)], &pool_[size_t(pc.src) * size_t(pe)], sizeof(float) * size_t(pe));
    }
    std::vector<float> row;
    for (const SeqChunk& c : batch.seqs) {
        RefForwardOptions opt;
        opt.want_logits = c.want_logits;
        DSV4_RETURN_IF_ERROR(forward_seq(c, opt, row).with_context(fmt::format("sequence {}", c.seq_id)));
        if (c.want_logits) logits.push_back(row);
    }
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
