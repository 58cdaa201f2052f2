// Incremental DeepSeek-V4 output parser (see output_parser.h).
//
// One state machine serves both entry points: parse_output() is push(all) + finish(). Every
// decision looks only at the unconsumed buffer and is deferred while the buffer could still be
// the start of a marker, so where the chunk boundaries fall never changes what is decided.
#include "tokenizer/output_parser.h"

#include <nlohmann/json.hpp>

#include "tokenizer/chat_markers.h"
#include "tokenizer/py_json.h"

namespace dsv4 {

using namespace chat;

namespace {

enum class Mode {
    kThinkStart,  // thinking mode, before the first character: a stray "<think>" is dropped
    kReasoning,
    kContent,
    kBlock,      // inside <｜DSML｜tool_calls>, between invokes
    kInvokeTag,  // after "<｜DSML｜invoke", reading ` name="...">`
    kInvoke,     // inside an invoke, between parameters
    kParamTag,   // after "<｜DSML｜parameter", reading ` name="..." string="...">`
    kParamValue,
};

enum class Match { kYes, kNeedMore, kNo };

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

bool proper_prefix_of(std::string_view s, std::string_view marker) {
    return s.size() < marker.size() && marker.substr(0, s.size()) == s;
}

// Length of the longest suffix of `buf` that is a proper prefix of `marker`: text that might
// become the marker once more arrives and so cannot be released yet.
size_t held_back(std::string_view buf, std::string_view marker) {
    size_t max = std::min(buf.size(), marker.size() - 1);
    for (size_t n = max; n > 0; --n)
        if (buf.substr(buf.size() - n) == marker.substr(0, n)) return n;
    return 0;
}

bool utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Shrinks a release length so a UTF-8 character is never split between two deltas, neither
// where held-back text starts nor where the text received so far ends.
size_t utf8_safe(std::string_view buf, size_t n) {
    while (n > 0 && n < buf.size() && utf8_continuation(buf[n])) --n;
    if (n == buf.size() && n > 0) {
        size_t lead = n;
        while (lead > 0 && n - lead < 3 && utf8_continuation(buf[lead - 1])) --lead;
        if (lead > 0) {
            const auto b = static_cast<unsigned char>(buf[lead - 1]);
            const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
            if (need > n - lead + 1) n = lead - 1;
        }
    }
    return n;
}

// A small cursor over tag attribute text that tells "not yet" from "never".
struct Cursor {
    std::string_view s;
    size_t i = 0;

    void skip_ws() {
        while (i < s.size() && is_ws(s[i])) ++i;
    }
    Match literal(std::string_view lit) {
        std::string_view rest = s.substr(i);
        size_t n = std::min(rest.size(), lit.size());
        if (rest.substr(0, n) != lit.substr(0, n)) return Match::kNo;
        if (n < lit.size()) return Match::kNeedMore;
        i += lit.size();
        return Match::kYes;
    }
    // Reads up to the closing quote; attribute values longer than `max` are malformed.
    Match quoted_rest(std::string& out, size_t max) {
        size_t q = s.find('"', i);
        if (q == std::string_view::npos) {
            // Attribute values never hold tag characters or newlines; seeing one settles it.
            bool bad = s.substr(i).find_first_of("<>\n") != std::string_view::npos;
            return bad || s.size() - i > max ? Match::kNo : Match::kNeedMore;
        }
        if (q - i > max) return Match::kNo;
        out.assign(s.substr(i, q - i));
        i = q + 1;
        return out.find_first_of("<>\n") == std::string::npos ? Match::kYes : Match::kNo;
    }
};

constexpr size_t kMaxAttr = 256;
// "</｜DSML｜": once this much of the parameter close tag is seen, the text is the tag.
constexpr std::string_view kParamCloseHead = "</｜DSML｜";

#define DSV4_TRY_MATCH(expr)              \
    do {                                  \
        Match m_ = (expr);                \
        if (m_ != Match::kYes) return m_; \
    } while (0)

// ` name="NAME">` after "<｜DSML｜invoke".
Match match_invoke_attrs(std::string_view s, size_t& len, std::string& name) {
    Cursor c{s};
    c.skip_ws();
    DSV4_TRY_MATCH(c.literal("name=\""));
    DSV4_TRY_MATCH(c.quoted_rest(name, kMaxAttr));
    if (name.empty()) return Match::kNo;
    c.skip_ws();
    DSV4_TRY_MATCH(c.literal(">"));
    len = c.i;
    return Match::kYes;
}

// ` name="KEY" string="true|false">` after "<｜DSML｜parameter".
Match match_param_attrs(std::string_view s, size_t& len, std::string& key, bool& is_string) {
    Cursor c{s};
    c.skip_ws();
    DSV4_TRY_MATCH(c.literal("name=\""));
    DSV4_TRY_MATCH(c.quoted_rest(key, kMaxAttr));
    if (key.empty()) return Match::kNo;
    c.skip_ws();
    DSV4_TRY_MATCH(c.literal("string=\""));
    std::string flag;
    DSV4_TRY_MATCH(c.quoted_rest(flag, 5));
    if (flag != "true" && flag != "false") return Match::kNo;
    is_string = flag == "true";
    c.skip_ws();
    DSV4_TRY_MATCH(c.literal(">"));
    len = c.i;
    return Match::kYes;
}

#undef DSV4_TRY_MATCH

// True if `text` is one JSON value. nlohmann's lexer takes a NUL byte for the end of the input,
// so alone it accepts "-7\0" followed by anything; JSON never holds a raw NUL (RFC 8259 wants
// control characters escaped even in strings), so such text is rejected before it is asked.
bool is_json(std::string_view text) {
    return !text.empty() && text.find('\0') == std::string_view::npos && nlohmann::json::accept(text);
}

// A string="false" value becomes JSON as written when it is JSON, else a JSON string.
std::string json_value_text(const std::string& raw) {
    size_t b = raw.find_first_not_of(" \t\r\n");
    size_t e = raw.find_last_not_of(" \t\r\n");
    std::string trimmed = b == std::string::npos ? std::string() : raw.substr(b, e - b + 1);
    if (is_json(trimmed)) return trimmed;
    std::string out;
    py_json_append_string(out, raw);
    return out;
}

}  // namespace

struct StreamingOutputParser::State {
    Mode mode = Mode::kContent;
    std::string buf;          // text received but not yet settled
    std::string raw_pending;  // block text consumed since the last commitment, given back to
                              // content if the block turns out malformed
    OutputDelta out;          // what the current push() settles
    int next_index = 0;       // index of the next tool call
    bool in_call = false;     // an invoke was announced and its argument object is open
    bool calls_in_block = false;
    int params = 0;           // parameters seen in the open call
    bool value_open = false;  // inside a parameter value
    bool value_is_string = false;
    std::string value_raw;  // string="false" value text, kept until it closes

    void consume(size_t n) { buf.erase(0, n); }

    void emit_args(std::string_view s) {
        if (s.empty()) return;
        auto& ev = out.tool_events;
        // The event that names a call carries no argument text, so start a new one after it.
        if (!ev.empty() && ev.back().index == next_index && ev.back().name.empty()) {
            ev.back().arguments_delta += s;
        } else {
            ev.push_back({next_index, std::string(), std::string(s)});
        }
    }
    void emit_escaped_args(std::string_view s) {
        std::string esc;
        py_json_append_escaped(esc, s);
        emit_args(esc);
    }

    void close_value() {
        if (!value_open) return;
        if (value_is_string) {
            emit_args("\"");
        } else {
            emit_args(json_value_text(value_raw));
            value_raw.clear();
        }
        value_open = false;
    }
    void close_call() {
        if (!in_call) return;
        close_value();
        emit_args(params == 0 ? "{}" : "}");
        in_call = false;
        ++next_index;
    }

    // Malformed DSML: the uncommitted raw text goes back to content and parsing resumes there
    // on whatever is still buffered.
    void degrade() {
        close_call();
        out.content += raw_pending;
        raw_pending.clear();
        mode = Mode::kContent;
    }
    // Stream ended inside a block. Whitespace between finished calls is structure and is
    // dropped; anything else is given back as content.
    void degrade_at_end() {
        close_call();
        std::string rest = raw_pending + buf;
        raw_pending.clear();
        buf.clear();
        if (!calls_in_block || rest.find_first_not_of(" \t\r\n") != std::string::npos) out.content += rest;
        mode = Mode::kContent;
    }

    // Moves leading whitespace of the buffer into raw_pending; true if something else follows.
    bool skip_block_ws() {
        size_t i = 0;
        while (i < buf.size() && is_ws(buf[i])) ++i;
        raw_pending.append(buf, 0, i);
        consume(i);
        return !buf.empty();
    }

    // One decision; returns true while progress is possible without more text.
    bool step(bool at_end) {
        switch (mode) {
            case Mode::kThinkStart: {
                if (buf.starts_with(kThinkOpen)) {
                    consume(kThinkOpen.size());
                } else if (!at_end && proper_prefix_of(buf, kThinkOpen)) {
                    return false;
                }
                mode = Mode::kReasoning;
                return true;
            }
            case Mode::kReasoning: {
                size_t p = buf.find(kThinkClose);
                if (p != std::string::npos) {
                    out.reasoning.append(buf, 0, p);
                    consume(p + kThinkClose.size());
                    mode = Mode::kContent;
                    return true;
                }
                size_t n = at_end ? buf.size() : utf8_safe(buf, buf.size() - held_back(buf, kThinkClose));
                out.reasoning.append(buf, 0, n);
                consume(n);
                return false;
            }
            case Mode::kContent: {
                size_t p = buf.find(kToolCallsOpen);
                if (p != std::string::npos) {
                    // The encoder puts a blank line before the block; it is not content.
                    size_t q = p >= 2 && buf.compare(p - 2, 2, "\n\n") == 0 ? p - 2 : p;
                    out.content.append(buf, 0, q);
                    raw_pending.assign(buf, q, p + kToolCallsOpen.size() - q);
                    consume(p + kToolCallsOpen.size());
                    calls_in_block = false;
                    mode = Mode::kBlock;
                    return true;
                }
                static const std::string kBlankThenOpen = "\n\n" + std::string(kToolCallsOpen);
                size_t hold = std::max(held_back(buf, kBlankThenOpen), held_back(buf, kToolCallsOpen));
                size_t n = at_end ? buf.size() : utf8_safe(buf, buf.size() - hold);
                out.content.append(buf, 0, n);
                consume(n);
                return false;
            }
            case Mode::kBlock: {
                if (!skip_block_ws()) {
                    if (at_end) degrade_at_end();
                    return false;
                }
                if (buf.starts_with(kInvokeHead)) {
                    raw_pending += kInvokeHead;
                    consume(kInvokeHead.size());
                    mode = Mode::kInvokeTag;
                    return true;
                }
                if (buf.starts_with(kToolCallsClose)) {
                    consume(kToolCallsClose.size());
                    raw_pending.clear();
                    mode = Mode::kContent;
                    return true;
                }
                if (!at_end && (proper_prefix_of(buf, kInvokeHead) || proper_prefix_of(buf, kToolCallsClose)))
                    return false;
                if (at_end) {
                    degrade_at_end();
                    return false;
                }
                degrade();
                return true;
            }
            case Mode::kInvokeTag: {
                size_t len = 0;
                std::string name;
                Match m = match_invoke_attrs(buf, len, name);
                if (m == Match::kYes) {
                    consume(len);
                    raw_pending.clear();  // committed: the call is announced
                    out.tool_events.push_back({next_index, name, std::string()});
                    in_call = true;
                    calls_in_block = true;
                    params = 0;
                    mode = Mode::kInvoke;
                    return true;
                }
                if (m == Match::kNeedMore && !at_end) return false;
                if (at_end) {
                    degrade_at_end();
                    return false;
                }
                degrade();
                return true;
            }
            case Mode::kInvoke: {
                if (!skip_block_ws()) {
                    if (at_end) degrade_at_end();
                    return false;
                }
                if (buf.starts_with(kParamHead)) {
                    raw_pending += kParamHead;
                    consume(kParamHead.size());
                    mode = Mode::kParamTag;
                    return true;
                }
                if (buf.starts_with(kInvokeClose)) {
                    consume(kInvokeClose.size());
                    close_call();
                    raw_pending.clear();
                    mode = Mode::kBlock;
                    return true;
                }
                if (!at_end && (proper_prefix_of(buf, kParamHead) || proper_prefix_of(buf, kInvokeClose))) return false;
                if (at_end) {
                    degrade_at_end();
                    return false;
                }
                degrade();
                return true;
            }
            case Mode::kParamTag: {
                size_t len = 0;
                std::string key;
                bool is_string = false;
                Match m = match_param_attrs(buf, len, key, is_string);
                if (m == Match::kYes) {
                    consume(len);
                    raw_pending.clear();
                    std::string head = params == 0 ? "{" : ", ";
                    py_json_append_string(head, key);
                    head += ": ";
                    if (is_string) head += '"';
                    emit_args(head);
                    ++params;
                    value_open = true;
                    value_is_string = is_string;
                    value_raw.clear();
                    mode = Mode::kParamValue;
                    return true;
                }
                if (m == Match::kNeedMore && !at_end) return false;
                if (at_end) {
                    degrade_at_end();
                    return false;
                }
                degrade();
                return true;
            }
            case Mode::kParamValue: {
                size_t p = buf.find(kParamClose);
                size_t n = p != std::string::npos ? p
                           : at_end               ? buf.size()
                                                  : utf8_safe(buf, buf.size() - held_back(buf, kParamClose));
                // Output cut off inside the closing tag: the tag's start is not value text.
                if (at_end && p == std::string::npos && held_back(buf, kParamClose) >= kParamCloseHead.size())
                    n = buf.size() - held_back(buf, kParamClose);
                std::string_view piece(buf.data(), n);
                if (value_is_string) {
                    emit_escaped_args(piece);
                } else {
                    value_raw += piece;
                }
                if (p != std::string::npos) {
                    consume(p + kParamClose.size());
                    close_value();
                    mode = Mode::kInvoke;
                    return true;
                }
                if (at_end) {
                    buf.clear();
                    close_call();  // truncated output: keep the arguments valid JSON
                    return false;
                }
                consume(n);
                return false;
            }
        }
        return false;
    }
};

StreamingOutputParser::StreamingOutputParser(bool thinking) : st_(std::make_unique<State>()) {
    st_->mode = thinking ? Mode::kThinkStart : Mode::kContent;
}
StreamingOutputParser::~StreamingOutputParser() = default;
StreamingOutputParser::StreamingOutputParser(StreamingOutputParser&&) noexcept = default;
StreamingOutputParser& StreamingOutputParser::operator=(StreamingOutputParser&&) noexcept = default;

OutputDelta StreamingOutputParser::push(std::string_view text) {
    st_->buf += text;
    while (st_->step(false)) {
    }
    return std::exchange(st_->out, OutputDelta{});
}

OutputDelta StreamingOutputParser::finish() {
    while (st_->step(true)) {
    }
    return std::exchange(st_->out, OutputDelta{});
}

void apply_delta(ParsedOutput& out, const OutputDelta& d) {
    out.reasoning += d.reasoning;
    out.content += d.content;
    for (const auto& ev : d.tool_events) {
        if (ev.index >= static_cast<int>(out.tool_calls.size())) out.tool_calls.resize(ev.index + 1);
        auto& call = out.tool_calls[ev.index];
        if (!ev.name.empty()) call.name = ev.name;
        call.arguments_json += ev.arguments_delta;
    }
}

ParsedOutput parse_output(std::string_view text, bool thinking) {
    StreamingOutputParser p(thinking);
    ParsedOutput out;
    apply_delta(out, p.push(text));
    apply_delta(out, p.finish());
    return out;
}

}  // namespace dsv4
