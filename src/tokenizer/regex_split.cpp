// PCRE2-backed Split pre-tokenizer. PCRE2 is linked statically (see CMakeLists.txt) so the
// binary runs on machines without libpcre2.
#include "tokenizer/regex_split.h"

#include "tokenizer/onig_unicode_delta.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace dsv4 {

struct RegexSplit::Compiled {
    pcre2_code* code = nullptr;
    bool jit = false;
    ~Compiled() { pcre2_code_free(code); }
};

Result<std::string> translate_onig_pattern(std::string_view p) {
    // Oniguruma's Unicode \s is TAB..CR, NEL (U+0085) and the Zs/Zl/Zp characters. PCRE2's UCP
    // \s also contains U+180E (kept from its old \h list), so the set is spelled out instead.
    constexpr std::string_view kSpaceItems =
        "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
        "\\x{202F}\\x{205F}\\x{3000}";
    std::string out;
    out.reserve(p.size() + 32);
    int class_depth = 0;
    bool class_negated = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\') {
            if (i + 1 >= p.size()) return invalid_argument("regex ends with a lone backslash: {}", p);
            const char e = p[i + 1];
            ++i;
            switch (e) {
                case 's':
                    if (class_depth > 0)
                        out.append(kSpaceItems);
                    else
                        out.append("[").append(kSpaceItems).append("]");
                    continue;
                case 'S':
                    if (class_depth > 0) {
                        return Status(StatusCode::kUnimplemented,
                                      fmt::format("unsupported regex construct \\S inside [...] in {}", p));
                    }
                    out.append("[^").append(kSpaceItems).append("]");
                    continue;
                case 'p':
                case 'P': {
                    // \p{X} for a one-letter general category gains the code points that
                    // Oniguruma's newer Unicode assigns to X (see onig_unicode_delta.h).
                    const size_t close = p.find('}', i);
                    if (i + 1 >= p.size() || p[i + 1] != '{' || close == std::string_view::npos) {
                        return invalid_argument("regex \\{} without {{...}} in {}", e, p);
                    }
                    const std::string_view name = p.substr(i + 2, close - i - 2);
                    const std::string_view extra = name.size() == 1 ? onig_unicode_delta(name[0]) : std::string_view();
                    const std::string_view prop = p.substr(i - 1, close - i + 2);  // "\p{X}"
                    i = close;
                    if (extra.empty()) {
                        out.append(prop);
                    } else if (e == 'p') {
                        if (class_depth > 0)
                            out.append("\\p{").append(name).append("}").append(extra);
                        else
                            out.append("[\\p{").append(name).append("}").append(extra).append("]");
                    } else if (class_depth == 0) {
                        out.append("[^\\p{").append(name).append("}").append(extra).append("]");
                    } else {
                        return Status(StatusCode::kUnimplemented,
                                      fmt::format("unsupported regex construct \\P{{{}}} inside [...] in {}", name, p));
                    }
                    continue;
                }
                case 'w':
                case 'W':
                case 'b':
                case 'B':
                case 'h':
                case 'H':
                case 'R':
                case 'X':
                case 'K':
                case 'G':
                case 'y':
                case 'Y':
                case 'O':
                    return Status(StatusCode::kUnimplemented,
                                  fmt::format("unsupported regex construct \\{} in {}", e, p));
                default:
                    out.push_back('\\');
                    out.push_back(e);
                    continue;
            }
        }
        if (c == '[') {
            if (class_depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {
                return Status(StatusCode::kUnimplemented, fmt::format("unsupported POSIX bracket in regex {}", p));
            }
            if (class_depth > 0) {
                return Status(StatusCode::kUnimplemented,
                              fmt::format("unsupported nested character class in regex {}", p));
            }
            class_depth = 1;
            out.push_back(c);
            class_negated = i + 1 < p.size() && p[i + 1] == '^';
            if (class_negated) out.push_back(p[++i]);
            // A ']' right after '[' or '[^' is a literal in both engines.
            if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
            continue;
        }
        if (c == ']' && class_depth > 0) class_depth = 0;
        if (c == '&' && class_depth > 0 && i + 1 < p.size() && p[i + 1] == '&') {
            return Status(StatusCode::kUnimplemented, fmt::format("unsupported class intersection && in regex {}", p));
        }
        out.push_back(c);
    }
    if (class_depth > 0) return invalid_argument("unterminated character class in regex {}", p);
    return out;
}

Result<RegexSplit> RegexSplit::create(const std::string& pattern, bool literal, SplitBehavior behavior) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
    if (literal) options |= PCRE2_LITERAL;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err,
                                     &err_offset, nullptr);
    if (code == nullptr) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return invalid_argument("regex {} does not compile at offset {}: {}", pattern, err_offset,
                                reinterpret_cast<const char*>(msg));
    }
    auto compiled = std::make_shared<Compiled>();
    compiled->code = code;
    compiled->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    RegexSplit r;
    r.re_ = std::move(compiled);
    r.behavior_ = behavior;
    return r;
}

RegexScratch::RegexScratch() : md_(pcre2_match_data_create(8, nullptr)) {}
RegexScratch::~RegexScratch() { pcre2_match_data_free(static_cast<pcre2_match_data*>(md_)); }

Status RegexSplit::split(std::string_view text, size_t base, std::vector<std::pair<uint32_t, uint32_t>>& out,
                         RegexScratch& scratch) const {
    // Only the whole-match offsets are read, so 8 pairs are enough for any capture count
    // (PCRE2 returns 0 but still fills pair 0 when the ovector is too small).
    auto* md = static_cast<pcre2_match_data*>(scratch.match_data());
    if (md == nullptr) return Status(StatusCode::kResourceExhausted, "pcre2 match data allocation failed");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;       // where the next search starts
    size_t last_end = 0;  // end of the text already assigned to pieces
    bool merge_next = false;
    size_t pending_begin = 0;  // for kMergedWithNext: start of the match waiting for its tail
    auto emit = [&](size_t b, size_t e) {
        if (e > b) out.emplace_back(static_cast<uint32_t>(base + b), static_cast<uint32_t>(base + e));
    };
    Status status;
    while (pos <= text.size()) {
        int rc = re_->jit ? pcre2_jit_match(re_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr)
                          : pcre2_match(re_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            rc = pcre2_match(re_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            status = Status(StatusCode::kInternal,
                            fmt::format("regex match failed: {}", reinterpret_cast<const char*>(msg)));
            break;
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t mb = ov[0];
        const size_t me = ov[1];
        if (me == mb) {
            // Empty matches split nothing; step over one code point.
            if (pos >= text.size()) break;
            ++pos;
            while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
            continue;
        }
        switch (behavior_) {
            case SplitBehavior::kIsolated:
                emit(last_end, mb);
                emit(mb, me);
                break;
            case SplitBehavior::kRemoved:
                emit(last_end, mb);
                break;
            case SplitBehavior::kMergedWithPrevious:
                emit(last_end, me);
                break;
            case SplitBehavior::kMergedWithNext:
                if (merge_next)
                    emit(pending_begin, mb);
                else
                    emit(last_end, mb);
                merge_next = true;
                pending_begin = mb;
                break;
        }
        last_end = me;
        pos = me;
    }
    if (!status.is_ok()) return status;
    if (merge_next)
        emit(pending_begin, text.size());
    else
        emit(last_end, text.size());
    return Status::ok();
}

}  // namespace dsv4
