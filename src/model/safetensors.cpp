// Safetensors header parser (see safetensors.h for the accepted format). Every number read from the
// file is range-checked before it is used as a size or offset; JSON is parsed without exceptions and
// every value's type is checked before it is read, so no input can throw or read out of bounds.
#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace dsv4 {
namespace {

using nlohmann::json;

// Names come from the file and may be huge or binary; keep messages readable.
std::string show_name(std::string_view s) {
    constexpr size_t kMax = 120;
    if (s.size() <= kMax) return fmt::format("'{}'", s);
    return fmt::format("'{}...' ({} bytes)", s.substr(0, kMax), s.size());
}

// Records the first syntax error of a JSON text; used only after a failed parse, to turn
// "invalid JSON" into a message with a byte position.
class ErrorSax : public nlohmann::json_sax<json> {
public:
    std::string message;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
        message = ex.what();
        return false;
    }
};

std::string json_error_message(const char* first, const char* last) {
    ErrorSax sax;
    json::sax_parse(first, last, &sax, nlohmann::detail::input_format_t::json, /*strict=*/true);
    return sax.message.empty() ? std::string("unknown JSON error") : sax.message;
}

// A non-negative integer that fits int64 (JSON numbers may arrive as signed, unsigned or float).
bool as_index(const json& v, uint64_t* out) {
    if (v.is_number_unsigned()) {
        *out = v.get<uint64_t>();
        return *out <= uint64_t(std::numeric_limits<int64_t>::max());
    }
    if (v.is_number_integer()) {
        const int64_t s = v.get<int64_t>();
        if (s < 0) return false;
        *out = uint64_t(s);
        return true;
    }
    return false;
}

Status parse_entry(std::string_view file, const std::string& name, const json& v, SafetensorsEntry* e) {
    const auto bad = [&](std::string_view what) {
        return error(StatusCode::kDataLoss, "{}: tensor {}: {}", file, show_name(name), what);
    };
    if (name.empty()) return bad("empty tensor name");
    if (!v.is_object()) return bad("header entry is not a JSON object");
    for (const auto& [key, unused] : v.items()) {
        if (key != "dtype" && key != "shape" && key != "data_offsets")
            return bad(fmt::format("unexpected field {}", show_name(key)));
    }
    e->name = name;

    const auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) return bad("missing or non-string 'dtype'");
    const auto& tag = dt->get_ref<const std::string&>();
    const auto dtype = dtype_from_safetensors(tag);
    if (!dtype) return bad(fmt::format("unknown or unsupported dtype {}", show_name(tag)));
    e->dtype = *dtype;

    const auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) return bad("missing or non-array 'shape'");
    e->shape.clear();
    e->shape.reserve(sh->size());
    for (const json& d : *sh) {
        uint64_t dim = 0;
        if (!as_index(d, &dim)) return bad(fmt::format("shape {} has a negative or non-integer dim", sh->dump()));
        e->shape.push_back(int64_t(dim));
    }

    const auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2)
        return bad("missing 'data_offsets' or not a [begin, end] pair");
    if (!as_index((*off)[0], &e->begin) || !as_index((*off)[1], &e->end))
        return bad("data_offsets are not non-negative integers");
    if (e->begin > e->end) return bad(fmt::format("data_offsets [{}, {}] end before begin", e->begin, e->end));

    int64_t numel = 0;
    if (!shape_numel(e->shape, &numel)) return bad(fmt::format("shape {} overflows", shape_to_string(e->shape)));
    unsigned __int128 expect = (unsigned __int128)uint64_t(numel) * dtype_size(e->dtype);
    if (expect != (unsigned __int128)(e->end - e->begin)) {
        return bad(fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                               shape_to_string(e->shape), tag, uint64_t(numel) * dtype_size(e->dtype), e->begin, e->end,
                               e->end - e->begin));
    }
    return Status::ok();
}

Status parse_metadata(std::string_view file, const json& v, std::map<std::string, std::string>* out) {
    if (!v.is_object()) return error(StatusCode::kDataLoss, "{}: '__metadata__' is not a JSON object", file);
    for (const auto& [key, val] : v.items()) {
        if (!val.is_string())
            return error(StatusCode::kDataLoss, "{}: '__metadata__' value for {} is not a string", file,
                         show_name(key));
        (*out)[key] = val.get<std::string>();
    }
    return Status::ok();
}

// Sorted by begin, the ranges must tile [0, data_size) exactly.
Status check_layout(std::string_view file, std::vector<SafetensorsEntry>& ts, uint64_t data_size) {
    for (const auto& t : ts) {
        if (t.end > data_size)
            return error(StatusCode::kDataLoss,
                         "{}: tensor {}: data_offsets [{}, {}] out of range (data buffer is {} bytes)", file,
                         show_name(t.name), t.begin, t.end, data_size);
    }
    std::sort(ts.begin(), ts.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t covered = 0;
    const SafetensorsEntry* prev = nullptr;
    for (const auto& t : ts) {
        if (t.begin < covered)
            return error(StatusCode::kDataLoss, "{}: tensor {}: data_offsets [{}, {}] overlap tensor {} [{}, {}]", file,
                         show_name(t.name), t.begin, t.end, show_name(prev->name), prev->begin, prev->end);
        if (t.begin > covered)
            return error(StatusCode::kDataLoss,
                         "{}: tensor {}: data_offsets [{}, {}] leave a hole of {} bytes at offset {} (the format "
                         "requires tensors to be contiguous)",
                         file, show_name(t.name), t.begin, t.end, t.begin - covered, covered);
        covered = t.end;
        prev = &t;
    }
    if (covered != data_size)
        return error(StatusCode::kDataLoss, "{}: data buffer is {} bytes but tensors cover only {}{}", file, data_size,
                     covered, prev ? fmt::format(" (last tensor {})", show_name(prev->name)) : "");
    return Status::ok();
}

}  // namespace

bool shape_numel(std::span<const int64_t> shape, int64_t* numel) {
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
    }
    *numel = n;
    return true;
}

std::string shape_to_string(std::span<const int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> bytes, std::string_view file) {
    if (bytes.size() < 8)
        return error(StatusCode::kDataLoss, "{}: file is {} bytes, too short for the 8-byte header length", file,
                     bytes.size());
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[size_t(i)];
    if (n < 2) return error(StatusCode::kDataLoss, "{}: header length {} is too small", file, n);
    if (n > kSafetensorsMaxHeader)
        return error(StatusCode::kDataLoss, "{}: header length {} exceeds the {} byte limit", file, n,
                     kSafetensorsMaxHeader);
    if (n > bytes.size() - 8)
        return error(StatusCode::kDataLoss, "{}: header length {} runs past the end of the {}-byte file", file, n,
                     bytes.size());
    const char* first = reinterpret_cast<const char*>(bytes.data() + 8);
    const char* last = first + n;
    if (*first != '{') return error(StatusCode::kDataLoss, "{}: header does not start with '{{'", file);
    // nlohmann's lexer stops at a NUL as if the input ended, which would let bytes after it hide
    // from validation; valid headers are UTF-8 JSON padded with spaces, so a NUL is always corrupt.
    if (std::memchr(first, 0, n) != nullptr)
        return error(StatusCode::kDataLoss, "{}: header is not valid JSON: it contains a NUL byte", file);

    // Duplicate names would silently shadow each other in a DOM; catch them at the top level.
    std::string duplicate;
    std::set<std::string, std::less<>> seen;
    json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (ev == json::parse_event_t::key && depth == 1 && duplicate.empty() && parsed.is_string()) {
            const auto& k = parsed.get_ref<const std::string&>();
            if (!seen.insert(k).second) duplicate = k;
        }
        return true;
    };
    json root = json::parse(first, last, cb, /*allow_exceptions=*/false);
    if (root.is_discarded())
        return error(StatusCode::kDataLoss, "{}: header is not valid JSON: {}", file, json_error_message(first, last));
    if (!root.is_object()) return error(StatusCode::kDataLoss, "{}: header is not a JSON object", file);
    if (!duplicate.empty())
        return error(StatusCode::kDataLoss, "{}: tensor {}: listed twice in the header", file, show_name(duplicate));

    SafetensorsHeader h;
    h.data_start = 8 + n;
    h.tensors.reserve(root.size());
    for (const auto& [key, val] : root.items()) {
        if (key == "__metadata__") {
            DSV4_RETURN_IF_ERROR(parse_metadata(file, val, &h.metadata));
            continue;
        }
        SafetensorsEntry e;
        DSV4_RETURN_IF_ERROR(parse_entry(file, key, val, &e));
        h.tensors.push_back(std::move(e));
    }
    DSV4_RETURN_IF_ERROR(check_layout(file, h.tensors, bytes.size() - h.data_start));
    for (auto& t : h.tensors) {
        t.begin += h.data_start;
        t.end += h.data_start;
    }
    return h;
}

}  // namespace dsv4
