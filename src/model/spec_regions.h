// The rows a speculative verify chunk overwrites in a sequence's state area (model/spec_state.h), as
// a list of position-independent regions, and the backup / rollback of one region written once for
// the host (spec_state.cpp, the CPU runner) and the device (kernels/cuda/ops/spec_state.cu, the CUDA
// runner), so both undo exactly the same rows. Offsets and widths are in state elements (f32 words).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace dsv4 {

// One family of state rows that a chunk's positions write, one row per position:
// - a decoder block's window ring: row of position q at base + (q mod W) * width, saved at
//   backup + i * width for the chunk's i-th position;
// - a compressor's kv or gate rows: row of q at base + (slot_add + q mod ratio) * width (overlapping
//   compressors write the current-window half, slot_add = ratio), saved the same way; an overlapping
//   compressor's window close also moves the current window into rows [0, ratio), so those rows (the
//   previous window) are saved after the slot rows, at backup + (spec_tokens + 1) * width.
struct SpecRegion {
    int64_t base = 0, backup = 0;
    int32_t width = 0;      // elements per row
    int32_t modulus = 1;    // W for a ring, the ratio for a compressor
    int32_t slot_add = 0;   // ratio for an overlapping compressor, else 0
    int32_t prev_rows = 0;  // ratio for an overlapping compressor (its previous-window rows), else 0
    DSV4_HD int64_t row(int64_t q) const { return base + (slot_add + q % modulus) * int64_t(width); }
};

// Copies `width` elements; `at(e)` is the state element e (a host pointer or the device page pool).
template <class At>
DSV4_HD inline void spec_copy_row(At& at, int64_t dst, int64_t src, int64_t width, int64_t i0, int64_t step) {
    for (int64_t i = i0; i < width; i += step) at(dst + i) = at(src + i);
}

// Saves what positions [start, start + n) overwrite in region r (n <= spec_tokens + 1). Elements i0,
// i0 + step, ... of each row (one thread of `step` on the device, i0 0 and step 1 on the host).
template <class At>
DSV4_HD inline void spec_region_backup(At& at, const SpecRegion& r, int spec_tokens, int64_t start, int64_t n,
                                       int64_t i0 = 0, int64_t step = 1) {
    for (int64_t i = 0; i < n; ++i) spec_copy_row(at, r.backup + i * r.width, r.row(start + i), r.width, i0, step);
    if (r.prev_rows > 0)
        spec_copy_row(at, r.backup + int64_t(spec_tokens + 1) * r.width, r.base, int64_t(r.prev_rows) * r.width, i0,
                      step);
}

// Undoes positions [from, v0 + n) of region r after the verify chunk [v0, v0 + n) ran (from in
// [v0, v0 + n]): their rows come back, and the previous-window rows when the chunk's window close (at
// most one: n <= the ratio) fell at a rejected position.
template <class At>
DSV4_HD inline void spec_region_rollback(At& at, const SpecRegion& r, int spec_tokens, int64_t v0, int64_t n,
                                         int64_t from, int64_t i0 = 0, int64_t step = 1) {
    for (int64_t q = from; q < v0 + n; ++q)
        spec_copy_row(at, r.row(q), r.backup + (q - v0) * r.width, r.width, i0, step);
    if (r.prev_rows > 0) {
        const int64_t close = (v0 / r.modulus + 1) * r.modulus - 1;
        if (close >= from && close < v0 + n)
            spec_copy_row(at, r.base, r.backup + int64_t(spec_tokens + 1) * r.width, int64_t(r.prev_rows) * r.width, i0,
                          step);
    }
}

}  // namespace dsv4
