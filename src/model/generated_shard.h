// Writing one safetensors shard whose tensor bytes are generated on demand (the synthetic
// checkpoint, model/synthetic_checkpoint.h), as fast as the generator threads and the disk allow:
// the shard's data region is cut into chunks of about `chunk_bytes`, a pool of `threads` workers
// each takes the next chunk, generates its bytes (pieces of one or more tensors) into its own
// buffer and writes it at its offset (pwrite), so generation runs on every thread and overlaps
// the writes. The bytes do not depend on threads or chunk_bytes. Host memory: one chunk per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace dsv4 {

// A tensor whose bytes are generated on demand: gen(out, first) fills `out` with the tensor's
// bytes [first, first + out.size()); first and out.size() are multiples of 8 (or reach the
// tensor's end), out.data() is aligned to the element size. gen is called from several threads
// at once.
struct GeneratedTensor {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    uint64_t bytes = 0;  // numel(shape) * dtype_size(dtype)
    std::function<void(std::span<uint8_t>, uint64_t)> gen;
};

struct ShardWriteOptions {
    int threads = 1;                           // generator / writer threads (>= 1)
    uint64_t chunk_bytes = uint64_t(8) << 20;  // bytes per work item (rounded down to 8, >= 8)
};

// Chunk boundaries of a data region holding tensors at byte offsets starts[0..n) (starts[n]: the
// region's size; non-decreasing): cuts[0] = 0 < cuts[1] < ... < cuts.back() = starts[n], each
// chunk at most max(chunk_bytes, 8) bytes, and every cut either a tensor's start or a multiple of
// 8 bytes into the tensor it falls in (so every piece starts on an element).
std::vector<uint64_t> chunk_cuts(std::span<const uint64_t> starts, uint64_t chunk_bytes);

// Writes `path` (through `path`.tmp, renamed when complete): the 8-byte header length, the JSON
// header (data_offsets in the given order, "__metadata__" {"format": "pt"}, padded with spaces to
// a multiple of 8) and the tensors' bytes, contiguous. Errors: Internal naming the file (cannot
// create, write or rename; the .tmp file is removed).
Status write_generated_shard(const std::string& path, std::span<const GeneratedTensor* const> tensors,
                             const ShardWriteOptions& opt);

}  // namespace dsv4
