// GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves; the other 68 bytes map, in
// order, to U+0100 onwards so that no token contains whitespace or control characters.
#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace dsv4 {

ByteLevelAlphabet::ByteLevelAlphabet() {
    byte_of_.fill(-1);
    uint32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        const uint32_t cp = printable ? static_cast<uint32_t>(b) : next_extra++;
        char_of_[b] = cp;
        utf8::append(utf8_of_[b], cp);
        byte_of_[cp] = static_cast<int16_t>(b);
    }
}

std::optional<std::string> ByteLevelAlphabet::to_bytes(std::string_view token) const {
    std::string out;
    out.reserve(token.size());
    size_t i = 0;
    while (i < token.size()) {
        const uint32_t cp = utf8::next(token, i);
        if (cp >= byte_of_.size() || byte_of_[cp] < 0) return std::nullopt;
        out.push_back(static_cast<char>(byte_of_[cp]));
    }
    return out;
}

}  // namespace dsv4
