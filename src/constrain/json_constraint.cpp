// JsonConstraint (see json_constraint.h).
#include "constrain/json_constraint.h"

#include <limits>

namespace dsv4::constrain {

JsonConstraint::JsonConstraint(std::shared_ptr<const CompiledSchema> schema, std::shared_ptr<const VocabIndex> vocab)
    : schema_(std::move(schema)), vocab_(std::move(vocab)), m_(schema_) {}

std::unique_ptr<TokenConstraint> JsonConstraint::clone() const { return std::make_unique<JsonConstraint>(*this); }

void JsonConstraint::mask(std::span<float> logits, int32_t eos) {
    eos_ = eos;
    const std::string key = m_.state_key();
    auto it = cache_.find(key);
    if (it == cache_.end()) {
        if (cache_.size() >= kCacheEntries) cache_.clear();
        std::vector<uint8_t> allow;
        vocab_->allowed(m_, allow);
        it = cache_.emplace(key, std::move(allow)).first;
    }
    const std::vector<uint8_t>& allow = it->second;
    const float ninf = -std::numeric_limits<float>::infinity();
    const bool has_eos = eos >= 0 && size_t(eos) < logits.size();
    const float eos_logit = has_eos ? logits[size_t(eos)] : 0.0f;
    for (size_t t = 0; t < logits.size(); ++t)
        if (t >= allow.size() || !allow[t]) logits[t] = ninf;
    // EOS (a special token: no bytes in the index) ends exactly the complete documents.
    if (has_eos) logits[size_t(eos)] = m_.accepting() ? eos_logit : ninf;
}

bool JsonConstraint::advance(int32_t token) {
    if (token == eos_ && eos_ >= 0) return m_.accepting();
    if (token < 0 || token >= vocab_->size()) return false;
    const std::string_view b = vocab_->bytes(token);
    return !b.empty() && m_.feed(b);
}

}  // namespace dsv4::constrain
