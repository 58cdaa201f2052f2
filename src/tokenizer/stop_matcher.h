// Stop strings over a text stream: finds a stop even when it spans chunks, never emits the
// stop text or anything after it, and holds back a chunk tail that could be the start of a
// stop until the next chunk decides; finish() releases that tail when the stream ends.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

class StopMatcher {
public:
    // Empty stop strings are ignored.
    explicit StopMatcher(std::vector<std::string> stops);

    struct Out {
        std::string emit;      // text safe to send now
        bool stopped = false;  // a stop string was found; later input is ignored
    };
    Out push(std::string_view text);
    // Text held back at the end of the stream ("" once stopped).
    std::string finish();

    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;  // tail that may begin a stop string
    bool stopped_ = false;
};

}  // namespace dsv4
