// StopMatcher: searches held-back tail + new text for the earliest stop, then keeps the longest
// suffix that is a proper prefix of some stop. Stops are valid UTF-8, so the cut always falls
// on a character boundary of valid text.
#include "tokenizer/stop_matcher.h"

#include <algorithm>

namespace dsv4 {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
    for (auto& s : stops) {
        if (!s.empty()) stops_.push_back(std::move(s));
    }
}

StopMatcher::Out StopMatcher::push(std::string_view text) {
    Out out;
    if (stopped_) {
        out.stopped = true;
        return out;
    }
    held_.append(text);
    size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        out.emit = held_.substr(0, first);
        out.stopped = true;
        stopped_ = true;
        held_.clear();
        return out;
    }
    size_t keep = 0;
    for (const std::string& s : stops_) {
        const size_t max_len = std::min(s.size() - 1, held_.size());
        for (size_t len = max_len; len > keep; --len) {
            if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
                keep = len;
                break;
            }
        }
    }
    out.emit = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopMatcher::finish() {
    std::string rest = std::move(held_);
    held_.clear();
    return stopped_ ? std::string() : rest;
}

}  // namespace dsv4
