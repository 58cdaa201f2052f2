// Reads a Hugging Face tokenizer.json into a TokenizerSpec, accepting exactly the subset a
// byte-level BPE tokenizer like DeepSeek's uses and rejecting everything else by name, so an
// unsupported file fails at load time instead of producing different ids.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/regex_split.h"

namespace dsv4 {

struct SplitSpec {
    std::string pcre2_pattern;  // already translated from Oniguruma syntax
    bool literal = false;       // {"String": ...} patterns
    SplitBehavior behavior = SplitBehavior::kIsolated;
};

struct TokenizerSpec {
    BpeSpec bpe;
    std::vector<AddedTokenSpec> added_tokens;
    std::vector<SplitSpec> splits;  // applied in order, then the ByteLevel mapping
};

Result<TokenizerSpec> parse_tokenizer_json(std::string_view text);

}  // namespace dsv4
