// Encode pipeline: added tokens -> Split pre-tokenizers (in order, each on the previous
// pieces) -> ByteLevel mapping (implicit) -> BPE per piece. Decode maps tokens back to bytes
// and then to text.
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace dsv4 {

struct Tokenizer::Impl {
    BpeModel bpe;
    AddedVocab added;
    std::vector<RegexSplit> splits;
    std::vector<std::string> id_bytes;  // decoded bytes of each id
    std::vector<uint8_t> id_special;    // 1 when the id is a special added token
};

Result<Tokenizer> Tokenizer::from_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status(StatusCode::kNotFound, fmt::format("cannot open tokenizer file {}", path));
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return Status(StatusCode::kDataLoss, fmt::format("error reading tokenizer file {}", path));
    auto tok = from_json_text(ss.str());
    if (!tok.is_ok()) return tok.status().with_context(path);
    return tok;
}

Result<Tokenizer> Tokenizer::from_json_text(std::string_view text) {
    DSV4_ASSIGN_OR_RETURN(TokenizerSpec spec, parse_tokenizer_json(text));
    auto impl = std::make_shared<Impl>();
    DSV4_ASSIGN_OR_RETURN(impl->bpe, BpeModel::create(spec.bpe));
    DSV4_ASSIGN_OR_RETURN(impl->added, AddedVocab::create(spec.added_tokens, impl->bpe));
    for (const SplitSpec& s : spec.splits) {
        auto re = RegexSplit::create(s.pcre2_pattern, s.literal, s.behavior);
        if (!re.is_ok()) return re.status().with_context("tokenizer.json pre_tokenizer");
        impl->splits.push_back(std::move(re).value());
    }
    // Decoded bytes per id, following the ByteLevel decoder: a token whose characters are all
    // in the byte alphabet maps to those bytes, any other token contributes its UTF-8 text.
    const int64_t limit = std::max<int64_t>(impl->bpe.id_limit(), int64_t{impl->added.max_id()} + 1);
    impl->id_bytes.resize(static_cast<size_t>(limit));
    impl->id_special.assign(static_cast<size_t>(limit), 0);
    ByteLevelAlphabet alphabet;
    for (int64_t id = 0; id < limit; ++id) {
        const auto i = static_cast<int32_t>(id);
        const AddedTokenSpec* a = impl->added.find(i);
        const std::string& token = a ? a->content : impl->bpe.id_to_token(i);
        auto bytes = alphabet.to_bytes(token);
        impl->id_bytes[static_cast<size_t>(id)] = bytes ? std::move(*bytes) : token;
        impl->id_special[static_cast<size_t>(id)] = a && a->special ? 1 : 0;
    }
    Tokenizer t;
    t.impl_ = std::move(impl);
    return t;
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view input) const {
    if (input.size() >= (size_t{1} << 32)) {
        return Status(StatusCode::kOutOfRange, fmt::format("text of {} bytes is too long to tokenize", input.size()));
    }
    std::string repaired;
    std::string_view text = input;
    if (!utf8::is_valid(input)) {
        repaired = utf8::sanitize(input);
        text = repaired;
    }
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 8);
    std::vector<TextSegment> segments;
    impl_->added.split(text, segments);
    RegexScratch scratch;
    std::vector<std::pair<uint32_t, uint32_t>> pieces, next;
    for (const TextSegment& seg : segments) {
        if (seg.id >= 0) {
            ids.push_back(seg.id);
            continue;
        }
        pieces.assign(1, {seg.begin, seg.end});
        for (const RegexSplit& re : impl_->splits) {
            next.clear();
            for (const auto& [b, e] : pieces) {
                DSV4_RETURN_IF_ERROR(re.split(text.substr(b, e - b), b, next, scratch));
            }
            pieces.swap(next);
        }
        for (const auto& [b, e] : pieces) impl_->bpe.encode_word(text.substr(b, e - b), ids);
    }
    return ids;
}

std::string_view Tokenizer::token_bytes(int32_t id, bool skip_special_tokens) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) return {};
    if (skip_special_tokens && impl_->id_special[static_cast<size_t>(id)]) return {};
    return impl_->id_bytes[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    std::string bytes;
    for (int32_t id : ids) bytes.append(token_bytes(id, skip_special_tokens));
    if (utf8::is_valid(bytes)) return bytes;
    return utf8::sanitize(bytes);
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->id_bytes.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    if (auto id = impl_->added.token_to_id(token)) return id;
    return impl_->bpe.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
    if (const AddedTokenSpec* a = impl_->added.find(id)) return a->content;
    return impl_->bpe.id_to_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->id_special.size() && impl_->id_special[static_cast<size_t>(id)];
}

}  // namespace dsv4
