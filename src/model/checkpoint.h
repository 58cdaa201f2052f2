// Checkpoint: read-only, memory-mapped access to the tensors of a safetensors checkpoint (spec §4).
// Opens a single .safetensors file, a directory with a sharded model.safetensors.index.json, or a
// directory of *.safetensors files. Invariants: every tensor name is unique across the checkpoint;
// every TensorView's bytes lie inside a mapping owned by the Checkpoint and stay valid while it
// lives (the Checkpoint is move-only; moving keeps views valid). Tensor bytes are little-endian and
// may be unaligned, so readers copy with memcpy rather than casting pointers.
// load_f32 / load_i32 turn checkpoint tensors into plain host arrays, undoing the quantisation of
// spec §4.2 (FP8 block scales, MXFP4) and checking dtype and shape on the way.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/mapped_file.h"

namespace dsv4 {

struct TensorView {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;  // inside the checkpoint's mapping; may be unaligned
    size_t nbytes = 0;
    std::string file;  // the file holding it, for error messages
    int64_t numel() const;
};

class Checkpoint {
public:
    // `path`: a .safetensors file, or a directory holding model.safetensors.index.json (sharded:
    // every shard named must exist and hold every tensor the index assigns to it, and hold no
    // tensor the index does not assign to it), or else one or more *.safetensors files.
    // Errors: NotFound (no such path / no safetensors in the directory / missing shard or tensor),
    // DataLoss (malformed file or index; see safetensors.h), InvalidArgument (duplicate names).
    static Result<Checkpoint> open(const std::string& path);

    bool has(std::string_view name) const;
    // NotFound naming the tensor and the checkpoint path.
    Result<TensorView> get(std::string_view name) const;
    // As get(), and checks dtype and shape; the error names file, tensor, expected vs actual.
    Result<TensorView> get(std::string_view name, DType dtype, std::span<const int64_t> shape) const;
    std::vector<std::string> names() const;  // sorted
    const std::string& path() const { return path_; }
    // "__metadata__" of the first file (or the index's "metadata" strings when sharded).
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

private:
    struct Entry {
        size_t file = 0;  // index into files_
        DType dtype = DType::kU8;
        std::vector<int64_t> shape;
        uint64_t begin = 0, end = 0;
    };
    Status add_file(const std::string& file_path, const std::vector<std::string>* expected_names);

    std::string path_;
    std::vector<MappedFile> files_;
    std::map<std::string, Entry, std::less<>> tensors_;
    std::map<std::string, std::string> metadata_;
};

// Loads a weight as f32 with its checkpoint quantisation undone (spec §4.2). `shape` is the
// logical shape; every mismatch is an error naming file, tensor, expected and actual.
//  * BF16 / F16 / F32: widened exactly (so an F32 and a BF16 copy of bf16-representable values
//    load bit-identically: B07);
//  * F8_E4M3 `<base>.weight` [N, K] + one sibling scale `<base>.scale`, `<base>.weight_scale_inv` or
//    `<base>.weight_scale`, dtype F8_E8M0 or F32, shape [ceil(N/128), ceil(K/128)];
//    W[n,k] = fp8(q[n,k]) * scale[n/128, k/128] (edge blocks cropped). An FP8 weight without a
//    scale, or with two candidate scales, is an error, never a silent cast (B14);
//  * I8 packed MXFP4 stored [N, K/2] (low nibble = even k) + F8_E8M0 scale [N, ceil(K/32)];
//    W[n,k] = e2m1(code) * 2^(e[n, k/32] - 127).
// UE8M0 scale bytes of 255 (NaN) are rejected as DataLoss. Other dtypes: InvalidArgument.
Result<std::vector<float>> load_f32(const Checkpoint& ckpt, std::string_view name, std::span<const int64_t> shape);

// Integer tensors (e.g. tid2eid [vocab, n_hash]: I64 or I32 on disk, spec §4.1) as int32.
// Errors: wrong dtype or shape; I64 values outside int32 (OutOfRange naming the element).
Result<std::vector<int32_t>> load_i32(const Checkpoint& ckpt, std::string_view name, std::span<const int64_t> shape);

// Every value in [lo, hi); OutOfRange naming `what`, the flat index and the value otherwise.
// For tid2eid: check_int_range(ids, 0, n_routed_experts, name) (B11).
Status check_int_range(std::span<const int32_t> values, int64_t lo, int64_t hi, std::string_view what);
// Every row of `row_len` values holds distinct values (tid2eid rows route to distinct experts, B11).
Status check_rows_distinct(std::span<const int32_t> values, int64_t row_len, std::string_view what);

}  // namespace dsv4
