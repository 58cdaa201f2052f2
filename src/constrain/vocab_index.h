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

namespace dsv4::constrain {

class VocabIndex {
public:
    // bytes[id]: token id's bytes; "" for a token no constraint allows (special tokens, padding ids).
    explicit VocabIndex(std::vector<std::string> bytes);
    int64_t size() const { return int64_t(bytes_.size()); }
    std::string_view bytes(int32_t id) const { return bytes_[size_t(id)]; }
    // allow[id] = 1 for every token whose whole byte string the matcher accepts from its state, else
    // 0 (allow is resized to size()). M: copyable, bool feed(uint8_t), bool absorbs(uint8_t) const
    // (true: feeding the byte would accept it and leave the state as it is).
    template <class M>
    void allowed(const M& m, std::vector<uint8_t>& allow) const {
        allow.assign(bytes_.size(), 0);
        walk(0, sorted_.size(), 0, m, allow);
    }

private:
    // sorted_[lo, hi) share their first `depth` bytes, which m has taken. Those that end there are
    // first in the range (a prefix sorts before its extensions); the rest group by their next byte.
    template <class M>
    void walk(size_t lo, size_t hi, size_t depth, const M& m, std::vector<uint8_t>& allow) const {
        while (lo < hi && bytes_[size_t(sorted_[lo])].size() == depth) allow[size_t(sorted_[lo++])] = 1;
        while (lo < hi) {
            const uint8_t c = uint8_t(bytes_[size_t(sorted_[lo])][depth]);
            size_t end = lo + 1;
            while (end < hi && uint8_t(bytes_[size_t(sorted_[end])][depth]) == c) ++end;
            if (m.absorbs(c)) {
                walk(lo, end, depth + 1, m, allow);
            } else {
                M next = m;
                if (next.feed(c)) walk(lo, end, depth + 1, next, allow);
            }
            lo = end;
        }
    }

    std::vector<std::string> bytes_;
    std::vector<int32_t> sorted_;  // ids with bytes, ordered by their bytes
};

}  // namespace dsv4::constrain
