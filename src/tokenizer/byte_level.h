// The GPT-2 "byte-level" alphabet: every byte 0..255 is shown as one printable code point, so
// BPE tokens are strings over 256 symbols. Used by the ByteLevel pre-tokenizer and decoder.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dsv4 {

class ByteLevelAlphabet {
public:
    ByteLevelAlphabet();

    // Code point that stands for byte `b`.
    uint32_t char_of(uint8_t b) const { return char_of_[b]; }
    // UTF-8 text of that code point (1 or 2 bytes).
    std::string_view utf8_of(uint8_t b) const { return utf8_of_[b]; }

    // Maps a token string back to bytes: each code point must be in the alphabet, otherwise
    // nullopt (the ByteLevel decoder then uses the token's own UTF-8 bytes).
    std::optional<std::string> to_bytes(std::string_view token) const;

private:
    std::array<uint32_t, 256> char_of_{};
    std::array<std::string, 256> utf8_of_{};
    std::array<int16_t, 324> byte_of_{};  // code point -> byte, -1 if none; max code point is 323
};

}  // namespace dsv4
