// Scheduler implementation (see scheduler.h for the policy).
#include "sched/scheduler.h"

#include <algorithm>
#include <unordered_set>

#include "core/check.h"

namespace dsv4 {

Scheduler::Scheduler(SchedulerConfig cfg, KvLayout layout, PageAllocator& pages)
    : cfg_(cfg), layout_(layout), pages_(pages) {
    DSV4_CHECK(cfg_.max_tokens_per_step >= 1 && cfg_.max_running >= 1);
    cfg_.max_prefill_chunk = std::max<int64_t>(1, cfg_.max_prefill_chunk);
    const int64_t block = cfg_.prefix_block_tokens > 0 ? cfg_.prefix_block_tokens : prefix_block_tokens(layout_);
    if (cfg_.prefix_cache) cache_ = std::make_unique<PrefixCache>(layout_, block, pages_);
    if (cfg_.prefix_cache || cfg_.align_prefill_chunks) block_ = block;
}

Scheduler::~Scheduler() {
    // Sequences first: they may hand their snapshots to the cache, which then lets go of everything.
    for (auto& [p, s] : owned_) {
        pages_.release(s->pages);
        pages_.release(s->snapshot);
    }
    owned_.clear();
    cache_.reset();
}

// Choice > 0 of a request waits while choice 0 is alive and has not offered the shared prompt to
// the cache, then resumes from it instead of computing the prompt again.
bool Scheduler::held(const Sequence* seq) const {
    if (!seq->hold_for_prefix) return false;
    auto leader = [&](const Sequence* s) { return s->request_id == seq->request_id && s->choice == 0; };
    if (auto it = std::find_if(running_.begin(), running_.end(), leader); it != running_.end())
        return !(*it)->prompt_cached;
    if (auto it = std::find_if(waiting_.begin(), waiting_.end(), leader); it != waiting_.end())
        return !(*it)->prompt_cached;
    return false;  // choice 0 is gone
}

// A prefill chunk that crosses a block boundary ends at the last one it crosses, so the state there
// can be snapshotted; one more step for the prompt's tail, the price of a reusable prefix.
int64_t Scheduler::align_chunk(const Sequence* seq, int64_t n) const {
    if (block_ == 0) return n;
    const int64_t B = block_, end = seq->n_computed + n;
    const int64_t b = end / B * B;
    return b > seq->n_computed && b < end && b > seq->snapshot_tokens ? b - seq->n_computed : n;
}

void Scheduler::resume_from_cache(Sequence* seq, int64_t budget) {
    const int64_t n0 = std::min({seq->n_pending(), budget, cfg_.max_prefill_chunk});
    const int64_t need0 = layout_.pages_for_tokens(n0);
    // Room first (a hit needs no more pages than a miss): a lookup's snapshot must not be dropped
    // while its copy is queued.
    if (pages_.n_free() < need0) cache_->evict_until_free(need0);
    PrefixCache::Hit hit = cache_->lookup(seq->tokens, seq->cache_salt, int64_t(seq->tokens.size()) - 1);
    queried_tokens_ += int64_t(seq->tokens.size());
    if (hit.tokens == 0) return;
    std::vector<int32_t> state;
    if (!pages_.allocate(layout_.n_state_pages, state)) {
        pages_.release(hit.token_pages);
        return;
    }
    for (size_t i = 0; i < state.size(); ++i) copies_.push_back({hit.snapshot[i], state[i]});
    seq->pages = std::move(state);
    seq->pages.insert(seq->pages.end(), hit.token_pages.begin(), hit.token_pages.end());
    seq->n_computed = hit.tokens;
    seq->snapshot_tokens = hit.tokens;
    if (!seq->admitted_once) seq->cached_tokens = hit.tokens;
    hit_tokens_ += hit.tokens;
}

// Admission failed after a cache hit: give the pages back (the queued copies into them are
// harmless: the pages are free and whoever gets them next writes them later in stream order).
void Scheduler::undo_resume(Sequence* seq) {
    if (seq->n_computed > 0) hit_tokens_ -= seq->n_computed;
    pages_.release(seq->pages);
    seq->n_computed = 0;
    seq->snapshot_tokens = 0;
    if (!seq->admitted_once) seq->cached_tokens = 0;
}

void Scheduler::take_snapshot(Sequence* seq) {
    const int64_t ns = layout_.n_state_pages;
    // Live sequences keep room to grow by a page each; the cache gives way, never they.
    const int64_t want = ns + ns + int64_t(running_.size());
    if (pages_.n_free() < want) cache_->evict_until_free(want);
    std::vector<int32_t> snap;
    if (pages_.n_free() < want || !pages_.allocate(ns, snap)) return;
    for (int64_t i = 0; i < ns; ++i) copies_.push_back({seq->pages[size_t(i)], snap[size_t(i)]});
    pages_.release(seq->snapshot);
    seq->snapshot = std::move(snap);
    seq->snapshot_tokens = seq->n_computed;
}

// The sequence's blocks up to its snapshot go to the cache (the snapshot with them).
void Scheduler::offer_to_cache(Sequence* seq) {
    if (!cache_ || seq->snapshot.empty()) return;
    const auto token_pages = std::span<const int32_t>(seq->pages).subspan(size_t(layout_.n_state_pages));
    cache_->insert(seq->tokens, seq->cache_salt, token_pages, seq->snapshot_tokens, seq->snapshot);
}

void Scheduler::drop_snapshots() {
    copies_.clear();
    for (auto& [p, s] : owned_) pages_.release(s->snapshot);
    if (cache_) cache_->flush();
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
    Sequence* s = seq.get();
    owned_[s] = std::move(seq);
    waiting_.push_back(s);
}

bool Scheduler::ensure_pages(Sequence* seq, int64_t n_tokens) {
    const int64_t need = layout_.pages_for_tokens(n_tokens) - int64_t(seq->pages.size());
    return need <= 0 || pages_.allocate(need, seq->pages);
}

void Scheduler::preempt(Sequence* seq) {
    offer_to_cache(seq);  // its recompute may then resume from there
    pages_.release(seq->pages);
    pages_.release(seq->snapshot);
    seq->snapshot_tokens = 0;
    seq->n_computed = 0;
    ++seq->n_preemptions;
    ++n_preemptions_;
    running_.erase(std::find(running_.begin(), running_.end(), seq));
    waiting_.push_front(seq);
}

StepPlan Scheduler::schedule() {
    StepPlan plan;
    int64_t budget = cfg_.max_tokens_per_step;
    std::unordered_set<Sequence*> planned;

    // Finds pages for `seq` by preempting unplanned running sequences from the back; preempts
    // `seq` itself when nothing else can give way. Returns false if `seq` was preempted.
    auto make_room = [&](Sequence* seq, int64_t n_tokens) {
        while (!ensure_pages(seq, n_tokens)) {
            // Cached blocks give way before any live sequence does.
            const int64_t need = layout_.pages_for_tokens(n_tokens) - int64_t(seq->pages.size());
            if (cache_ && cache_->evict_until_free(need) > 0) continue;
            Sequence* victim = nullptr;
            for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
                if (*it != seq && !planned.count(*it)) {
                    victim = *it;
                    break;
                }
            }
            if (!victim) {
                preempt(seq);
                ++plan.n_preempted;
                return false;
            }
            preempt(victim);
            ++plan.n_preempted;
        }
        return true;
    };
    auto add_chunk = [&](Sequence* seq, int64_t n) {
        const bool last = seq->n_computed + n == int64_t(seq->tokens.size());
        plan.chunks.push_back({seq, seq->n_computed, n, last});
        planned.insert(seq);
        budget -= n;
        (n == 1 && seq->n_computed > 0 && last ? plan.n_decode_tokens : plan.n_prefill_tokens) += n;
    };

    // 1. Decodes of running sequences, oldest first; verify chunks for speculating ones.
    const bool speculate = cfg_.speculative_tokens > 0 &&
                           (cfg_.speculative_max_batch <= 0 || int64_t(running_.size()) <= cfg_.speculative_max_batch);
    std::vector<Sequence*> snapshot = running_;
    for (Sequence* seq : snapshot) {
        if (budget <= 0) break;
        if (std::find(running_.begin(), running_.end(), seq) == running_.end()) continue;
        if (seq->await_output || seq->n_pending() != 1 || seq->n_computed == 0) continue;
        // Drafts the step can still use (every accepted one and the target's own token are output,
        // and the chunk's last position stays inside the context), on pages that are free: a
        // verify chunk never preempts anyone for its drafts.
        const int64_t size = int64_t(seq->tokens.size());
        int64_t drafts = 0;
        if (speculate && seq->speculate) {
            drafts =
                std::min<int64_t>({cfg_.speculative_tokens, budget - 1, seq->params.max_tokens - seq->n_output() - 1});
            if (cfg_.max_positions > 0) drafts = std::min(drafts, cfg_.max_positions - size);
            drafts = std::max<int64_t>(drafts, 0);
            if (drafts > 0 && !ensure_pages(seq, size + drafts)) drafts = 0;
        }
        if (!make_room(seq, size + drafts)) continue;
        add_chunk(seq, 1);
        plan.chunks.back().draft_tokens = int(drafts);
        budget -= drafts;
        plan.n_decode_tokens += drafts;
    }
    // Prefill room: the rest of the budget, capped when the step decodes (max_prefill_tokens_with_decode).
    if (plan.n_decode_tokens > 0 && cfg_.max_prefill_tokens_with_decode > 0)
        budget = std::min(budget, cfg_.max_prefill_tokens_with_decode);
    // 2. Unfinished prefills of running sequences.
    snapshot = running_;
    for (Sequence* seq : snapshot) {
        if (budget <= 0) break;
        if (planned.count(seq) || seq->await_output) continue;
        if (std::find(running_.begin(), running_.end(), seq) == running_.end()) continue;
        const int64_t n = align_chunk(seq, std::min({seq->n_pending(), budget, cfg_.max_prefill_chunk}));
        if (n <= 0) continue;
        if (make_room(seq, seq->n_computed + n)) add_chunk(seq, n);
    }
    // 3. Admission from the waiting queue, FIFO; stops at the first that does not fit so that
    //    a large request is not starved by smaller ones behind it.
    for (auto it = waiting_.begin();
         it != waiting_.end() && budget > 0 && int64_t(running_.size()) < cfg_.max_running;) {
        Sequence* seq = *it;
        if (seq->await_output) break;  // preempted with a step in flight: admitted once it is collected
        if (held(seq)) {
            ++it;
            continue;
        }
        if (cache_ && seq->pages.empty()) resume_from_cache(seq, budget);
        const int64_t n = align_chunk(seq, std::min({seq->n_pending(), budget, cfg_.max_prefill_chunk}));
        if (!ensure_pages(seq, seq->n_computed + n)) {
            const int64_t need = layout_.pages_for_tokens(seq->n_computed + n) - int64_t(seq->pages.size());
            if (!cache_ || (cache_->evict_until_free(need), !ensure_pages(seq, seq->n_computed + n))) {
                if (cache_) undo_resume(seq);
                break;
            }
        }
        it = waiting_.erase(it);
        running_.push_back(seq);
        seq->admitted_once = true;
        add_chunk(seq, n);
    }
    return plan;
}

void Scheduler::commit(const StepPlan& plan) {
    for (const auto& c : plan.chunks) {
        DSV4_CHECK(c.seq->n_computed == c.start, "seq {} computed {} planned start {}", c.seq->seq_id,
                   c.seq->n_computed, c.start);
        c.seq->n_computed += c.n_tokens;
    }
    for (const auto& c : plan.chunks) after_computed(c.seq);
}

void Scheduler::after_computed(Sequence* seq) {
    if (!cache_) return;
    if (seq->n_computed % cache_->block_tokens() == 0 && seq->n_computed > seq->snapshot_tokens) take_snapshot(seq);
    if (!seq->prompt_cached && seq->n_computed >= seq->n_prompt) {
        offer_to_cache(seq);
        seq->prompt_cached = true;
    }
}

bool Scheduler::accept_computed(Sequence* seq, int64_t position) {
    if (seq->n_computed != position) return false;  // preempted meanwhile: n_computed went back to 0
    ++seq->n_computed;
    after_computed(seq);
    return true;
}

std::unique_ptr<Sequence> Scheduler::take(Sequence* seq) {
    offer_to_cache(seq);
    pages_.release(seq->pages);
    pages_.release(seq->snapshot);
    if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
    if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
    auto node = owned_.find(seq);
    DSV4_CHECK(node != owned_.end(), "unknown sequence");
    auto owned = std::move(node->second);
    owned_.erase(node);
    return owned;
}

void Scheduler::finish(Sequence* seq) { take(seq); }

bool Scheduler::alive(const Sequence* seq, int64_t seq_id) const {
    auto it = owned_.find(const_cast<Sequence*>(seq));
    return it != owned_.end() && it->second->seq_id == seq_id;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::remove_request(uint64_t request_id) {
    std::vector<Sequence*> hits;
    for (auto& [p, s] : owned_)
        if (s->request_id == request_id) hits.push_back(p);
    std::vector<std::unique_ptr<Sequence>> out;
    for (Sequence* s : hits) out.push_back(take(s));
    return out;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::remove_all() {
    std::vector<Sequence*> all;
    for (auto& [p, s] : owned_) all.push_back(p);
    std::vector<std::unique_ptr<Sequence>> out;
    for (Sequence* s : all) out.push_back(take(s));
    return out;
}

int64_t Scheduler::n_waiting_requests() const {
    std::unordered_set<uint64_t> ids;
    for (Sequence* s : waiting_) ids.insert(s->request_id);
    for (Sequence* s : running_) ids.erase(s->request_id);
    return int64_t(ids.size());
}

int64_t Scheduler::n_running_requests() const {
    std::unordered_set<uint64_t> ids;
    for (Sequence* s : running_) ids.insert(s->request_id);
    return int64_t(ids.size());
}

}  // namespace dsv4
