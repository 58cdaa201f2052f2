// The default (synchronous) launch()/collect() of ModelRunner (see model_runner.h).
#include "runtime/model_runner.h"

#include <algorithm>

namespace dsv4 {

Status resolve_pending_tokens(const ForwardBatch& batch, const std::unordered_map<int64_t, int32_t>& sampled,
                              ForwardBatch& resolved, std::vector<int32_t>& storage) {
    size_t n = 0;
    for (const auto& c : batch.seqs) n += c.tokens.size();
    storage.clear();
    storage.reserve(n);  // no reallocation below: the spans stay valid
    resolved.seqs = batch.seqs;
    for (auto& c : resolved.seqs) {
        const size_t at = storage.size();
        for (int32_t t : c.tokens) {
            if (t == kPendingToken) {
                auto it = sampled.find(c.seq_id);
                if (it == sampled.end())
                    return error(StatusCode::kFailedPrecondition,
                                 "sequence {}: a pending token, but the previous step sampled no token for it", c.seq_id);
                t = it->second;
            }
            storage.push_back(t);
        }
        c.tokens = std::span<const int32_t>(storage.data() + at, c.tokens.size());
    }
    return Status::ok();
}

Status ModelRunner::launch(const ForwardBatch& batch) {
    if (done_.size() >= 2) return error(StatusCode::kFailedPrecondition, "two steps launched and not collected");
    ForwardBatch resolved;
    std::vector<int32_t> storage;
    DSV4_RETURN_IF_ERROR(resolve_pending_tokens(batch, last_sampled_, resolved, storage));
    DoneStep step;
    step.status = forward_sampled(resolved, step.out);
    last_sampled_.clear();
    if (step.status.is_ok()) {
        size_t dev = 0;
        for (const auto& c : batch.seqs)
            if (c.want_logits && c.sample != DeviceSample::kNone && dev < step.out.tokens.size())
                last_sampled_[c.seq_id] = step.out.tokens[dev++];
    }
    // A failed step is still collected (collect() returns its error), as an asynchronous runner
    // learns of a device error only then.
    done_.push_back(std::move(step));
    return Status::ok();
}

Status ModelRunner::collect(StepOutput& out) {
    if (done_.empty()) return error(StatusCode::kFailedPrecondition, "collect() without a launched step");
    DoneStep step = std::move(done_.front());
    done_.pop_front();
    out = std::move(step.out);
    return step.status;
}

}  // namespace dsv4
