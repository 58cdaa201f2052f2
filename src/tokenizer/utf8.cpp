// Lossy UTF-8 decoding following Unicode's "maximal subpart" recommendation (Table 3-7).
#include "tokenizer/utf8.h"

namespace dsv4::utf8 {
namespace {

// Byte range allowed as the second byte after lead byte `b0`; {1, 0} means b0 is no lead.
struct SecondRange {
    uint8_t lo, hi;
    int len;  // total sequence length
};

SecondRange second_range(uint8_t b0) {
    if (b0 >= 0xC2 && b0 <= 0xDF) return {0x80, 0xBF, 2};
    if (b0 == 0xE0) return {0xA0, 0xBF, 3};
    if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) return {0x80, 0xBF, 3};
    if (b0 == 0xED) return {0x80, 0x9F, 3};
    if (b0 == 0xF0) return {0x90, 0xBF, 4};
    if (b0 >= 0xF1 && b0 <= 0xF3) return {0x80, 0xBF, 4};
    if (b0 == 0xF4) return {0x80, 0x8F, 4};
    return {1, 0, 0};
}

enum class Scan { kComplete, kIncomplete, kInvalid };

// Examines the sequence starting at s[0]. kComplete/kInvalid set `consumed` (for kInvalid: the
// length of the maximal subpart to replace with one U+FFFD).
Scan scan(std::string_view s, size_t& consumed) {
    const auto b0 = static_cast<uint8_t>(s[0]);
    if (b0 < 0x80) {
        consumed = 1;
        return Scan::kComplete;
    }
    const SecondRange r = second_range(b0);
    if (r.len == 0) {
        consumed = 1;
        return Scan::kInvalid;
    }
    for (int k = 1; k < r.len; ++k) {
        if (static_cast<size_t>(k) >= s.size()) return Scan::kIncomplete;
        const auto b = static_cast<uint8_t>(s[k]);
        const bool ok = (k == 1) ? (b >= r.lo && b <= r.hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            consumed = static_cast<size_t>(k);
            return Scan::kInvalid;
        }
    }
    consumed = static_cast<size_t>(r.len);
    return Scan::kComplete;
}

// Decodes as much of `s` as possible into `out`; returns the number of bytes left undecided
// (an incomplete trailing sequence).
size_t decode_prefix(std::string_view s, std::string& out) {
    size_t i = 0;
    while (i < s.size()) {
        // ASCII fast path.
        size_t j = i;
        while (j < s.size() && static_cast<uint8_t>(s[j]) < 0x80) ++j;
        out.append(s.data() + i, j - i);
        i = j;
        if (i == s.size()) break;
        size_t consumed = 0;
        switch (scan(s.substr(i), consumed)) {
            case Scan::kComplete:
                out.append(s.data() + i, consumed);
                i += consumed;
                break;
            case Scan::kInvalid:
                out.append(kReplacement);
                i += consumed;
                break;
            case Scan::kIncomplete:
                return s.size() - i;
        }
    }
    return 0;
}

}  // namespace

bool is_valid(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        size_t consumed = 0;
        if (scan(s.substr(i), consumed) != Scan::kComplete) return false;
        i += consumed;
    }
    return true;
}

void append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

uint32_t next(std::string_view s, size_t& i) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    if (b0 < 0x80) {
        ++i;
        return b0;
    }
    int len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
    uint32_t cp = b0 & (0x7F >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    i += static_cast<size_t>(len);
    return cp;
}

void StreamDecoder::push(std::string_view bytes, std::string& out) {
    if (pending_.empty()) {
        const size_t left = decode_prefix(bytes, out);
        pending_.assign(bytes.substr(bytes.size() - left));
        return;
    }
    // The held-back part is at most 3 bytes; joining keeps one decoding path for both cases.
    std::string joined = std::move(pending_);
    joined.append(bytes);
    const size_t left = decode_prefix(joined, out);
    pending_ = joined.substr(joined.size() - left);
}

void StreamDecoder::finish(std::string& out) {
    if (!pending_.empty()) out.append(kReplacement);
    pending_.clear();
}

std::string sanitize(std::string_view s) {
    if (is_valid(s)) return std::string(s);
    std::string out;
    out.reserve(s.size() + 8);
    StreamDecoder d;
    d.push(s, out);
    d.finish(out);
    return out;
}

}  // namespace dsv4::utf8
