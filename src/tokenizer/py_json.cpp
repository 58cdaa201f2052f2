// Python-compatible JSON serialization (see py_json.h).
#include "tokenizer/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dsv4 {

void py_json_append_escaped(std::string& out, std::string_view s) {
    for (char c : s) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
}

void py_json_append_string(std::string& out, std::string_view s) {
    out += '"';
    py_json_append_escaped(out, s);
    out += '"';
}

std::string py_float_repr(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
    // Shortest round-trip digits in scientific form, e.g. "1.2345e+17", then re-laid out.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    std::string out;
    size_t pos = 0;
    if (sci[0] == '-') {
        out += '-';
        pos = 1;
    }
    size_t e = sci.find('e');
    std::string digits;
    for (size_t i = pos; i < e; ++i)
        if (sci[i] != '.') digits += sci[i];
    int exp10 = std::atoi(sci.c_str() + e + 1);
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out += "0.";
            out.append(static_cast<size_t>(-exp10 - 1), '0');
            out += digits;
        } else {
            size_t int_len = static_cast<size_t>(exp10) + 1;
            if (digits.size() <= int_len) {
                out += digits;
                out.append(int_len - digits.size(), '0');
                out += ".0";
            } else {
                out += digits.substr(0, int_len);
                out += '.';
                out += digits.substr(int_len);
            }
        }
    } else {
        out += digits[0];
        if (digits.size() > 1) {
            out += '.';
            out += digits.substr(1);
        }
        char ebuf[16];
        std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
        out += ebuf;
    }
    return out;
}

namespace {

void dump(std::string& out, const nlohmann::ordered_json& v) {
    using T = nlohmann::ordered_json::value_t;
    switch (v.type()) {
        case T::null:
            out += "null";
            break;
        case T::boolean:
            out += v.get<bool>() ? "true" : "false";
            break;
        case T::number_integer:
            out += std::to_string(v.get<int64_t>());
            break;
        case T::number_unsigned:
            out += std::to_string(v.get<uint64_t>());
            break;
        case T::number_float:
            out += py_float_repr(v.get<double>());
            break;
        case T::string:
            py_json_append_string(out, v.get_ref<const std::string&>());
            break;
        case T::array: {
            out += '[';
            bool first = true;
            for (const auto& e : v) {
                if (!first) out += ", ";
                first = false;
                dump(out, e);
            }
            out += ']';
            break;
        }
        case T::object: {
            out += '{';
            bool first = true;
            for (auto it = v.begin(); it != v.end(); ++it) {
                if (!first) out += ", ";
                first = false;
                py_json_append_string(out, it.key());
                out += ": ";
                dump(out, it.value());
            }
            out += '}';
            break;
        }
        case T::binary:
        case T::discarded:
            out += "null";
            break;
    }
}

}  // namespace

std::string py_json_dumps(const nlohmann::ordered_json& value) {
    std::string out;
    dump(out, value);
    return out;
}

}  // namespace dsv4
