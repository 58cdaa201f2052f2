// DsmlMatcher (see dsml_matcher.h).
#include "constrain/dsml_matcher.h"

#include <cstring>

namespace dsv4::constrain {
namespace {

// What follows a literal.
enum Next : int {
    kToInvoke,
    kToName,
    kToParamOrEnd,
    kToParamName,
    kToInvokeOrClose,
    kToFlag,
    kToRaw,
    kToJson,
    kToDone,
    kToParamGiven
};

constexpr std::string_view kParamClose = "</｜DSML｜parameter>";

// KMP failure function of kParamClose: the raw value ends at the first complete closing tag.
const std::vector<int>& close_fail() {
    static const std::vector<int> f = [] {
        std::vector<int> t(kParamClose.size(), 0);
        for (size_t i = 1, k = 0; i < kParamClose.size(); ++i) {
            while (k > 0 && kParamClose[i] != kParamClose[k]) k = size_t(t[k - 1]);
            if (kParamClose[i] == kParamClose[k]) ++k;
            t[i] = int(k);
        }
        return t;
    }();
    return f;
}

std::shared_ptr<const CompiledSchema> any_value() {
    static const auto s = std::make_shared<const CompiledSchema>(*compile_json_schema(nlohmann::json(true)));
    return s;
}

}  // namespace

const std::vector<DsmlMatcher::Alt>& DsmlMatcher::alts(Set s) {
    static const std::vector<Alt> open = {{"<｜DSML｜tool_calls>", kToInvoke}};
    static const std::vector<Alt> invoke = {{"<｜DSML｜invoke name=\"", kToName}};
    static const std::vector<Alt> name_end = {{">", kToParamOrEnd}};
    static const std::vector<Alt> param_or_end = {{"<｜DSML｜parameter name=\"", kToParamName},
                                                  {"</｜DSML｜invoke>", kToInvokeOrClose}};
    static const std::vector<Alt> param_name_end = {{" string=\"", kToFlag}};
    static const std::vector<Alt> flag = {{"true\">", kToRaw}, {"false\">", kToJson}};
    static const std::vector<Alt> param_close = {{"</｜DSML｜parameter>", kToParamGiven}};
    static const std::vector<Alt> invoke_or_close = {{"<｜DSML｜invoke name=\"", kToName},
                                                     {"</｜DSML｜tool_calls>", kToDone}};
    switch (s) {
        case Set::kOpen:
            return open;
        case Set::kInvoke:
            return invoke;
        case Set::kNameEnd:
            return name_end;
        case Set::kParamOrEnd:
            return param_or_end;
        case Set::kParamNameEnd:
            return param_name_end;
        case Set::kFlag:
            return flag;
        case Set::kParamClose:
            return param_close;
        case Set::kInvokeOrClose:
            return invoke_or_close;
    }
    return open;
}

DsmlMatcher::DsmlMatcher(std::shared_ptr<const ToolGrammar> grammar, bool opened) : grammar_(std::move(grammar)) {
    enter(Set::kOpen, 1, !opened);
    if (opened) pos_ = int32_t(std::strlen("<｜DSML｜"));
}

void DsmlMatcher::enter(Set s, uint32_t allow, bool ws) {
    mode_ = Mode::kLits;
    set_ = s;
    allow_ = allow;
    pos_ = 0;
    ws_ = 0;
    ws_ok_ = ws;
}

bool DsmlMatcher::required_given() const {
    const ToolSpec& t = tool();
    for (size_t i = 0; i < t.params.size(); ++i)
        if (t.required[i] && !(given_ >> i & 1)) return false;
    return true;
}

void DsmlMatcher::after_literal(int next) {
    switch (next) {
        case kToInvoke:
            enter(Set::kInvoke, 1, true);
            break;
        case kToName:
            mode_ = Mode::kName;
            name_.clear();
            break;
        case kToParamGiven:
            if (param_ >= 0) given_ |= uint64_t(1) << param_;
            [[fallthrough]];
        case kToParamOrEnd: {
            const ToolSpec& t = tool();
            bool more = t.open;
            for (size_t i = 0; i < t.params.size(); ++i) more = more || !(given_ >> i & 1);
            enter(Set::kParamOrEnd, (more ? 1u : 0u) | (required_given() ? 2u : 0u), true);
            break;
        }
        case kToParamName:
            mode_ = Mode::kParamName;
            name_.clear();
            break;
        case kToInvokeOrClose:
            ++calls_;
            enter(Set::kInvokeOrClose, (grammar_->max_calls < 0 || calls_ < grammar_->max_calls ? 1u : 0u) | 2u, true);
            break;
        case kToFlag: {
            const uint32_t allow = param_ >= 0 ? tool().flags[size_t(param_)] : 3u;
            enter(Set::kFlag, allow, false);
            break;
        }
        case kToRaw:
            mode_ = Mode::kRaw;
            kmp_ = 0;
            break;
        case kToJson:
            mode_ = Mode::kJson;
            json_.emplace(param_ >= 0 ? tool().schemas[size_t(param_)] : any_value());
            break;
        case kToDone:
            mode_ = Mode::kDone;
            break;
    }
}

bool DsmlMatcher::step(uint8_t c) {
    switch (mode_) {
        case Mode::kDone:
            return false;
        case Mode::kLits: {
            // Before the opener only newlines (the encoder's "\n\n"), else newlines or spaces.
            if (pos_ == 0 && ws_ok_ && (c == '\n' || (c == ' ' && set_ != Set::kOpen))) {
                if (ws_ >= 2) return false;
                ++ws_;
                return true;
            }
            const auto& a = alts(set_);
            uint32_t keep = 0;
            for (size_t i = 0; i < a.size(); ++i)
                if ((allow_ >> i & 1) && std::strlen(a[i].text) > size_t(pos_) && uint8_t(a[i].text[pos_]) == c)
                    keep |= 1u << i;
            if (!keep) return false;
            allow_ = keep;
            ++pos_;
            for (size_t i = 0; i < a.size(); ++i)
                if ((keep >> i & 1) && a[i].text[pos_] == '\0') after_literal(a[i].next);
            return true;
        }
        case Mode::kName: {
            if (c == '"') {
                for (size_t i = 0; i < grammar_->tools.size(); ++i)
                    if (grammar_->tools[i].name == name_) {
                        tool_ = int32_t(i);
                        given_ = 0;
                        enter(Set::kNameEnd, 1, false);
                        return true;
                    }
                return false;
            }
            name_.push_back(char(c));
            for (const ToolSpec& t : grammar_->tools)
                if (t.name.compare(0, name_.size(), name_) == 0) return true;
            return false;
        }
        case Mode::kParamName: {
            const ToolSpec& t = tool();
            if (c == '"') {
                param_ = -1;
                for (size_t i = 0; i < t.params.size(); ++i)
                    if (t.params[i] == name_) {
                        if (given_ >> i & 1) return false;  // given twice
                        param_ = int32_t(i);
                    }
                if (param_ < 0 && (!t.open || name_.empty())) return false;
                enter(Set::kParamNameEnd, 1, false);
                return true;
            }
            if (c < 0x20 || c == '\\') return false;
            name_.push_back(char(c));
            if (t.open) return true;
            for (size_t i = 0; i < t.params.size(); ++i)
                if (!(given_ >> i & 1) && t.params[i].compare(0, name_.size(), name_) == 0) return true;
            return false;
        }
        case Mode::kRaw: {
            const auto& fail = close_fail();
            int k = kmp_;
            while (k > 0 && uint8_t(kParamClose[size_t(k)]) != c) k = fail[size_t(k - 1)];
            if (uint8_t(kParamClose[size_t(k)]) == c) ++k;
            kmp_ = k;
            if (size_t(kmp_) == kParamClose.size()) after_literal(kToParamGiven);
            return true;
        }
        case Mode::kJson: {
            if (json_->feed(c)) return true;
            if (!json_->accepting() || c != '<') return false;
            json_.reset();
            enter(Set::kParamClose, 1, false);
            pos_ = 1;
            return true;
        }
    }
    return false;
}

bool DsmlMatcher::feed(uint8_t c) {
    DsmlMatcher saved = *this;
    if (step(c)) return true;
    *this = std::move(saved);
    return false;
}

bool DsmlMatcher::feed(std::string_view bytes) {
    DsmlMatcher saved = *this;
    for (char ch : bytes)
        if (!step(uint8_t(ch))) {
            *this = std::move(saved);
            return false;
        }
    return true;
}

bool DsmlMatcher::absorbs(uint8_t c) const {
    if (mode_ == Mode::kRaw) return kmp_ == 0 && c != uint8_t(kParamClose[0]);
    if (mode_ == Mode::kJson) return json_->absorbs(c);
    return false;
}

std::string DsmlMatcher::state_key() const {
    std::string k;
    k += char(mode_);
    k += char(set_);
    k += char(ws_);
    k += char(ws_ok_);
    for (int32_t v : {int32_t(allow_), pos_, tool_, param_, calls_, kmp_})
        k.append(reinterpret_cast<const char*>(&v), sizeof v);
    k.append(reinterpret_cast<const char*>(&given_), sizeof given_);
    k += name_;
    k += '\x01';
    if (json_) k += json_->state_key();
    return k;
}

}  // namespace dsv4::constrain
