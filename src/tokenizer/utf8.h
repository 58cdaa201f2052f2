// UTF-8 helpers for the tokenizer: lossy decoding with the "maximal subpart" policy (the one
// used by Rust's String::from_utf8_lossy, WHATWG TextDecoder and Node's Buffer.toString), in a
// streaming form so that the incremental detokenizer and the batch paths agree byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// True when `s` is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool is_valid(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (must be a scalar value) to `out`.
void append(std::string& out, uint32_t cp);

// Decodes the code point starting at s[i] of a *valid* string and advances i.
uint32_t next(std::string_view s, size_t& i);

// Streaming lossy decoder. Each ill-formed maximal subpart becomes one U+FFFD; a sequence that
// is still incomplete at the end of the input so far is held back until more bytes arrive or
// finish() is called (then it becomes one U+FFFD).
class StreamDecoder {
public:
    // Appends the newly decodable text to `out`.
    void push(std::string_view bytes, std::string& out);
    void finish(std::string& out);
    bool has_pending() const { return !pending_.empty(); }

private:
    std::string pending_;  // an incomplete but so far well-formed sequence, at most 3 bytes
};

// Whole-string lossy conversion: returns `s` unchanged when it is valid.
std::string sanitize(std::string_view s);

}  // namespace dsv4::utf8
