// JsonMatcher (see json_matcher.h).
#include "constrain/json_matcher.h"

#include <algorithm>
#include <cstring>

namespace dsv4::constrain {
namespace {

using Kind = SchemaNode::Kind;
constexpr const char* kAnyLiterals[] = {"true", "false", "null"};

// Object phases: after '{', after a key (':' next), after a value (',' or '}'), after ',' (a key).
enum ObjPhase : uint8_t { kObjOpen, kObjAfterKey, kObjAfterValue, kObjComma };
// Array phases: after '[', after an item (',' or ']'), after ',' (an item).
enum ArrPhase : uint8_t { kArrOpen, kArrAfterItem, kArrComma };
// Number phases (JSON grammar): start, after '-', a leading 0, integer digits, after '.', fraction
// digits, after 'e', after the exponent's sign, exponent digits.
enum NumPhase : uint8_t { kNumMinus = 1, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExp, kNumExpSign, kNumExpDigits };
bool num_accepting(uint8_t p) { return p == kNumZero || p == kNumInt || p == kNumFrac || p == kNumExpDigits; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const CompiledSchema> schema) : schema_(std::move(schema)) {
    Frame f;
    f.t = Frame::T::kValue;
    f.node = schema_->root;
    threads_.push_back({f});
}

bool JsonMatcher::required_seen(const Frame& obj) const {
    if (obj.node == kAnyNode) return true;
    const SchemaNode& n = schema_->nodes[size_t(obj.node)];
    for (size_t i = 0; i < n.prop_required.size(); ++i)
        if (n.prop_required[i] && !(obj.seen >> i & 1)) return false;
    return true;
}

bool JsonMatcher::additional_allowed(const Frame& obj) const {
    return obj.node == kAnyNode || schema_->nodes[size_t(obj.node)].additional >= 0;
}

// -1: no declared property starts with `key` (or, complete, is `key`); else the first that does,
// preferring one not given yet.
int JsonMatcher::declared(const Frame& obj, const std::string& key, bool complete) const {
    if (obj.node == kAnyNode) return -1;
    const SchemaNode& n = schema_->nodes[size_t(obj.node)];
    int found = -1;
    for (size_t i = 0; i < n.prop_names.size(); ++i) {
        const std::string& name = n.prop_names[i];
        if (complete ? name == key : name.compare(0, key.size(), key) == 0) {
            if (!(obj.seen >> i & 1)) return int(i);
            found = int(i);
        }
    }
    return found;
}

bool JsonMatcher::key_possible(const Frame& obj, const std::string& key, bool complete) const {
    const int i = declared(obj, key, complete);
    if (i >= 0 && !(obj.seen >> i & 1)) return true;
    if (complete && i >= 0) return false;  // a declared property given twice
    return additional_allowed(obj);
}

void JsonMatcher::start_value(Thread th, int node, uint8_t ws, uint8_t c, std::vector<Thread>& out) const {
    const Kind k = node == kAnyNode ? Kind::kAny : schema_->nodes[size_t(node)].kind;
    Frame f;
    f.node = node;
    switch (k) {
        case Kind::kAnyOf:
            for (int o : schema_->nodes[size_t(node)].options) start_value(th, o, ws, c, out);
            return;
        case Kind::kLiterals: {
            const auto& lits = schema_->nodes[size_t(node)].literals;
            for (size_t i = 0; i < lits.size(); ++i) {
                if (lits[i].empty() || uint8_t(lits[i][0]) != c) continue;
                Thread t = th;
                if (lits[i].size() > 1) {
                    f.t = Frame::T::kLiteral;
                    f.sel = int32_t(i);
                    f.count = 1;
                    t.push_back(f);
                }
                out.push_back(std::move(t));
            }
            return;
        }
        case Kind::kString:
            if (c != '"') return;
            f.t = Frame::T::kString;
            break;
        case Kind::kNumber:
        case Kind::kInteger:
            if (c != '-' && !is_digit(c)) return;
            f.t = Frame::T::kNumber;
            f.integer = k == Kind::kInteger;
            f.phase = c == '-' ? kNumMinus : c == '0' ? kNumZero : kNumInt;
            f.count = 1;
            break;
        case Kind::kObject:
            if (c != '{') return;
            f.t = Frame::T::kObject;
            break;
        case Kind::kArray:
            if (c != '[') return;
            f.t = Frame::T::kArray;
            break;
        case Kind::kAny:
            if (c == '{') {
                f.t = Frame::T::kObject;
            } else if (c == '[') {
                f.t = Frame::T::kArray;
            } else if (c == '"') {
                f.t = Frame::T::kString;
            } else if (c == '-' || is_digit(c)) {
                f.t = Frame::T::kNumber;
                f.phase = c == '-' ? kNumMinus : c == '0' ? kNumZero : kNumInt;
                f.count = 1;
            } else {
                f.node = kAnyNode;
                f.t = Frame::T::kLiteral;
                f.count = 1;
                f.sel = c == 't' ? 0 : c == 'f' ? 1 : c == 'n' ? 2 : -1;
                if (f.sel < 0) return;
            }
            f.node = kAnyNode;
            break;
    }
    (void)ws;
    th.push_back(f);
    out.push_back(std::move(th));
}

// Whitespace where the top frame allows it (before a value, between structural characters): at
// most kMaxWhitespace bytes in a row. False when c is not whitespace.
bool JsonMatcher::take_whitespace(Thread& th, uint8_t c, std::vector<Thread>& out) {
    if (!is_ws(c)) return false;
    if (th.back().ws < kMaxWhitespace) {
        ++th.back().ws;
        out.push_back(std::move(th));
    }
    return true;
}

void JsonMatcher::step(Thread th, uint8_t c, std::vector<Thread>& out) const {
    if (th.empty()) return;  // the root value is complete: nothing may follow
    Frame& f = th.back();
    switch (f.t) {
        case Frame::T::kValue: {
            if (take_whitespace(th, c, out)) return;
            const int node = f.node;
            const uint8_t ws = f.ws;
            th.pop_back();
            start_value(std::move(th), node, ws, c, out);
            return;
        }
        case Frame::T::kLiteral: {
            const std::string& lit = f.node == kAnyNode ? std::string(kAnyLiterals[f.sel])
                                                        : schema_->nodes[size_t(f.node)].literals[size_t(f.sel)];
            if (size_t(f.count) >= lit.size() || uint8_t(lit[size_t(f.count)]) != c) return;
            if (size_t(++f.count) == lit.size()) th.pop_back();
            out.push_back(std::move(th));
            return;
        }
        case Frame::T::kString:
        case Frame::T::kKey: {
            const bool key = f.t == Frame::T::kKey;
            if (f.phase == 0) {
                if (c == '"') {
                    if (key) {
                        Frame& obj = th[th.size() - 2];
                        // A free key left every declared name behind: an additional property.
                        const int i = f.free_key ? -1 : declared(obj, f.key, true);
                        if (i >= 0 && (obj.seen >> i & 1)) return;  // given twice
                        if (i < 0 && !additional_allowed(obj)) return;
                        obj.sel = i;
                        if (i >= 0) obj.seen |= uint64_t(1) << i;
                    }
                    th.pop_back();
                } else if (c == '\\') {
                    f.phase = 1;
                } else if (c < 0x20) {
                    return;
                }
            } else if (f.phase == 1) {
                if (c == 'u') {
                    f.phase = 2;
                    f.count = 4;
                } else if (std::strchr("\"\\/bfnrt", int(c)) && c != 0) {
                    f.phase = 0;
                } else {
                    return;
                }
            } else {
                if (!is_hex(c)) return;
                if (--f.count == 0) f.phase = 0;
            }
            if (key && !th.empty() && th.back().t == Frame::T::kKey && !th.back().free_key) {
                // Matched against the declared names only while it can still be one of them; then
                // (where additional properties are allowed) the rest of the key is plain content.
                Frame& k = th.back();
                const Frame& obj = th[th.size() - 2];
                k.key.push_back(char(c));
                const int i = declared(obj, k.key, false);
                if (i < 0) {
                    if (!additional_allowed(obj)) return;
                    k.free_key = true;
                    k.key.clear();
                } else if ((obj.seen >> i & 1) && !additional_allowed(obj)) {
                    return;
                }
            }
            out.push_back(std::move(th));
            return;
        }
        case Frame::T::kNumber: {
            uint8_t next = 0;
            switch (f.phase) {
                case kNumMinus:
                    next = c == '0' ? kNumZero : is_digit(c) ? kNumInt : 0;
                    break;
                case kNumZero:
                    next = c == '.' ? kNumDot : (c == 'e' || c == 'E') ? kNumExp : 0;
                    break;
                case kNumInt:
                    next = is_digit(c) ? kNumInt : c == '.' ? kNumDot : (c == 'e' || c == 'E') ? kNumExp : 0;
                    break;
                case kNumDot:
                    next = is_digit(c) ? kNumFrac : 0;
                    break;
                case kNumFrac:
                    next = is_digit(c) ? kNumFrac : (c == 'e' || c == 'E') ? kNumExp : 0;
                    break;
                case kNumExp:
                    next = (c == '+' || c == '-') ? kNumExpSign : is_digit(c) ? kNumExpDigits : 0;
                    break;
                case kNumExpSign:
                case kNumExpDigits:
                    next = is_digit(c) ? kNumExpDigits : 0;
                    break;
            }
            if (f.integer && (next == kNumDot || next == kNumExp)) next = 0;
            // At most two exponent digits: every accepted number stays a finite double when parsed.
            if (next == kNumExpDigits) {
                if (f.phase == kNumExpDigits && f.sel >= 2)
                    next = 0;
                else
                    f.sel = f.phase == kNumExpDigits ? f.sel + 1 : 1;
            }
            if (next != 0 && f.count < kMaxNumberLength) {
                f.phase = next;
                ++f.count;
                out.push_back(std::move(th));
                return;
            }
            if (!num_accepting(f.phase)) return;
            th.pop_back();  // the number ended: c belongs to what follows it
            step(std::move(th), c, out);
            return;
        }
        case Frame::T::kObject: {
            if (take_whitespace(th, c, out)) return;
            f.ws = 0;
            if ((f.phase == kObjOpen || f.phase == kObjAfterValue) && c == '}') {
                if (!required_seen(f)) return;
                th.pop_back();
                out.push_back(std::move(th));
                return;
            }
            if ((f.phase == kObjOpen || f.phase == kObjComma) && c == '"') {
                if (!key_possible(f, std::string(), false)) return;
                f.phase = kObjAfterKey;
                Frame k;
                k.t = Frame::T::kKey;
                th.push_back(k);
                out.push_back(std::move(th));
                return;
            }
            if (f.phase == kObjAfterKey && c == ':') {
                f.phase = kObjAfterValue;
                Frame v;
                v.t = Frame::T::kValue;
                v.node = f.node == kAnyNode ? kAnyNode
                         : f.sel >= 0       ? schema_->nodes[size_t(f.node)].prop_nodes[size_t(f.sel)]
                                            : schema_->nodes[size_t(f.node)].additional;
                th.push_back(v);
                out.push_back(std::move(th));
                return;
            }
            if (f.phase == kObjAfterValue && c == ',') {
                if (!key_possible(f, std::string(), false)) return;  // nothing left to add
                f.phase = kObjComma;
                out.push_back(std::move(th));
            }
            return;
        }
        case Frame::T::kArray: {
            if (take_whitespace(th, c, out)) return;
            f.ws = 0;
            const int64_t min = f.node == kAnyNode ? 0 : schema_->nodes[size_t(f.node)].min_items;
            const int64_t max = f.node == kAnyNode ? -1 : schema_->nodes[size_t(f.node)].max_items;
            const int items = f.node == kAnyNode ? kAnyNode : schema_->nodes[size_t(f.node)].items;
            if ((f.phase == kArrOpen || f.phase == kArrAfterItem) && c == ']') {
                if (f.count < min) return;
                th.pop_back();
                out.push_back(std::move(th));
                return;
            }
            if (f.phase == kArrAfterItem) {
                if (c == ',' && (max < 0 || f.count < max)) {
                    f.phase = kArrComma;
                    out.push_back(std::move(th));
                }
                return;
            }
            if (max >= 0 && f.count >= max) return;
            f.phase = kArrAfterItem;
            ++f.count;
            start_value(std::move(th), items, 0, c, out);
            return;
        }
    }
}

std::string JsonMatcher::thread_key(const Thread& th) {
    std::string k;
    for (const Frame& f : th) {
        k += char(f.t);
        k += char(f.phase);
        k += char(f.ws);
        k += char(f.integer);
        k += char(f.free_key);
        k.append(reinterpret_cast<const char*>(&f.node), sizeof f.node);
        k.append(reinterpret_cast<const char*>(&f.count), sizeof f.count);
        k.append(reinterpret_cast<const char*>(&f.sel), sizeof f.sel);
        k.append(reinterpret_cast<const char*>(&f.seen), sizeof f.seen);
        k += f.key;
        k += '\x01';
    }
    return k;
}

bool JsonMatcher::feed(uint8_t c) {
    std::vector<Thread> next;
    for (const Thread& th : threads_) step(th, c, next);
    if (next.empty()) return false;
    if (next.size() > 1) {  // identical alternatives (overlapping anyOf options) collapse into one
        std::vector<std::pair<std::string, size_t>> keys;
        for (size_t i = 0; i < next.size(); ++i) keys.emplace_back(thread_key(next[i]), i);
        std::sort(keys.begin(), keys.end());
        std::vector<Thread> uniq;
        for (size_t i = 0; i < keys.size(); ++i)
            if (i == 0 || keys[i].first != keys[i - 1].first) uniq.push_back(std::move(next[keys[i].second]));
        next = std::move(uniq);
    }
    if (int(next.size()) > kMaxThreads) return false;
    threads_ = std::move(next);
    return true;
}

bool JsonMatcher::feed(std::string_view bytes) {
    const auto saved = threads_;
    for (char ch : bytes)
        if (!feed(uint8_t(ch))) {
            threads_ = saved;
            return false;
        }
    return true;
}

bool JsonMatcher::accepting() const {
    for (const Thread& th : threads_)
        if (th.empty() || (th.size() == 1 && th[0].t == Frame::T::kNumber && num_accepting(th[0].phase))) return true;
    return false;
}

bool JsonMatcher::finished() const {
    for (const Thread& th : threads_)
        if (!th.empty()) return false;
    return !threads_.empty();
}

bool JsonMatcher::absorbs(uint8_t c) const {
    if (threads_.size() != 1 || threads_[0].empty()) return false;
    const Frame& f = threads_[0].back();
    const bool plain = f.t == Frame::T::kString || (f.t == Frame::T::kKey && f.free_key);
    return plain && f.phase == 0 && c >= 0x20 && c != '"' && c != '\\';
}

std::string JsonMatcher::state_key() const {
    std::vector<std::string> keys;
    for (const Thread& th : threads_) keys.push_back(thread_key(th));
    std::sort(keys.begin(), keys.end());
    std::string out;
    for (auto& k : keys) out += k + '\x02';
    return out;
}

}  // namespace dsv4::constrain
