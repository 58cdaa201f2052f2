// SafetensorsWriter: builds a safetensors file in memory (tests, tiny-model export).
// Output invariants: tensors ordered by element size (largest first) then name, laid out
// contiguously from offset 0 with no holes; the JSON header is padded with spaces to a multiple of
// 8 bytes, so with that order every tensor starts aligned to its element size. Everything it
// writes is accepted by parse_safetensors (safetensors.h).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace dsv4 {

class SafetensorsWriter {
public:
    // Copies `bytes`, which must hold numel(shape) * dtype_size(dtype) bytes (little-endian).
    // Errors (InvalidArgument): empty or duplicate name, "__metadata__", negative dim, size mismatch.
    Status add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> bytes);
    // Convenience: values stored as F32, or rounded to BF16 (round to nearest even).
    Status add_f32(const std::string& name, std::vector<int64_t> shape, std::span<const float> values);
    Status add_bf16(const std::string& name, std::vector<int64_t> shape, std::span<const float> values);
    Status add_i64(const std::string& name, std::vector<int64_t> shape, std::span<const int64_t> values);
    Status add_i32(const std::string& name, std::vector<int64_t> shape, std::span<const int32_t> values);
    // Quantised weights in the official layout (spec §4.2), w row-major [N, K] f32:
    // `<base>.weight` F8_E4M3 [N, K] + `<base>.scale` F8_E8M0 [ceil(N/128), ceil(K/128)] (or F32
    // holding the same powers of two when f32_scale, as in Flash-Base). load_f32 of the result equals
    // dequantize_fp8_block(quantize_fp8_block(w)).
    Status add_fp8_block(const std::string& base, const float* w, int64_t N, int64_t K, bool f32_scale = false);
    // `<base>.weight` I8 [N, K/2] packed e2m1 + `<base>.scale` F8_E8M0 [N, K/32]; K a multiple of 32.
    Status add_mxfp4(const std::string& base, const float* w, int64_t N, int64_t K);

    void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

    // The whole file. InvalidArgument if a name or metadata string is not valid UTF-8.
    Result<std::vector<uint8_t>> serialize() const;
    // serialize() then write to `path` via a temporary file and rename (no torn files).
    Status write(const std::string& path) const;

private:
    struct Tensor {
        DType dtype;
        std::vector<int64_t> shape;
        std::vector<uint8_t> bytes;
    };
    std::map<std::string, Tensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace dsv4
