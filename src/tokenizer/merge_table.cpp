// MergeTable: linear probing, kept at most half full.
#include "tokenizer/merge_table.h"

namespace dsv4 {

void MergeTable::reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap <= slots_.size()) return;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    size_ = 0;
    for (const Slot& s : old) {
        if (s.key != kEmpty) {
            insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.entry);
        }
    }
}

void MergeTable::grow() { reserve(slots_.empty() ? 8 : slots_.size()); }

void MergeTable::insert(int32_t a, int32_t b, MergeEntry e) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    const uint64_t key = pack(a, b);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        Slot& s = slots_[i];
        if (s.key == key) {
            s.entry = e;
            return;
        }
        if (s.key == kEmpty) {
            s.key = key;
            s.entry = e;
            ++size_;
            return;
        }
    }
}

}  // namespace dsv4
