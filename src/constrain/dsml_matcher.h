// DsmlMatcher: the bytes of a DeepSeek-V4 tool-call block (DSML, as the official encoder renders
// it, src/tokenizer/chat_markers.h) restricted to given tools, for enforced tool calls
// (tool_choice "required" or a named function):
//
//   <｜DSML｜tool_calls>
//   <｜DSML｜invoke name="TOOL">
//   <｜DSML｜parameter name="PARAM" string="true">raw text</｜DSML｜parameter>
//   <｜DSML｜parameter name="PARAM" string="false">JSON value</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜tool_calls>
//
// TOOL is one of the allowed tools; PARAM one of its parameters not given yet (any name when the
// tool declares none); string="true" for a string-typed parameter (raw text up to the closing
// tag), "false" otherwise with a JSON value matching the parameter's schema (JsonMatcher); every
// required parameter before </｜DSML｜invoke>; at most max_calls invokes. Up to two whitespace
// bytes (newline, space) between elements, as the encoder's newlines. Nothing may follow the block.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "constrain/json_matcher.h"
#include "constrain/json_schema.h"

namespace dsv4::constrain {

struct ToolSpec {
    std::string name;
    // Declared parameters (none declared: any name, any JSON or raw value).
    std::vector<std::string> params;
    std::vector<std::shared_ptr<const CompiledSchema>> schemas;  // per parameter
    // Per parameter, the string flags allowed: 1 string="true" (raw text: the schema is a string),
    // 2 string="false" (a JSON value), 3 either (a schema that says nothing of the type).
    std::vector<uint8_t> flags;
    std::vector<bool> required;  // per parameter
    bool open = true;            // parameters other than the declared ones allowed
};

struct ToolGrammar {
    std::vector<ToolSpec> tools;
    int max_calls = -1;  // -1: any number (>= 1)
};

class DsmlMatcher {
public:
    // opened: the output already holds "<｜DSML｜" (a constraint that starts once the model emits
    // the DSML token, tool_choice auto): the block resumes from there.
    explicit DsmlMatcher(std::shared_ptr<const ToolGrammar> grammar, bool opened = false);

    bool feed(uint8_t c);
    bool feed(std::string_view bytes);
    bool absorbs(uint8_t c) const;
    bool accepting() const { return mode_ == Mode::kDone; }
    bool finished() const { return mode_ == Mode::kDone; }
    std::string state_key() const;

private:
    enum class Mode : uint8_t { kLits, kName, kParamName, kRaw, kJson, kDone };
    // Sets of literal alternatives (each prefix-free); `allow_` masks the alternatives of the set.
    enum class Set : uint8_t {
        kOpen,
        kInvoke,
        kNameEnd,
        kParamOrEnd,
        kParamNameEnd,
        kFlag,
        kParamClose,
        kInvokeOrClose
    };
    struct Alt {
        const char* text;
        int next;  // what follows (see enter_after)
    };
    static const std::vector<Alt>& alts(Set s);
    void enter(Set s, uint32_t allow, bool ws);
    void after_literal(int next);
    bool step(uint8_t c);
    const ToolSpec& tool() const { return grammar_->tools[size_t(tool_)]; }
    bool required_given() const;

    std::shared_ptr<const ToolGrammar> grammar_;
    Mode mode_ = Mode::kLits;
    Set set_ = Set::kOpen;
    uint32_t allow_ = 0;  // alternatives of set_ still possible
    int32_t pos_ = 0;     // bytes of the literal matched
    uint8_t ws_ = 0;      // whitespace bytes taken before the literal (-1: none allowed)
    bool ws_ok_ = false;
    int32_t tool_ = -1, param_ = -1, calls_ = 0;
    uint64_t given_ = 0;  // parameters of this invoke given so far
    std::string name_;    // kName / kParamName: bytes so far
    int32_t kmp_ = 0;     // kRaw: bytes of the closing tag matched
    std::optional<JsonMatcher> json_;
};

}  // namespace dsv4::constrain
