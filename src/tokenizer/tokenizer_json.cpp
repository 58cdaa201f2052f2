// tokenizer.json parsing and validation. nlohmann is used without exceptions: every access is
// checked, and errors name the JSON path that was wrong.
#include "tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>

namespace dsv4 {
namespace {

using nlohmann::json;

Status unsupported(const std::string& what) {
    return Status(StatusCode::kUnimplemented, "tokenizer.json: unsupported " + what);
}
Status malformed(const std::string& what) { return Status(StatusCode::kInvalidArgument, "tokenizer.json: " + what); }

// Field `key` of object `o`, or nullptr when absent.
const json* field(const json& o, const char* key) {
    auto it = o.find(key);
    return it == o.end() ? nullptr : &*it;
}

bool is_null_or_absent(const json& o, const char* key) {
    const json* f = field(o, key);
    return f == nullptr || f->is_null();
}

Result<bool> get_bool(const json& o, const char* key, bool fallback, const std::string& where) {
    const json* f = field(o, key);
    if (f == nullptr || f->is_null()) return fallback;
    if (!f->is_boolean()) return malformed(where + "." + key + " must be a boolean");
    return f->get<bool>();
}

Result<std::string> get_type(const json& o, const std::string& where) {
    if (!o.is_object()) return malformed(where + " must be an object");
    const json* t = field(o, "type");
    if (t == nullptr || !t->is_string()) return malformed(where + ".type must be a string");
    return t->get<std::string>();
}

Status check_normalizer(const json& n, const std::string& where) {
    if (n.is_null()) return Status::ok();
    DSV4_ASSIGN_OR_RETURN(std::string type, get_type(n, where));
    if (type != "Sequence") return unsupported(where + " of type " + type);
    const json* list = field(n, "normalizers");
    if (list == nullptr || !list->is_array()) return malformed(where + ".normalizers must be an array");
    for (size_t i = 0; i < list->size(); ++i) {
        DSV4_RETURN_IF_ERROR(check_normalizer((*list)[i], where + ".normalizers[" + std::to_string(i) + "]"));
    }
    return Status::ok();
}

Result<SplitBehavior> parse_behavior(const json& s, const std::string& where) {
    const json* b = field(s, "behavior");
    if (b == nullptr || !b->is_string()) return malformed(where + ".behavior must be a string");
    const std::string name = b->get<std::string>();
    if (name == "Isolated") return SplitBehavior::kIsolated;
    if (name == "Removed") return SplitBehavior::kRemoved;
    if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    return unsupported(where + ".behavior " + name);
}

// Appends the steps of pre-tokenizer `p`; `byte_level_seen` tracks the final ByteLevel step.
Status parse_pre_tokenizer(const json& p, const std::string& where, TokenizerSpec& spec, bool& byte_level_seen) {
    DSV4_ASSIGN_OR_RETURN(std::string type, get_type(p, where));
    if (type == "Sequence") {
        const json* list = field(p, "pretokenizers");
        if (list == nullptr || !list->is_array()) return malformed(where + ".pretokenizers must be an array");
        for (size_t i = 0; i < list->size(); ++i) {
            DSV4_RETURN_IF_ERROR(parse_pre_tokenizer((*list)[i], where + ".pretokenizers[" + std::to_string(i) + "]",
                                                     spec, byte_level_seen));
        }
        return Status::ok();
    }
    if (byte_level_seen) return unsupported(where + ": a " + type + " step after ByteLevel");
    if (type == "ByteLevel") {
        DSV4_ASSIGN_OR_RETURN(bool prefix, get_bool(p, "add_prefix_space", true, where));
        DSV4_ASSIGN_OR_RETURN(bool use_regex, get_bool(p, "use_regex", true, where));
        if (prefix) return unsupported(where + ": ByteLevel with add_prefix_space=true");
        if (use_regex) return unsupported(where + ": ByteLevel with use_regex=true");
        byte_level_seen = true;
        return Status::ok();
    }
    if (type == "Split") {
        DSV4_ASSIGN_OR_RETURN(bool invert, get_bool(p, "invert", false, where));
        if (invert) return unsupported(where + ": Split with invert=true");
        SplitSpec s;
        DSV4_ASSIGN_OR_RETURN(s.behavior, parse_behavior(p, where));
        const json* pat = field(p, "pattern");
        if (pat == nullptr || !pat->is_object()) return malformed(where + ".pattern must be an object");
        if (const json* re = field(*pat, "Regex"); re != nullptr && re->is_string()) {
            auto translated = translate_onig_pattern(re->get<std::string>());
            if (!translated.is_ok()) return translated.status().with_context("tokenizer.json: " + where);
            s.pcre2_pattern = std::move(translated).value();
        } else if (const json* str = field(*pat, "String"); str != nullptr && str->is_string()) {
            s.pcre2_pattern = str->get<std::string>();
            s.literal = true;
            if (s.pcre2_pattern.empty()) return malformed(where + ".pattern.String is empty");
        } else {
            return malformed(where + ".pattern must hold a string \"Regex\" or \"String\"");
        }
        spec.splits.push_back(std::move(s));
        return Status::ok();
    }
    return unsupported(where + " of type " + type);
}

Status parse_model(const json& m, BpeSpec& bpe) {
    DSV4_ASSIGN_OR_RETURN(std::string type, get_type(m, "model"));
    if (type != "BPE") return unsupported("model type " + type + " (only BPE)");
    if (!is_null_or_absent(m, "dropout")) return unsupported("model.dropout (must be null)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const json* f = field(m, key);
        if (f != nullptr && !f->is_null() && !(f->is_string() && f->get<std::string>().empty())) {
            return unsupported(std::string("model.") + key);
        }
    }
    DSV4_ASSIGN_OR_RETURN(bool byte_fallback, get_bool(m, "byte_fallback", false, "model"));
    if (byte_fallback) return unsupported("model.byte_fallback=true");
    DSV4_ASSIGN_OR_RETURN(bool fuse_unk, get_bool(m, "fuse_unk", false, "model"));
    DSV4_ASSIGN_OR_RETURN(bpe.ignore_merges, get_bool(m, "ignore_merges", false, "model"));
    if (const json* unk = field(m, "unk_token"); unk != nullptr && !unk->is_null()) {
        if (!unk->is_string()) return malformed("model.unk_token must be a string or null");
        if (fuse_unk) return unsupported("model.fuse_unk=true with an unk_token");
        bpe.unk_token = unk->get<std::string>();
    }
    const json* vocab = field(m, "vocab");
    if (vocab == nullptr || !vocab->is_object()) return malformed("model.vocab must be an object");
    bpe.vocab.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
        if (!it.value().is_number_integer()) return malformed("model.vocab[" + it.key() + "] must be an integer id");
        const auto id = it.value().get<int64_t>();
        if (id < 0 || id > INT32_MAX) return malformed("model.vocab[" + it.key() + "] is out of range");
        bpe.vocab.emplace_back(it.key(), static_cast<int32_t>(id));
    }
    const json* merges = field(m, "merges");
    if (merges == nullptr || !merges->is_array()) return malformed("model.merges must be an array");
    bpe.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
        const json& e = (*merges)[i];
        if (e.is_string()) {
            // Legacy form "left right": exactly one space separates the two tokens.
            const std::string s = e.get<std::string>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
                return malformed("model.merges[" + std::to_string(i) + "] must be \"left right\"");
            }
            bpe.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            bpe.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
        } else {
            return malformed("model.merges[" + std::to_string(i) + "] must be a string or a pair of strings");
        }
    }
    return Status::ok();
}

Status parse_added_tokens(const json& list, std::vector<AddedTokenSpec>& out) {
    if (list.is_null()) return Status::ok();
    if (!list.is_array()) return malformed("added_tokens must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
        const json& t = list[i];
        const std::string where = "added_tokens[" + std::to_string(i) + "]";
        if (!t.is_object()) return malformed(where + " must be an object");
        AddedTokenSpec a;
        const json* id = field(t, "id");
        if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > INT32_MAX) {
            return malformed(where + ".id must be a non-negative integer");
        }
        a.id = static_cast<int32_t>(id->get<int64_t>());
        const json* content = field(t, "content");
        if (content == nullptr || !content->is_string()) return malformed(where + ".content must be a string");
        a.content = content->get<std::string>();
        DSV4_ASSIGN_OR_RETURN(a.special, get_bool(t, "special", false, where));
        DSV4_ASSIGN_OR_RETURN(a.lstrip, get_bool(t, "lstrip", false, where));
        DSV4_ASSIGN_OR_RETURN(a.rstrip, get_bool(t, "rstrip", false, where));
        DSV4_ASSIGN_OR_RETURN(a.normalized, get_bool(t, "normalized", !a.special, where));
        DSV4_ASSIGN_OR_RETURN(a.single_word, get_bool(t, "single_word", false, where));
        out.push_back(std::move(a));
    }
    return Status::ok();
}

}  // namespace

Result<TokenizerSpec> parse_tokenizer_json(std::string_view text) {
    json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return malformed("not valid JSON (or not valid UTF-8)");
    if (!doc.is_object()) return malformed("top level must be an object");
    TokenizerSpec spec;
    if (!is_null_or_absent(doc, "truncation")) return unsupported("truncation (must be null)");
    if (!is_null_or_absent(doc, "padding")) return unsupported("padding (must be null)");
    if (const json* n = field(doc, "normalizer")) DSV4_RETURN_IF_ERROR(check_normalizer(*n, "normalizer"));
    const json* pre = field(doc, "pre_tokenizer");
    bool byte_level = false;
    if (pre != nullptr && !pre->is_null())
        DSV4_RETURN_IF_ERROR(parse_pre_tokenizer(*pre, "pre_tokenizer", spec, byte_level));
    if (!byte_level)
        return unsupported("pre_tokenizer without a final ByteLevel step (only byte-level BPE is supported)");
    const json* dec = field(doc, "decoder");
    if (dec == nullptr || dec->is_null()) return unsupported("missing decoder (ByteLevel is required)");
    DSV4_ASSIGN_OR_RETURN(std::string dec_type, get_type(*dec, "decoder"));
    if (dec_type != "ByteLevel") return unsupported("decoder of type " + dec_type + " (only ByteLevel)");
    // post_processor only acts when special tokens are added, which encode() never does.
    const json* model = field(doc, "model");
    if (model == nullptr) return malformed("missing model");
    DSV4_RETURN_IF_ERROR(parse_model(*model, spec.bpe));
    if (const json* added = field(doc, "added_tokens"))
        DSV4_RETURN_IF_ERROR(parse_added_tokens(*added, spec.added_tokens));
    return spec;
}

}  // namespace dsv4
