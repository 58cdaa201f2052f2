// Added-token matching with the reference's semantics (leftmost-longest, two passes, lstrip and
// rstrip eat neighbouring Unicode whitespace).
#include "tokenizer/added_vocab.h"

#include <algorithm>

#include "tokenizer/bpe_model.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

// Unicode White_Space, which is what Rust's char::is_whitespace tests.
bool is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// Start of the code point that ends right before byte `pos`.
size_t prev_char_start(std::string_view s, size_t pos) {
    size_t i = pos - 1;
    while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
    return i;
}

}  // namespace

void AddedVocab::Trie::insert(std::string_view key, int32_t token) {
    int32_t node = 0;
    for (char ch : key) {
        const auto b = static_cast<uint8_t>(ch);
        auto& kids = nodes[static_cast<size_t>(node)].children;
        auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1}));
        if (it != kids.end() && it->first == b) {
            node = it->second;
            continue;
        }
        const auto child = static_cast<int32_t>(nodes.size());
        kids.insert(it, {b, child});
        nodes.emplace_back();
        node = child;
    }
    nodes[static_cast<size_t>(node)].token = token;
}

int32_t AddedVocab::Trie::longest_at(std::string_view text, size_t pos, size_t& len) const {
    int32_t node = 0;
    int32_t best = -1;
    for (size_t i = pos; i < text.size(); ++i) {
        const auto b = static_cast<uint8_t>(text[i]);
        const auto& kids = nodes[static_cast<size_t>(node)].children;
        auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1}));
        if (it == kids.end() || it->first != b) break;
        node = it->second;
        if (nodes[static_cast<size_t>(node)].token >= 0) {
            best = nodes[static_cast<size_t>(node)].token;
            len = i + 1 - pos;
        }
    }
    return best;
}

Result<AddedVocab> AddedVocab::create(const std::vector<AddedTokenSpec>& tokens, const BpeModel& model) {
    AddedVocab v;
    const auto vocab_size = static_cast<int64_t>(model.size());
    int64_t max_added = -1;
    for (const AddedTokenSpec& t : tokens) {
        if (t.content.empty())
            return invalid_argument("tokenizer.json: added token with id {} has empty content", t.id);
        if (t.single_word) {
            return Status(
                StatusCode::kUnimplemented,
                fmt::format("tokenizer.json: added token {:?} uses single_word, which is not supported", t.content));
        }
        if (v.by_content_.count(t.content)) {
            return invalid_argument("tokenizer.json: added token {:?} appears twice", t.content);
        }
        int64_t expected;
        if (auto id = model.token_to_id(t.content)) {
            expected = *id;
        } else if (max_added < 0) {
            expected = vocab_size;
        } else {
            expected = (max_added >= vocab_size || vocab_size == 0) ? max_added + 1 : vocab_size;
        }
        if (t.id != expected) {
            return invalid_argument(
                "tokenizer.json: added token {:?} has id {} but the reference would assign id {} (ids must equal "
                "the vocab id, or follow the vocab and earlier added tokens in order)",
                t.content, t.id, expected);
        }
        max_added = std::max(max_added, expected);
        const auto index = static_cast<int32_t>(v.tokens_.size());
        v.tokens_.push_back(t);
        v.by_content_.emplace(t.content, index);
        v.by_id_.emplace(t.id, index);
        (t.normalized ? v.normalized_trie_ : v.raw_trie_).insert(t.content, index);
        v.max_id_ = std::max(v.max_id_, t.id);
    }
    return v;
}

std::optional<int32_t> AddedVocab::token_to_id(std::string_view content) const {
    auto it = by_content_.find(std::string(content));
    if (it == by_content_.end()) return std::nullopt;
    return tokens_[static_cast<size_t>(it->second)].id;
}

const AddedTokenSpec* AddedVocab::find(int32_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &tokens_[static_cast<size_t>(it->second)];
}

void AddedVocab::find_matches(const Trie& trie, std::string_view text, uint32_t begin, uint32_t end,
                              std::vector<TextSegment>& out) const {
    const std::string_view piece = text.substr(0, end);
    size_t plain_start = begin;
    size_t pos = begin;
    while (pos < end) {
        size_t len = 0;
        const int32_t index = trie.empty() ? -1 : trie.longest_at(piece, pos, len);
        if (index < 0) {
            ++pos;
            continue;
        }
        const AddedTokenSpec& t = tokens_[static_cast<size_t>(index)];
        size_t start = pos;
        size_t stop = pos + len;
        if (t.lstrip) {
            size_t s = start;
            while (s > plain_start) {
                const size_t p = prev_char_start(piece, s);
                size_t q = p;
                if (!is_white_space(utf8::next(piece, q))) break;
                s = p;
            }
            start = s;
        }
        if (t.rstrip) {
            while (stop < end) {
                size_t q = stop;
                if (!is_white_space(utf8::next(piece, q))) break;
                stop = q;
            }
        }
        if (start > plain_start) out.push_back({static_cast<uint32_t>(plain_start), static_cast<uint32_t>(start), -1});
        out.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(stop), t.id});
        plain_start = stop;
        pos = stop;
    }
    if (end > plain_start) out.push_back({static_cast<uint32_t>(plain_start), end, -1});
}

void AddedVocab::split(std::string_view text, std::vector<TextSegment>& out) const {
    const size_t first = out.size();
    find_matches(raw_trie_, text, 0, static_cast<uint32_t>(text.size()), out);
    if (normalized_trie_.empty()) return;
    std::vector<TextSegment> pass1(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    out.resize(first);
    for (const TextSegment& s : pass1) {
        if (s.id >= 0)
            out.push_back(s);
        else
            find_matches(normalized_trie_, text, s.begin, s.end, out);
    }
}

}  // namespace dsv4
