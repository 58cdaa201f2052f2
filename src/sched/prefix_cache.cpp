// PrefixCache implementation (see prefix_cache.h).
#include "sched/prefix_cache.h"

#include <numeric>

#include "core/check.h"

namespace dsv4 {

int64_t prefix_block_tokens(const KvLayout& layout) {
    int64_t b = std::max<int64_t>(1, layout.page_tokens);
    for (const auto& l : layout.layers)
        if (l.ratio > 0) b = std::lcm(b, int64_t(l.ratio));
    return b;
}

PrefixCache::PrefixCache(const KvLayout& layout, int64_t block_tokens, PageAllocator& pages)
    : layout_(layout), block_(block_tokens), pages_(pages) {
    DSV4_CHECK(block_ > 0 && block_ % layout_.page_tokens == 0, "prefix cache block {} is not a multiple of {} tokens",
               block_, layout_.page_tokens);
}

PrefixCache::~PrefixCache() { flush(); }

// FNV-1a over the parent key, the salt and the ids: a chain, so a block's key names its whole prefix.
uint64_t PrefixCache::block_key(uint64_t parent, std::span<const int32_t> block, uint64_t salt) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) {
        for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    };
    mix(parent);
    mix(salt);
    for (int32_t t : block) mix(uint32_t(t));
    return h ? h : 1;  // 0 is the root
}

void PrefixCache::touch(uint64_t key, Node& n) {
    if (n.n_children == 0) leaves_.erase({n.last_use, key});
    n.last_use = ++clock_;
    if (n.n_children == 0) leaves_.insert({n.last_use, key});
}

PrefixCache::Hit PrefixCache::lookup(std::span<const int32_t> tokens, uint64_t salt, int64_t limit) {
    Hit hit;
    limit = std::min<int64_t>(limit, int64_t(tokens.size()));
    uint64_t key = 0;
    std::vector<uint64_t> path;
    int64_t best = 0;
    for (int64_t b = 0; (b + 1) * block_ <= limit; ++b) {
        const auto block = tokens.subspan(size_t(b * block_), size_t(block_));
        const uint64_t k = block_key(key, block, salt);
        auto it = nodes_.find(k);
        if (it == nodes_.end() || it->second.parent != key ||
            !std::equal(block.begin(), block.end(), it->second.tokens.begin()))
            break;
        path.push_back(k);
        if (!it->second.snapshot.empty()) best = b + 1;
        key = k;
    }
    for (int64_t b = 0; b < best; ++b) {
        Node& n = nodes_.at(path[size_t(b)]);
        touch(path[size_t(b)], n);
        for (int32_t p : n.pages) {
            pages_.retain(p);
            hit.token_pages.push_back(p);
        }
    }
    if (best > 0) {
        hit.tokens = best * block_;
        hit.snapshot = nodes_.at(path[size_t(best - 1)]).snapshot;
    }
    return hit;
}

void PrefixCache::insert(std::span<const int32_t> tokens, uint64_t salt, std::span<const int32_t> token_pages,
                         int64_t snapshot_tokens, std::vector<int32_t>& snapshot) {
    const int64_t ppb = block_ / layout_.page_tokens;
    const int64_t n_blocks = snapshot_tokens / block_;
    bool stored = false;
    if (snapshot_tokens % block_ == 0 && n_blocks > 0 && n_blocks * block_ <= int64_t(tokens.size()) &&
        n_blocks * ppb <= int64_t(token_pages.size())) {
        uint64_t key = 0;
        bool ok = true;
        for (int64_t b = 0; b < n_blocks && ok; ++b) {
            const auto block = tokens.subspan(size_t(b * block_), size_t(block_));
            const uint64_t k = block_key(key, block, salt);
            auto it = nodes_.find(k);
            if (it == nodes_.end()) {
                Node n;
                n.parent = key;
                n.tokens.assign(block.begin(), block.end());
                for (int64_t i = 0; i < ppb; ++i) {
                    const int32_t p = token_pages[size_t(b * ppb + i)];
                    pages_.retain(p);
                    n.pages.push_back(p);
                }
                pages_held_ += ppb;
                if (key != 0) {
                    Node& parent = nodes_.at(key);
                    if (parent.n_children++ == 0) leaves_.erase({parent.last_use, key});
                }
                it = nodes_.emplace(k, std::move(n)).first;
                it->second.last_use = ++clock_;
                leaves_.insert({it->second.last_use, k});
            } else if (it->second.parent != key || !std::equal(block.begin(), block.end(), it->second.tokens.begin())) {
                ok = false;  // a hash collision: cache nothing past it
                break;
            } else {
                touch(k, it->second);
            }
            if (b + 1 == n_blocks && it->second.snapshot.empty()) {
                it->second.snapshot = std::move(snapshot);
                pages_held_ += int64_t(it->second.snapshot.size());
                ++n_snapshots_;
                stored = true;
            }
            key = k;
        }
    }
    if (!stored) pages_.release(snapshot);
    snapshot.clear();
}

void PrefixCache::drop(uint64_t key) {
    auto it = nodes_.find(key);
    Node& n = it->second;
    DSV4_CHECK(n.n_children == 0, "dropping a prefix block that has children");
    leaves_.erase({n.last_use, key});
    pages_held_ -= int64_t(n.pages.size() + n.snapshot.size());
    n_snapshots_ -= !n.snapshot.empty();
    pages_.release(n.pages);
    pages_.release(n.snapshot);
    if (n.parent != 0) {
        Node& parent = nodes_.at(n.parent);
        if (--parent.n_children == 0) leaves_.insert({parent.last_use, n.parent});
    }
    nodes_.erase(it);
}

int64_t PrefixCache::evict_until_free(int64_t n_free) {
    int64_t dropped = 0;
    while (pages_.n_free() < n_free && !leaves_.empty()) {
        drop(leaves_.begin()->second);
        ++dropped;
    }
    evicted_ += dropped;
    return dropped;
}

void PrefixCache::flush() {
    while (!leaves_.empty()) drop(leaves_.begin()->second);
    DSV4_CHECK(nodes_.empty() && pages_held_ == 0, "prefix cache flush left {} blocks", nodes_.size());
}

}  // namespace dsv4
