// PrefixCache: prompt prefixes whose model state can be reused exactly (issue 17).
//
// DeepSeek-V4's state after a prefix is not only rows in token pages: the 128-row sliding window
// and the compressors' pending rows live in per-sequence state pages and change with every token.
// A prefix is reusable at a *block boundary*: a position L that is a multiple of every compress
// ratio and of page_tokens (block_tokens, 128 for Flash with 64-token pages). There every
// compressed row of [0, L) has been emitted into the token pages covering [0, L), and nothing
// written later lands in those pages (a row is stored in the page of its first position and
// emitted at its block's last one), so those pages are final and can be shared read-only. The
// state pages at L are kept as a *snapshot*: a copy of the sequence's state pages taken right
// after the step that reached L (runtime/forward_batch.h PageCopy), restored into a new sequence's
// own state pages before its first chunk. Nothing is recomputed on a hit beyond the tokens after
// L; a prompt that ends inside a block recomputes that block's tokens (fewer than block_tokens).
//
// Blocks are identified by a hash chain over their token ids (and a per-request salt), verified
// token by token on lookup. Each cached block holds its token pages (one owner each, shared with
// the sequences that use them); a block may hold a snapshot of the state at its end. Memory: a
// block costs block_tokens / page_tokens pages, a snapshot n_state_pages pages (about 16 MB per
// snapshot for the 43-layer Flash with fp8 rows, against 2 MB of token pages per 128-token block).
// Cached pages are otherwise free pages: least-recently-used leaf blocks are dropped whenever live
// requests need pages (Scheduler), so a request never fails or waits because of the cache.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/kv_layout.h"
#include "sched/page_allocator.h"

namespace dsv4 {

// The block size for `layout`: the least common multiple of page_tokens and every compress ratio.
int64_t prefix_block_tokens(const KvLayout& layout);

class PrefixCache {
public:
    // block_tokens must be a multiple of layout.page_tokens (prefix_block_tokens gives the smallest).
    PrefixCache(const KvLayout& layout, int64_t block_tokens, PageAllocator& pages);
    PrefixCache(const PrefixCache&) = delete;
    PrefixCache& operator=(const PrefixCache&) = delete;
    ~PrefixCache();

    struct Hit {
        int64_t tokens = 0;                // cached prefix length, a multiple of block_tokens (0: miss)
        std::vector<int32_t> token_pages;  // the prefix's token pages in order, one owner added for the caller
        std::vector<int32_t> snapshot;     // state pages holding the state after `tokens` (the cache's: copy them)
    };
    // The longest cached prefix of tokens[0, limit) that ends at a block with a snapshot.
    Hit lookup(std::span<const int32_t> tokens, uint64_t salt, int64_t limit);

    // Caches the blocks of tokens[0, snapshot_tokens) (snapshot_tokens a multiple of block_tokens):
    // token_pages are the sequence's token pages (index i covers positions [i*page_tokens, ..));
    // new blocks take one owner of theirs, known ones are only marked used. `snapshot` (state pages
    // holding the state after snapshot_tokens, one owner) passes to the cache, or is released when
    // that block already has one; it is cleared either way.
    void insert(std::span<const int32_t> tokens, uint64_t salt, std::span<const int32_t> token_pages,
                int64_t snapshot_tokens, std::vector<int32_t>& snapshot);

    // Drops least-recently-used leaf blocks until the allocator has `n_free` free pages or nothing
    // is left to drop (a page a sequence still holds is freed only when it lets go). Returns the
    // blocks dropped.
    int64_t evict_until_free(int64_t n_free);
    void flush();  // drops every block

    int64_t block_tokens() const { return block_; }
    int64_t n_blocks() const { return int64_t(nodes_.size()); }
    int64_t n_snapshots() const { return n_snapshots_; }
    int64_t pages_held() const { return pages_held_; }  // owners the cache holds (token + snapshot pages)
    int64_t evicted_blocks() const { return evicted_; }

private:
    struct Node {
        uint64_t parent = 0;
        std::vector<int32_t> tokens;    // [block_tokens] ids, to verify a hash match
        std::vector<int32_t> pages;     // [block_tokens / page_tokens] token pages
        std::vector<int32_t> snapshot;  // [n_state_pages] or empty
        int64_t n_children = 0;
        uint64_t last_use = 0;
    };
    uint64_t block_key(uint64_t parent, std::span<const int32_t> block, uint64_t salt) const;
    void touch(uint64_t key, Node& n);
    void drop(uint64_t key);

    KvLayout layout_;
    int64_t block_ = 0;
    PageAllocator& pages_;
    std::unordered_map<uint64_t, Node> nodes_;
    std::set<std::pair<uint64_t, uint64_t>> leaves_;  // (last_use, key) of blocks without children
    uint64_t clock_ = 0;
    int64_t n_snapshots_ = 0, pages_held_ = 0, evicted_ = 0;
};

}  // namespace dsv4
