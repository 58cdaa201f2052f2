// Scheduler: decides what each engine step computes. Continuous batching: running decodes
// first (one token each), then unfinished prefills, then new sequences admitted FIFO, all
// under one token budget, so prefill chunks and decodes share a step. When pages run out the
// most recently admitted running sequence is preempted by recompute: its pages return to the
// pool and it goes back to the front of the waiting queue with its tokens (prompt + output)
// intact, to be prefilled again later. A sequence awaiting a launched step's output
// (Sequence::await_output) is left out until that step is collected. Never touches tensors; owns
// the sequences.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/kv_layout.h"
#include "runtime/forward_batch.h"
#include "sched/page_allocator.h"
#include "sched/prefix_cache.h"
#include "sched/sequence.h"

namespace dsv4 {

struct SchedulerConfig {
    int max_running = 64;               // sequences in the running set
    int64_t max_tokens_per_step = 512;  // token budget of one forward (prefill + decode)
    int64_t max_prefill_chunk = 512;    // largest prefill slice of one sequence in one step
    // Prefill tokens of a step that also decodes (0: only the step budget bounds them). Why: a
    // 4,096-token chunk makes that step several times a decode step, and every decoding sequence
    // waits for it (inter-token latency p99 1.2 s against an 81 ms median at 64 users, ledger E28);
    // a smaller share per mixed step spreads a prompt over more steps instead. Steps without
    // decodes still take max_tokens_per_step.
    int64_t max_prefill_tokens_with_decode = 0;
    // Prefix caching (sched/prefix_cache.h): prompts resume from cached blocks; prefill chunks end at
    // block boundaries where they can, and a sequence's state is snapshotted at each one it reaches.
    bool prefix_cache = false;
    int64_t prefix_block_tokens = 0;  // 0: prefix_block_tokens(layout)
    // Prefill chunks end at block boundaries without the cache too (its chunking, for comparisons:
    // the CPU reference is bitwise the same only for the same chunks).
    bool align_prefill_chunks = false;
    // Speculative decoding (issue 24): a decoding sequence that speculates (Sequence::speculate)
    // gets a verify chunk of up to this many drafts (fewer near max_tokens or the step budget),
    // budgeted and paged as 1 + drafts tokens; 0: off. Steps whose running set is larger than
    // speculative_max_batch (0: no limit) decode those sequences one token at a time instead,
    // where a verify step's extra tokens cost more than its accepted drafts save.
    int speculative_tokens = 0;
    int speculative_max_batch = 0;
    // Positions a sequence may reach (the engine's context; 0: no limit): a verify chunk's drafts
    // stay below it.
    int64_t max_positions = 0;
};

struct ScheduledChunk {
    Sequence* seq = nullptr;
    int64_t start = 0;  // == seq->n_computed when scheduled
    int64_t n_tokens = 0;
    bool want_logits = false;
    int draft_tokens = 0;  // a verify chunk: n_tokens 1 plus this many drafts the runner adds
};

struct StepPlan {
    std::vector<ScheduledChunk> chunks;
    int64_t n_prefill_tokens = 0;
    int64_t n_decode_tokens = 0;
    int64_t n_preempted = 0;
    bool empty() const { return chunks.empty(); }
};

class Scheduler {
public:
    Scheduler(SchedulerConfig cfg, KvLayout layout, PageAllocator& pages);
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    void add(std::unique_ptr<Sequence> seq);
    StepPlan schedule();
    // Marks the planned tokens as computed (call once the step is launched). With prefix caching,
    // also snapshots the state of sequences that reached a block boundary and offers completed
    // prompts to the cache; the snapshots' page copies go to the next step (take_page_copies).
    void commit(const StepPlan& plan);
    // A verify chunk's accepted draft at `position` was computed by the collected step: n_computed
    // moves past it (with prefix caching, a snapshot at a block boundary as commit takes). False and
    // nothing done when that is not the sequence's next position (it was preempted meanwhile).
    bool accept_computed(Sequence* seq, int64_t position);
    // Page copies the next launched step must do before it computes (ForwardBatch::page_copies).
    std::vector<PageCopy> take_page_copies() { return std::exchange(copies_, {}); }
    // After a step that was not launched took its copies: no snapshot can be trusted any more.
    void drop_snapshots();
    PrefixCache* prefix_cache() { return cache_.get(); }
    const PrefixCache* prefix_cache() const { return cache_.get(); }
    int64_t prefix_queried_tokens() const { return queried_tokens_; }
    int64_t prefix_hit_tokens() const { return hit_tokens_; }
    // Releases a sequence's pages and forgets it.
    void finish(Sequence* seq);
    // True when `seq` is still owned and is the sequence `seq_id` (a finished sequence's address
    // may have been reused): checks a pointer kept across steps (overlapped scheduling).
    bool alive(const Sequence* seq, int64_t seq_id) const;
    // Finishes every sequence of a request; returns them (already removed) for notification.
    std::vector<std::unique_ptr<Sequence>> remove_request(uint64_t request_id);
    std::vector<std::unique_ptr<Sequence>> remove_all();

    int64_t n_running() const { return int64_t(running_.size()); }
    int64_t n_waiting() const { return int64_t(waiting_.size()); }
    int64_t n_waiting_requests() const;
    int64_t n_running_requests() const;
    int64_t n_preemptions() const { return n_preemptions_; }
    bool has_work() const { return !running_.empty() || !waiting_.empty(); }
    const KvLayout& layout() const { return layout_; }

private:
    bool ensure_pages(Sequence* seq, int64_t n_tokens);
    // Prefix caching: restore the longest cached prefix into a sequence that holds no pages (a
    // miss, or no room for its state pages, leaves it as it was).
    void resume_from_cache(Sequence* seq, int64_t budget);
    void undo_resume(Sequence* seq);
    int64_t align_chunk(const Sequence* seq, int64_t n) const;
    void take_snapshot(Sequence* seq);
    // After n_computed moved: the snapshot at a block boundary and the prompt's offer to the cache.
    void after_computed(Sequence* seq);
    void offer_to_cache(Sequence* seq);
    bool held(const Sequence* seq) const;
    void preempt(Sequence* seq);
    std::unique_ptr<Sequence> take(Sequence* seq);

    SchedulerConfig cfg_;
    KvLayout layout_;
    PageAllocator& pages_;
    std::unordered_map<Sequence*, std::unique_ptr<Sequence>> owned_;
    std::vector<Sequence*> running_;  // admission order: preemption victims come from the back
    std::deque<Sequence*> waiting_;
    int64_t n_preemptions_ = 0;
    std::unique_ptr<PrefixCache> cache_;  // null: prefix caching off
    std::vector<PageCopy> copies_;
    int64_t block_ = 0;  // block boundaries prefill chunks end at (0: no alignment)
    int64_t queried_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace dsv4
