// VocabIndex (see vocab_index.h).
#include "constrain/vocab_index.h"

#include <algorithm>

namespace dsv4::constrain {

VocabIndex::VocabIndex(std::vector<std::string> bytes) : bytes_(std::move(bytes)) {
    for (size_t i = 0; i < bytes_.size(); ++i)
        if (!bytes_[i].empty()) sorted_.push_back(int32_t(i));
    std::sort(sorted_.begin(), sorted_.end(),
              [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
}

}  // namespace dsv4::constrain
