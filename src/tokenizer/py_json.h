// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it: ", " and ": "
// separators, keys in document order, non-ASCII kept raw, floats in repr() form. The DeepSeek-V4
// prompt embeds tool schemas and tool-call arguments in this form, so matching it byte for byte
// is what keeps our prompts token-identical to the reference encoder.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsv4 {

// Serializes `value` the way Python's json.dumps(..., ensure_ascii=False) does. Object keys keep
// the order of `value` (use ordered_json input to keep the order of the original document).
std::string py_json_dumps(const nlohmann::ordered_json& value);

// Appends `s` as a JSON string literal (with quotes), escaped as Python's json module does.
void py_json_append_string(std::string& out, std::string_view s);

// Appends the body of a JSON string literal (no quotes). Escaping is per byte, so escaping
// pieces of a text one after another gives the same bytes as escaping the whole.
void py_json_append_escaped(std::string& out, std::string_view s);

// Python's repr() of a float: shortest round-trip digits, fixed notation for exponents in
// [-4, 16), otherwise d.ddde+XX; integral values keep a trailing ".0".
std::string py_float_repr(double v);

}  // namespace dsv4
