// PageAllocator implementation (see page_allocator.h).
#include "sched/page_allocator.h"

#include <algorithm>

#include "core/check.h"
#include "core/philox.h"

namespace dsv4 {

PageAllocator::PageAllocator(int64_t n_pages, uint64_t shuffle_seed) : owners_(size_t(n_pages), 0) {
    free_.reserve(size_t(n_pages));
    for (int64_t i = n_pages - 1; i >= 0; --i) free_.push_back(int32_t(i));
    if (shuffle_seed != 0) {
        for (int64_t i = n_pages - 1; i > 0; --i) {
            const auto j = int64_t(philox_uniform(shuffle_seed, 7, uint64_t(i)) * double(i + 1));
            std::swap(free_[size_t(i)], free_[size_t(std::min(j, i))]);
        }
    }
}

bool PageAllocator::allocate(int64_t n, std::vector<int32_t>& out) {
    if (n <= 0) return true;
    if (n > n_free()) return false;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t p = free_.back();
        free_.pop_back();
        DSV4_CHECK(!owners_[size_t(p)], "page {} allocated twice", p);
        owners_[size_t(p)] = 1;
        out.push_back(p);
    }
    return true;
}

void PageAllocator::retain(int32_t page) {
    DSV4_CHECK(page >= 0 && page < int32_t(owners_.size()) && owners_[size_t(page)] > 0,
               "retain of page {} that is not allocated", page);
    ++owners_[size_t(page)];
}

void PageAllocator::release(std::vector<int32_t>& pages) {
    for (int32_t p : pages) {
        DSV4_CHECK(p >= 0 && p < int32_t(owners_.size()) && owners_[size_t(p)] > 0,
                   "release of page {} that is not allocated", p);
        if (--owners_[size_t(p)] == 0) free_.push_back(p);
    }
    pages.clear();
}

}  // namespace dsv4
