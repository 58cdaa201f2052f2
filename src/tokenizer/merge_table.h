// Open-addressing hash map from a pair of token ids to (merge rank, merged id). It is the
// innermost lookup of BPE, so it avoids std::unordered_map's node chasing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv4 {

struct MergeEntry {
    int32_t rank = -1;    // position in the merges list; lower merges first
    int32_t new_id = -1;  // id of the concatenated token
};

class MergeTable {
public:
    void reserve(size_t n);
    // Later inserts of the same pair overwrite earlier ones (the reference builds its map the
    // same way, so a duplicated merge keeps its last rank).
    void insert(int32_t a, int32_t b, MergeEntry e);
    // Returns nullptr when (a, b) is not a merge.
    const MergeEntry* find(int32_t a, int32_t b) const {
        if (slots_.empty()) return nullptr;
        const uint64_t key = pack(a, b);
        for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.key == key) return &s.entry;
            if (s.key == kEmpty) return nullptr;
        }
    }
    size_t size() const { return size_; }

private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    struct Slot {
        uint64_t key = kEmpty;
        MergeEntry entry;
    };
    static uint64_t pack(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 29); }
    void grow();

    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t size_ = 0;
};

}  // namespace dsv4
