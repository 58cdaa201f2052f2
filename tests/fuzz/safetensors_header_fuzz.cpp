// libFuzzer target for the safetensors reader: any byte string is a candidate file.
//  1. parse_safetensors (src/model/safetensors.h) must return an error or a header whose invariants
//     hold; a crash, sanitizer report or broken invariant (trap) is a bug.
//  2. Accepted files are also opened as a Checkpoint (through a memfd, so no disk I/O) and every
//     tensor goes through load_f32 / load_i32 with its stored shape, which exercises dtype dispatch,
//     scale lookup and dequantisation on hostile data: errors are fine, crashes are not.
// Built only with -DDSV4_FUZZ=ON and clang.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include "model/checkpoint.h"
#include "model/safetensors.h"

namespace {

void exercise_loader(const uint8_t* data, size_t size) {
    const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
    if (fd < 0) return;
    if (size_t(write(fd, data, size)) == size) {
        auto ck = dsv4::Checkpoint::open("/proc/self/fd/" + std::to_string(fd));
        if (!ck.is_ok()) __builtin_trap();  // the parser accepted these bytes a moment ago
        for (const auto& name : ck->names()) {
            auto t = ck->get(name);
            if (!t.is_ok()) __builtin_trap();
            std::vector<int64_t> shape = t->shape;
            if (t->dtype == dsv4::DType::kI8 && shape.size() == 2) shape[1] *= 2;  // packed MXFP4
            (void)dsv4::load_f32(*ck, name, shape);
            (void)dsv4::load_i32(*ck, name, t->shape);
        }
    }
    close(fd);
}

}  // namespace

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
    for (const auto& t : r->tensors) {
        int64_t numel = 0;
        if (t.begin != at || t.end < t.begin || t.end > size) __builtin_trap();
        if (!dsv4::shape_numel(t.shape, &numel)) __builtin_trap();
        if (uint64_t(numel) * dsv4::dtype_size(t.dtype) != t.end - t.begin) __builtin_trap();
        at = t.end;
    }
    if (at != size) __builtin_trap();
    exercise_loader(data, size);
    return 0;
}
