// VocabIndex (see vocab_index.h).
#include "constrain/vocab_index.h"

#include <algorithm>

namespace dsv4::constrain {

VocabIndex::VocabIndex(std::vector<std::string> bytes) : bytes_(std::move(bytes)) {
    for (size_t i = 0; i < bytes_.size(); ++i)
        if (!bytes_[i].empty()) sorted_.push_back(int32_t(i));
    std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
}

// sorted_[lo, hi) share their first `depth` bytes, which m has taken. Those that end there are
// first in the range (a prefix sorts before its extensions); the rest group by their next byte.
void VocabIndex::walk(size_t lo, size_t hi, size_t depth, const JsonMatcher& m, std::vector<uint8_t>& allow) const {
    while (lo < hi && bytes_[size_t(sorted_[lo])].size() == depth) allow[size_t(sorted_[lo++])] = 1;
    while (lo < hi) {
        const uint8_t c = uint8_t(bytes_[size_t(sorted_[lo])][depth]);
        size_t end = lo + 1;
        while (end < hi && uint8_t(bytes_[size_t(sorted_[end])][depth]) == c) ++end;
        if (m.absorbs(c)) {
            walk(lo, end, depth + 1, m, allow);
        } else {
            JsonMatcher next = m;
            if (next.feed(c)) walk(lo, end, depth + 1, next, allow);
        }
        lo = end;
    }
}

void VocabIndex::allowed(const JsonMatcher& m, std::vector<uint8_t>& allow) const {
    allow.assign(bytes_.size(), 0);
    walk(0, sorted_.size(), 0, m, allow);
}

}  // namespace dsv4::constrain
