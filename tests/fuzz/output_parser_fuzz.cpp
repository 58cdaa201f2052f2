// libFuzzer target for the DSML / reasoning output parser (src/tokenizer/output_parser.h), issue 21
// item 2. The first byte picks the mode, the second seeds the chunkings, the rest is the input.
//
// Mode "bytes" (even first byte): the rest is generated text as is. Invariants (a violation traps):
//  - the stream gives the all-at-once result for every chunking tried: one piece, 1-byte pieces,
//    pseudo-random 1..16-byte pieces, and one cut at a seeded position;
//  - a call's first event carries its name, before any argument text; event indices only grow;
//  - every call has a non-empty name free of `"<>` and newlines; its arguments are one JSON object
//    when the text is valid UTF-8; deltas never split a UTF-8 character of valid text;
//  - reasoning is exactly the text before the first "</think>" (after a leading "<think>") in
//    thinking mode and empty otherwise; text without a "<｜DSML｜tool_calls>" after that is all
//    content, and no more content than text ever comes out.
// Mode "round trip" (odd first byte): the rest is decoded into an assistant turn (reasoning,
// content, up to 3 tool calls with string / number / bool / null / array / object arguments), which
// the chat encoder renders (src/tokenizer/chat_encoding.h) as the model is trained to emit it; the
// parser must give back the same reasoning, content, names and arguments (as JSON values), and the
// rendered text must pass the "bytes" invariants too. Turns the format cannot carry are skipped (a
// value holding "</｜DSML｜parameter>", a name with a quote, ...).
// Built only with -DDSV4_FUZZ=ON and clang.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_encoding.h"
#include "tokenizer/chat_markers.h"
#include "tokenizer/output_parser.h"
#include "tokenizer/utf8.h"

namespace {

using dsv4::OutputDelta;
using dsv4::ParsedOutput;
using dsv4::StreamingOutputParser;
namespace chat = dsv4::chat;

void check(bool ok) {
    if (!ok) __builtin_trap();
}

// True if `s` is a run of complete UTF-8 sequences (no character cut at either end).
bool whole_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        const size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
        if (len == 0 || i + len > s.size()) return false;
        for (size_t k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

bool same(const ParsedOutput& a, const ParsedOutput& b) {
    if (a.reasoning != b.reasoning || a.content != b.content || a.tool_calls.size() != b.tool_calls.size())
        return false;
    for (size_t i = 0; i < a.tool_calls.size(); ++i)
        if (a.tool_calls[i].name != b.tool_calls[i].name ||
            a.tool_calls[i].arguments_json != b.tool_calls[i].arguments_json)
            return false;
    return true;
}

// Streams `text` cut at `cuts` (ascending) and checks the per-delta invariants on the way.
ParsedOutput stream(std::string_view text, const std::vector<size_t>& cuts, bool thinking, bool valid_utf8) {
    StreamingOutputParser p(thinking);
    ParsedOutput out;
    std::vector<bool> named;
    auto take = [&](const OutputDelta& d) {
        if (valid_utf8) check(whole_utf8(d.reasoning) && whole_utf8(d.content));
        for (const auto& ev : d.tool_events) {
            // Indices: the next call, or one already announced.
            check(ev.index >= 0 && size_t(ev.index) <= named.size());
            if (size_t(ev.index) == named.size()) {
                check(!ev.name.empty());  // a call starts with its name
                named.push_back(true);
            } else {
                check(ev.name.empty());  // named once
            }
        }
        dsv4::apply_delta(out, d);
    };
    size_t prev = 0;
    for (size_t c : cuts) {
        take(p.push(text.substr(prev, c - prev)));
        prev = c;
    }
    take(p.push(text.substr(prev)));
    take(p.finish());
    return out;
}

ParsedOutput check_text(std::string_view text, bool thinking, uint8_t seed) {
    const bool valid = dsv4::utf8::is_valid(text);
    const ParsedOutput whole = dsv4::parse_output(text, thinking);

    // Chunking invariance.
    check(same(stream(text, {}, thinking, valid), whole));
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
    check(same(stream(text, cuts, thinking, valid), whole));
    cuts.clear();
    uint32_t x = seed * 2654435761u + 1;
    for (size_t at = 0;;) {
        x = x * 1664525u + 1013904223u;
        at += 1 + (x >> 24) % 16;
        if (at >= text.size()) break;
        cuts.push_back(at);
    }
    check(same(stream(text, cuts, thinking, valid), whole));
    if (!text.empty()) check(same(stream(text, {(size_t(seed) * 131) % text.size()}, thinking, valid), whole));

    // Calls.
    for (const auto& c : whole.tool_calls) {
        check(!c.name.empty() && c.name.find_first_of("\"<>\n") == std::string::npos);
        check(c.arguments_json.size() >= 2 && c.arguments_json.front() == '{' && c.arguments_json.back() == '}');
        if (valid) {
            const auto j = nlohmann::json::parse(c.arguments_json, nullptr, false);
            check(!j.is_discarded() && j.is_object());
        }
    }

    // Reasoning is exactly the text before the first "</think>"; the rest is the content side.
    std::string_view rest = text;
    if (thinking) {
        if (rest.starts_with(chat::kThinkOpen)) rest.remove_prefix(chat::kThinkOpen.size());
        const size_t p = rest.find(chat::kThinkClose);
        check(whole.reasoning == rest.substr(0, p));
        rest = p == std::string_view::npos ? std::string_view() : rest.substr(p + chat::kThinkClose.size());
    } else {
        check(whole.reasoning.empty());
    }
    if (rest.find(chat::kToolCallsOpen) == std::string_view::npos) {
        check(whole.content == rest);
        check(whole.tool_calls.empty());
    }
    check(whole.content.size() <= rest.size());
    return whole;
}

// --- round trip through the chat encoder ---

std::string utf8_string(FuzzedDataProvider& fdp, size_t max) {
    return dsv4::utf8::sanitize(fdp.ConsumeRandomLengthString(max));
}

// A name the DSML attribute syntax can carry.
bool attr_ok(const std::string& s) {
    return !s.empty() && s.size() <= 256 && s.find_first_of("\"<>\n") == std::string::npos;
}

nlohmann::ordered_json value(FuzzedDataProvider& fdp, int depth) {
    switch (fdp.ConsumeIntegralInRange<int>(0, depth > 0 ? 6 : 4)) {
        case 0:
            return utf8_string(fdp, 64);
        case 1:
            return fdp.ConsumeIntegral<int64_t>();
        case 2: {
            const double d = fdp.ConsumeFloatingPoint<double>();
            return std::isfinite(d) ? nlohmann::ordered_json(d) : nlohmann::ordered_json(0.5);
        }
        case 3:
            return fdp.ConsumeBool();
        case 4:
            return nullptr;
        case 5: {
            auto a = nlohmann::ordered_json::array();
            for (int n = fdp.ConsumeIntegralInRange<int>(0, 3); n > 0; --n) a.push_back(value(fdp, depth - 1));
            return a;
        }
        default: {
            auto o = nlohmann::ordered_json::object();
            for (int n = fdp.ConsumeIntegralInRange<int>(0, 3); n > 0; --n)
                o[utf8_string(fdp, 16)] = value(fdp, depth - 1);
            return o;
        }
    }
}

void round_trip(FuzzedDataProvider& fdp, uint8_t seed) {
    const bool thinking = fdp.ConsumeBool();
    const std::string reasoning = thinking ? utf8_string(fdp, 128) : std::string();
    const std::string content = utf8_string(fdp, 128);
    if (reasoning.find(chat::kThinkClose) != std::string::npos || reasoning.starts_with(chat::kThinkOpen) ||
        content.find(chat::kToolCallsOpen) != std::string::npos)
        return;
    struct Call {
        std::string name;
        nlohmann::ordered_json args;
    };
    std::vector<Call> calls(fdp.ConsumeIntegralInRange<size_t>(0, 3));
    for (auto& c : calls) {
        c.name = utf8_string(fdp, 32);
        if (!attr_ok(c.name)) return;
        c.args = nlohmann::ordered_json::object();
        for (int n = fdp.ConsumeIntegralInRange<int>(0, 4); n > 0; --n) {
            const std::string key = utf8_string(fdp, 32);
            if (!attr_ok(key)) return;
            c.args[key] = value(fdp, 2);
        }
        if (c.args.dump().find(chat::kParamClose) != std::string::npos) return;
    }

    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    msgs.push_back({{"role", "user"}, {"content", "x"}});
    nlohmann::ordered_json a = {{"role", "assistant"}, {"content", content}};
    if (thinking) a["reasoning_content"] = reasoning;
    if (!calls.empty()) {
        a["tool_calls"] = nlohmann::ordered_json::array();
        for (size_t i = 0; i < calls.size(); ++i)
            a["tool_calls"].push_back({{"id", std::to_string(i)},
                                       {"type", "function"},
                                       {"function", {{"name", calls[i].name}, {"arguments", calls[i].args.dump()}}}});
    }
    msgs.push_back(a);
    dsv4::ChatOptions opts;
    opts.thinking = thinking;
    const auto prompt = dsv4::render_chat(msgs, opts);
    check(prompt.is_ok());  // every field above is one the encoder takes

    // What the model emits: after "<｜Assistant｜><think>" (or "</think>"), up to the EOS.
    std::string head(chat::kAssistant);
    head += thinking ? chat::kThinkOpen : chat::kThinkClose;
    const size_t at = prompt->find(head);
    check(at != std::string::npos && prompt->ends_with(chat::kEos));
    const std::string_view out =
        std::string_view(*prompt).substr(at + head.size(), prompt->size() - at - head.size() - chat::kEos.size());

    const ParsedOutput got = check_text(out, thinking, seed);
    check(got.reasoning == reasoning);
    check(got.content == content);
    check(got.tool_calls.size() == calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
        check(got.tool_calls[i].name == calls[i].name);
        check(nlohmann::ordered_json::parse(got.tool_calls[i].arguments_json) == calls[i].args);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    const uint8_t mode = data[0], seed = data[1];
    if (mode % 2 == 0) {
        const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
        check_text(text, (mode >> 1) % 2 == 1, seed);
    } else {
        FuzzedDataProvider fdp(data + 2, size - 2);
        round_trip(fdp, seed);
    }
    return 0;
}
