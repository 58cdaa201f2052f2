// dsv4::Tokenizer: byte-level BPE driven by a Hugging Face tokenizer.json, producing the same
// ids as Hugging Face tokenizers (the reference) for the subset of features DeepSeek uses.
//
// Invalid UTF-8 input is not an error: each ill-formed maximal subpart is replaced by U+FFFD
// before encoding (what Node's Buffer.toString and Rust's from_utf8_lossy do), so encode()
// fails only on internal errors. decode() likewise replaces bytes that do not form valid UTF-8
// (e.g. a character cut in half by skipped or truncated ids) with U+FFFD. Unknown ids are
// skipped by decode(), as the reference does.
//
// A Tokenizer is cheap to copy (shared immutable state) and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4 {

class Tokenizer {
public:
    static Result<Tokenizer> from_file(const std::string& path);
    static Result<Tokenizer> from_json_text(std::string_view text);

    // Added tokens in the text are honoured; no BOS or other special token is added.
    Result<std::vector<int32_t>> encode(std::string_view text) const;
    std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

    // One past the largest id (vocab plus added tokens): 129280 for DeepSeek-V4.
    int64_t vocab_size() const;
    std::optional<int32_t> token_to_id(std::string_view token) const;
    // Raw token string as in tokenizer.json ("" if the id has none).
    std::string id_to_token(int32_t id) const;
    bool is_special(int32_t id) const;

    // The bytes that `id` contributes to decoded text (may be part of a UTF-8 character);
    // empty for unknown ids and, when skipping, for special tokens.
    std::string_view token_bytes(int32_t id, bool skip_special_tokens) const;

private:
    Tokenizer() = default;  // only the factories make one, so impl_ is never null
    struct Impl;
    std::shared_ptr<const Impl> impl_;
};

}  // namespace dsv4
