// libFuzzer target for the safetensors header parser (src/model/safetensors.h): any byte string is
// a candidate file. The parser must return an error or a header whose invariants hold; a crash,
// sanitizer report or broken invariant (trap) is a bug. Built only with -DDSV4_FUZZ=ON and clang.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const uint8_t> bytes(data, size);
    auto r = dsv4::parse_safetensors(bytes, "fuzz.safetensors");
    if (!r.is_ok()) {
        if (r.status().message().empty()) __builtin_trap();
        return 0;
    }
    // Accepted: the ranges tile [data_start, size) in order and match dtype x shape.
    uint64_t at = r->data_start;
    if (at > size) __builtin_trap();
    unsigned sum = 0;
    for (const auto& t : r->tensors) {
        int64_t numel = 0;
        if (t.begin != at || t.end < t.begin || t.end > size) __builtin_trap();
        if (!dsv4::shape_numel(t.shape, &numel)) __builtin_trap();
        if (uint64_t(numel) * dsv4::dtype_size(t.dtype) != t.end - t.begin) __builtin_trap();
        // Touch the bytes so ASan sees any range that escaped the buffer.
        for (uint64_t i = t.begin; i < t.end; i += 64) sum += data[i];
        at = t.end;
    }
    if (at != size) __builtin_trap();
    return int(sum & 0);
}
