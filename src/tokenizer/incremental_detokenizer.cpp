// IncrementalDetokenizer: a lossy UTF-8 stream decoder fed with each token's bytes.
#include "tokenizer/incremental_detokenizer.h"

namespace dsv4 {

std::string IncrementalDetokenizer::push(int32_t id) {
    std::string out;
    decoder_.push(tok_.token_bytes(id, skip_special_), out);
    return out;
}

std::string IncrementalDetokenizer::finish() {
    std::string out;
    decoder_.finish(out);
    return out;
}

}  // namespace dsv4
