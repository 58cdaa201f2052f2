// MatcherConstraint: a byte-level matcher (JsonMatcher, DsmlMatcher) as a TokenConstraint: the
// vocabulary walked with the matcher gives the token mask. Masks are cached by matcher state (a
// grammar revisits the same states: the start of each value, the inside of a string), so most
// steps reuse one. JsonConstraint (structured output) and ToolCallConstraint (enforced tool calls)
// are its two forms.
#pragma once

#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "constrain/dsml_matcher.h"
#include "constrain/json_matcher.h"
#include "constrain/vocab_index.h"
#include "sample/token_constraint.h"

namespace dsv4::constrain {

// M: copyable; bool feed(uint8_t), bool feed(std::string_view), bool absorbs(uint8_t) const,
// bool accepting() const, bool finished() const, std::string state_key() const.
template <class M>
class MatcherConstraint final : public TokenConstraint {
public:
    MatcherConstraint(M initial, std::shared_ptr<const VocabIndex> vocab)
        : vocab_(std::move(vocab)), m_(std::move(initial)) {}
    std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<MatcherConstraint>(*this); }

    void mask(std::span<float> logits, int32_t eos) override {
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
        // EOS (a special token: no bytes in the index) ends exactly the complete outputs.
        if (has_eos) logits[size_t(eos)] = m_.accepting() ? eos_logit : ninf;
    }
    bool advance(int32_t token) override {
        if (token == eos_ && eos_ >= 0) return m_.accepting();
        if (token < 0 || token >= vocab_->size()) return false;
        const std::string_view b = vocab_->bytes(token);
        return !b.empty() && m_.feed(b);
    }
    bool complete() const override { return m_.accepting(); }
    bool finished() const override { return m_.finished(); }

private:
    static constexpr size_t kCacheEntries = 64;
    std::shared_ptr<const VocabIndex> vocab_;
    M m_;
    int32_t eos_ = -1;
    std::unordered_map<std::string, std::vector<uint8_t>> cache_;
};

using JsonConstraint = MatcherConstraint<JsonMatcher>;
using ToolCallConstraint = MatcherConstraint<DsmlMatcher>;

inline std::shared_ptr<TokenConstraint> make_json_constraint(std::shared_ptr<const CompiledSchema> schema,
                                                             std::shared_ptr<const VocabIndex> vocab) {
    return std::make_shared<JsonConstraint>(JsonMatcher(std::move(schema)), std::move(vocab));
}

}  // namespace dsv4::constrain
