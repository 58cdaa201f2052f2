// PageAllocator: hands out page ids of the one KV/state pool with exact accounting. Every page
// is either free or owned by exactly one sequence; allocate is all-or-nothing and release checks
// for double frees, so used + free == total holds after every call.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4 {

class PageAllocator {
public:
    // `shuffle_seed` != 0 permutes the initial free list, so tests can run the same requests
    // on different physical page layouts.
    explicit PageAllocator(int64_t n_pages, uint64_t shuffle_seed = 0);

    // Appends n pages to `out`; false (and `out` untouched) when fewer than n are free.
    bool allocate(int64_t n, std::vector<int32_t>& out);
    // Returns every page in `pages` to the pool and clears it.
    void release(std::vector<int32_t>& pages);

    int64_t n_total() const { return int64_t(owned_.size()); }
    int64_t n_free() const { return int64_t(free_.size()); }
    int64_t n_used() const { return n_total() - n_free(); }

private:
    std::vector<int32_t> free_;   // stack: most recently freed pages are reused first
    std::vector<uint8_t> owned_;  // [n_pages] 1 while allocated
};

}  // namespace dsv4
