// Safetensors container parsing: [u64 LE header length N][N bytes of JSON header][data buffer].
// The header maps tensor names to {dtype, shape, data_offsets=[begin,end)} relative to the data
// buffer, plus an optional "__metadata__" object of string -> string.
// This parser treats its input as hostile (it is fuzzed): it never reads outside the given bytes,
// never throws, never aborts, and every error message names the file and, where one is involved,
// the tensor. Accepted files satisfy, in addition to the JSON schema:
//   * 8 + N <= file size, 2 <= N <= 100 MiB, header text starts with '{' (trailing spaces allowed,
//     as writers pad the header for alignment);
//   * every dtype is a known safetensors tag, every dim is a non-negative integer, and
//     end - begin == numel * dtype size (no overflow);
//   * the byte ranges, sorted by begin, tile the data buffer exactly: no overlap, no hole, and the
//     last end equals the buffer size (the format forbids holes so files cannot be polyglots);
//   * tensor names are unique and non-empty.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace dsv4 {

// One tensor as declared in a header. begin/end are absolute offsets into the file.
struct SafetensorsEntry {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<int64_t> shape;
    uint64_t begin = 0;
    uint64_t end = 0;
};

struct SafetensorsHeader {
    std::vector<SafetensorsEntry> tensors;        // sorted by begin offset
    std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
    uint64_t data_start = 0;                      // 8 + header length
};

// Largest header accepted (the same limit the reference implementation uses).
inline constexpr uint64_t kSafetensorsMaxHeader = 100ull * 1024 * 1024;

// Parses and validates a whole safetensors file held in `file_bytes`. `file` is only used in
// error messages. Errors: DataLoss for anything malformed (see the invariants above), naming the
// file and the offending tensor.
Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> file_bytes, std::string_view file);

// Number of elements for a shape; false on negative dims or overflow past 2^63.
bool shape_numel(std::span<const int64_t> shape, int64_t* numel);

// "[2, 3]" for error messages.
std::string shape_to_string(std::span<const int64_t> shape);

}  // namespace dsv4
