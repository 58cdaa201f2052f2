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
    pages_.release(seq->pages);
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

    // 1. Decodes of running sequences, oldest first.
    std::vector<Sequence*> snapshot = running_;
    for (Sequence* seq : snapshot) {
        if (budget <= 0) break;
        if (std::find(running_.begin(), running_.end(), seq) == running_.end()) continue;
        if (seq->await_output || seq->n_pending() != 1 || seq->n_computed == 0) continue;
        if (make_room(seq, int64_t(seq->tokens.size()))) add_chunk(seq, 1);
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
        const int64_t n = std::min({seq->n_pending(), budget, cfg_.max_prefill_chunk});
        if (n <= 0) continue;
        if (make_room(seq, seq->n_computed + n)) add_chunk(seq, n);
    }
    // 3. Admission from the waiting queue, FIFO; stops at the first that does not fit so that
    //    a large request is not starved by smaller ones behind it.
    while (budget > 0 && !waiting_.empty() && int64_t(running_.size()) < cfg_.max_running) {
        Sequence* seq = waiting_.front();
        if (seq->await_output) break;  // preempted with a step in flight: admitted once it is collected
        const int64_t n = std::min({seq->n_pending(), budget, cfg_.max_prefill_chunk});
        if (!ensure_pages(seq, seq->n_computed + n)) break;
        waiting_.pop_front();
        running_.push_back(seq);
        seq->admitted_once = true;
        add_chunk(seq, n);
    }
    return plan;
}

void Scheduler::commit(const StepPlan& plan) {
    for (const auto& c : plan.chunks) {
        DSV4_CHECK(c.seq->n_computed == c.start, "seq {} computed {} planned start {}",
                   c.seq->seq_id, c.seq->n_computed, c.start);
        c.seq->n_computed += c.n_tokens;
    }
}

std::unique_ptr<Sequence> Scheduler::take(Sequence* seq) {
    pages_.release(seq->pages);
    if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end())
        running_.erase(it);
    if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end())
        waiting_.erase(it);
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
