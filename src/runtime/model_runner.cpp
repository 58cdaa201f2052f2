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
    resolved.page_copies = batch.page_copies;
    for (auto& c : resolved.seqs) {
        const size_t at = storage.size();
        for (int32_t t : c.tokens) {
            if (t == kPendingToken) {
                auto it = sampled.find(c.seq_id);
                if (it == sampled.end())
                    return error(StatusCode::kFailedPrecondition,
                                 "sequence {}: a pending token, but the previous step sampled no token for it",
                                 c.seq_id);
                t = it->second;
            }
            storage.push_back(t);
        }
        c.tokens = std::span<const int32_t>(storage.data() + at, c.tokens.size());
    }
    return Status::ok();
}

void count_pending_token(DeviceSampleParams& p, int32_t token, std::vector<PenaltyToken>& storage) {
    const bool rep = p.repetition_penalty != 1.0f;
    const bool pres_freq = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (!rep && !pres_freq) return;
    storage.assign(p.penalty_tokens.begin(), p.penalty_tokens.end());
    auto it = std::find_if(storage.begin(), storage.end(), [&](const PenaltyToken& t) { return t.token == token; });
    if (it == storage.end()) it = storage.insert(storage.end(), PenaltyToken{.token = token});
    if (rep) it->seen = true;
    if (pres_freq) ++it->output_count;
    p.penalty_tokens = storage;
}

Status ModelRunner::launch(const ForwardBatch& batch) {
    if (done_.size() >= 2) return error(StatusCode::kFailedPrecondition, "two steps launched and not collected");
    ForwardBatch resolved;
    std::vector<int32_t> storage;
    DSV4_RETURN_IF_ERROR(resolve_pending_tokens(batch, last_sampled_, resolved, storage));
    // kFull rows decoding a pending token: their penalty counts lack it (device_sample.h).
    std::vector<std::vector<PenaltyToken>> counted(batch.seqs.size());
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const SeqChunk& c = batch.seqs[i];
        if (c.want_logits && c.sample == DeviceSample::kFull && !c.tokens.empty() && c.tokens.back() == kPendingToken)
            count_pending_token(resolved.seqs[i].params, resolved.seqs[i].tokens.back(), counted[i]);
    }
    DoneStep step;
    step.status = forward_sampled(resolved, step.out);
    if (batch.seqs.empty()) {  // copies only: the last step that sampled stays the pending source
        done_.push_back(std::move(step));
        return Status::ok();
    }
    last_sampled_.clear();
    if (step.status.is_ok()) {
        size_t dev = 0;
        for (const auto& c : batch.seqs) {
            if (!c.want_logits || c.sample == DeviceSample::kNone || dev >= step.out.tokens.size()) continue;
            // A verify chunk's k + 1 picks: its next token waits for the host's acceptance.
            if (c.draft_tokens == 0) last_sampled_[c.seq_id] = step.out.tokens[dev];
            dev += size_t(1 + c.draft_tokens);
        }
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
