// JsonMatcher: an incremental recognizer of the JSON texts a CompiledSchema allows, fed one byte at
// a time (the bytes of the tokens the model emits). It holds every way the bytes so far can still
// be read (anyOf and enum alternatives are followed side by side), so feed() rejects a byte exactly
// when no valid document starts with the bytes fed plus it. Whitespace is allowed only between
// structural characters and at most kMaxWhitespace bytes in a row (space, newline, tab), which keeps
// a model from padding forever; nothing may follow the root value. Numbers have at most
// kMaxNumberLength characters and two exponent digits, so each parses to a finite double.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "constrain/json_schema.h"

namespace dsv4::constrain {

class JsonMatcher {
public:
    static constexpr int kMaxWhitespace = 16;
    static constexpr int kMaxNumberLength = 32;
    static constexpr int kMaxThreads = 64;  // alternatives followed at once (more: the byte is refused)

    explicit JsonMatcher(std::shared_ptr<const CompiledSchema> schema);

    // Feeds one byte; false (state unchanged) when no allowed document continues with it.
    bool feed(uint8_t c);
    // Feeds bytes in order; false (state unchanged) at the first refused byte.
    bool feed(std::string_view bytes);
    // The bytes so far form a complete allowed document.
    bool accepting() const;
    // Accepting, and no byte may follow.
    bool finished() const;
    // True when feed(c) would accept c and leave the state as it is (plain string content): lets
    // the vocabulary walk skip copying the state.
    bool absorbs(uint8_t c) const;
    // A key identifying the state (equal keys: the same future), for caching token masks.
    std::string state_key() const;

private:
    struct Frame {
        enum class T : uint8_t { kValue, kObject, kKey, kArray, kString, kNumber, kLiteral };
        T t = T::kValue;
        uint8_t phase = 0;
        uint8_t ws = 0;  // whitespace bytes in a row at this position
        bool integer = false;
        bool free_key = false;  // kKey: no declared name fits any more: the rest is plain content
        int node = -1;          // schema node (kAnyNode: any value)
        int32_t count = 0;  // kArray: items; kLiteral: bytes matched; kString/kKey: \\u digits left; kNumber: length
        int32_t sel = -1;   // kLiteral: which literal; kObject: the property whose value is open (-1:
                            // additional); kNumber: exponent digits
        uint64_t seen = 0;  // kObject: declared properties present
        std::string key;    // kKey: the key's bytes so far
    };
    using Thread = std::vector<Frame>;

    void step(Thread th, uint8_t c, std::vector<Thread>& out) const;
    void start_value(Thread th, int node, uint8_t ws, uint8_t c, std::vector<Thread>& out) const;
    bool key_possible(const Frame& obj, const std::string& key, bool complete) const;
    bool additional_allowed(const Frame& obj) const;
    int declared(const Frame& obj, const std::string& key, bool complete) const;
    bool required_seen(const Frame& obj) const;
    static std::string thread_key(const Thread& th);
    static bool take_whitespace(Thread& th, uint8_t c, std::vector<Thread>& out);
    static bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

    std::shared_ptr<const CompiledSchema> schema_;
    std::vector<Thread> threads_;
};

inline constexpr int kAnyNode = -3;

}  // namespace dsv4::constrain
