// A Split pre-tokenizer step: a PCRE2 pattern (UTF + UCP, JIT when available) that cuts a piece
// of text into smaller pieces. Patterns in tokenizer.json are written for Oniguruma (what the
// reference uses); translate_onig_pattern() maps the constructs whose meaning differs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4 {

// What happens to the matched part (names as in tokenizer.json "behavior").
enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext };

// Rewrites an Oniguruma (Ruby syntax) pattern into an equivalent PCRE2 pattern: `\s`/`\S` are
// spelled out (the engines disagree on U+180E) and `\p{L}`-style categories gain the code points
// of the reference's newer Unicode version (onig_unicode_delta.h); constructs whose meaning differs
// and that we do not translate (\w \b \h \R \X, POSIX brackets, ...) are rejected.
Result<std::string> translate_onig_pattern(std::string_view pattern);

// Per-call match state (PCRE2 match data), so that one const tokenizer serves many threads
// without allocating for every piece.
class RegexScratch {
public:
    RegexScratch();
    ~RegexScratch();
    RegexScratch(const RegexScratch&) = delete;
    RegexScratch& operator=(const RegexScratch&) = delete;
    void* match_data() const { return md_; }

private:
    void* md_;  // pcre2_match_data*, kept opaque so pcre2.h stays out of the header
};

class RegexSplit {
public:
    // `pcre2_pattern` is already in PCRE2 syntax; `literal` treats it as a plain string.
    static Result<RegexSplit> create(const std::string& pcre2_pattern, bool literal, SplitBehavior behavior);

    // Appends the pieces of `text` (a valid UTF-8 substring) as [begin, end) byte ranges,
    // offset by `base`, to `out`. Lookarounds never see beyond `text`.
    Status split(std::string_view text, size_t base, std::vector<std::pair<uint32_t, uint32_t>>& out,
                 RegexScratch& scratch) const;

private:
    struct Compiled;
    std::shared_ptr<const Compiled> re_;
    SplitBehavior behavior_ = SplitBehavior::kIsolated;
};

}  // namespace dsv4
