// PageAllocator: hands out page ids of the one KV/state pool with exact accounting. A page is free
// or held by one or more owners (sequences, the prefix cache); allocate is all-or-nothing, retain
// adds an owner to a held page, release drops one owner and frees the page with its last, and
// both check for pages that are not held, so used + free == total holds after every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv4 {

class PageAllocator {
public:
    // `shuffle_seed` != 0 permutes the initial free list, so tests can run the same requests
    // on different physical page layouts.
    explicit PageAllocator(int64_t n_pages, uint64_t shuffle_seed = 0);

    // Appends n pages (one owner each) to `out`; false (and `out` untouched) when fewer than n are free.
    bool allocate(int64_t n, std::vector<int32_t>& out);
    // One more owner of a held page (a page shared read-only, e.g. a cached prefix block).
    void retain(int32_t page);
    // Drops one owner of every page in `pages` (freeing those left without one) and clears it.
    void release(std::vector<int32_t>& pages);

    int64_t n_total() const { return int64_t(owners_.size()); }
    int64_t n_free() const { return int64_t(free_.size()); }
    int64_t n_used() const { return n_total() - n_free(); }
    int32_t owners(int32_t page) const { return owners_[size_t(page)]; }

private:
    std::vector<int32_t> free_;    // stack: most recently freed pages are reused first
    std::vector<int32_t> owners_;  // [n_pages] 0 while free
};

}  // namespace dsv4
