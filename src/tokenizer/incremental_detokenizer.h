// Streaming detokenization: turns ids into text as they are generated. Bytes of a character
// split across tokens are held back until the character is complete, so no U+FFFD is emitted
// for it (B20); finish() flushes what is held back (B23). The concatenation of all push()
// results and finish() equals Tokenizer::decode() of the same ids.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4 {

class IncrementalDetokenizer {
public:
    IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens)
        : tok_(tok), skip_special_(skip_special_tokens) {}

    // Returns the text newly completed by `id` (possibly empty).
    std::string push(int32_t id);
    // Flushes held-back bytes; an incomplete character becomes U+FFFD.
    std::string finish();

private:
    Tokenizer tok_;  // shares the immutable tokenizer state
    bool skip_special_;
    utf8::StreamDecoder decoder_;
};

}  // namespace dsv4
