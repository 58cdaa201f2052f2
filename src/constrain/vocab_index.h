// VocabIndex: the vocabulary's token byte strings, sorted so that tokens sharing a prefix are
// neighbours, for walking all of them with a byte-level matcher at once: the matcher takes each
// distinct prefix once (a trie walk over the sorted list, no trie stored), and a branch is dropped
// at its first refused byte, so a step costs about the number of live prefixes, not the vocabulary
// times the token length.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "constrain/json_matcher.h"

namespace dsv4::constrain {

class VocabIndex {
public:
    // bytes[id]: token id's bytes; "" for a token no constraint allows (special tokens, padding ids).
    explicit VocabIndex(std::vector<std::string> bytes);
    int64_t size() const { return int64_t(bytes_.size()); }
    std::string_view bytes(int32_t id) const { return bytes_[size_t(id)]; }
    // allow[id] = 1 for every token whose whole byte string the matcher accepts from its state, else
    // 0 (allow is resized to size()).
    void allowed(const JsonMatcher& m, std::vector<uint8_t>& allow) const;

private:
    void walk(size_t lo, size_t hi, size_t depth, const JsonMatcher& m, std::vector<uint8_t>& allow) const;

    std::vector<std::string> bytes_;
    std::vector<int32_t> sorted_;  // ids with bytes, ordered by their bytes
};

}  // namespace dsv4::constrain
