// EngineCore implementation (see engine_core.h).
#include "sched/engine_core.h"

#include <algorithm>
#include <random>
#include <unordered_map>

#include <fmt/format.h>

#include "core/check.h"
#include "core/philox.h"
#include "sched/device_sample.h"

namespace dsv4 {
namespace {

int64_t us_since(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}
double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

// The runner verifies at most its own number of drafts, inside the engine's context.
SchedulerConfig within_runner(SchedulerConfig s, const ModelRunner& r, int64_t max_context) {
    s.speculative_tokens = std::clamp(s.speculative_tokens, 0, r.max_draft_tokens());
    s.max_positions = max_context;
    return s;
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kNone:
            return "none";
        case FinishReason::kStop:
            return "stop";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kAbort:
            return "abort";
        case FinishReason::kError:
            return "error";
    }
    return "error";
}

EngineCore::EngineCore(ModelRunner& runner, EngineConfig cfg, EngineStats& stats)
    : runner_(runner),
      cfg_(cfg),
      stats_(stats),
      // Never more than one sequence can hold: the whole pool.
      // Never more than one sequence can hold: the whole pool, and the runner's own position limit.
      max_context_(std::min({cfg.max_context > 0 ? cfg.max_context : runner.config().max_position_embeddings,
                             (runner.n_pages() - runner.kv_layout().n_state_pages) * runner.kv_layout().page_tokens,
                             runner.max_positions()})),
      pages_(runner.n_pages(), cfg.page_shuffle_seed),
      sched_(within_runner(cfg.sched, runner, max_context_), runner.kv_layout(), pages_),
      seed_base_(cfg.default_seed ? cfg.default_seed
                                  : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()),
      overlap_(cfg.overlap == EngineConfig::Overlap::kAlways ||
               (cfg.overlap == EngineConfig::Overlap::kAuto && runner.launch_is_async())) {
    cfg_.sched = within_runner(cfg_.sched, runner, max_context_);
    publish_stats();
}

Status EngineCore::validate(const GenRequest& req) const {
    const int64_t vocab = runner_.config().vocab_size;
    if (req.prompt.empty()) return invalid_argument("the prompt is empty");
    for (size_t i = 0; i < req.prompt.size(); ++i) {
        const int32_t t = req.prompt[i];
        if (t < 0 || t >= vocab)
            return invalid_argument("token id {} at prompt position {} is outside the vocabulary [0, {})", t, i, vocab);
    }
    for (int32_t t : req.params.stop_token_ids)
        if (t < 0 || t >= vocab) return invalid_argument("stop token id {} is outside the vocabulary", t);
    for (const auto& [t, b] : req.params.logit_bias)
        if (t < 0 || t >= vocab)
            return invalid_argument("logit_bias token id {} is outside the vocabulary [0, {})", t, vocab);
    const int64_t n_prompt = int64_t(req.prompt.size());
    if (n_prompt >= max_context_)
        return error(StatusCode::kOutOfRange,
                     "the prompt has {} tokens; this model's context is {} tokens, and at least "
                     "one must be left for the output",
                     n_prompt, max_context_);
    if (req.params.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
    if (n_prompt + req.params.max_tokens > max_context_)
        return error(StatusCode::kOutOfRange, "prompt ({} tokens) + max_tokens ({}) exceeds the context of {} tokens",
                     n_prompt, req.params.max_tokens, max_context_);
    // One sequence must always fit the whole pool, otherwise preemption could not make room.
    const int64_t pages = runner_.kv_layout().pages_for_tokens(n_prompt + req.params.max_tokens);
    if (pages > runner_.n_pages())
        return error(StatusCode::kOutOfRange, "prompt + max_tokens = {} tokens needs {} cache pages; the pool has {}",
                     n_prompt + req.params.max_tokens, pages, runner_.n_pages());
    if (req.n < 1) return invalid_argument("n must be at least 1");
    return Status::ok();
}

Status EngineCore::add(GenRequest req) {
    if (!fatal_.is_ok())
        return error(StatusCode::kUnavailable,
                     "the engine stopped after a device error (the server must be restarted): {}", fatal_.message());
    DSV4_RETURN_IF_ERROR(validate(req));
    const uint64_t seed = req.params.seed ? *req.params.seed : seed_base_ + n_seeded_++;
    for (int c = 0; c < req.n; ++c) {
        auto seq = std::make_unique<Sequence>();
        seq->seq_id = next_seq_id_++;
        seq->request_id = req.id;
        seq->choice = c;
        seq->tokens = req.prompt;
        seq->n_prompt = int64_t(req.prompt.size());
        seq->params = req.params;
        seq->seed = seed;
        seq->penalties.reset(req.prompt, {});
        seq->sink = req.sink;
        seq->arrival = req.arrival;
        seq->cache_salt = req.cache_salt;
        // Speculation keeps the target's distribution but not per-token logprobs of the verify rows
        // through the host path yet, and a constraint masks each row after the previous token.
        seq->speculate = cfg_.sched.speculative_tokens > 0 && req.params.logprobs < 0 && !req.constraint;
        if (req.constraint) {
            seq->constraint = req.constraint->clone();
            seq->constraint_after = req.constraint_after;
            seq->constraint_active = req.constraint_after < 0;
        }
        // The other choices resume from choice 0's cached prompt instead of computing it again.
        if (const PrefixCache* pc = sched_.prefix_cache())
            seq->hold_for_prefix = c > 0 && int64_t(req.prompt.size()) > pc->block_tokens();
        sched_.add(std::move(seq));
    }
    stats_.prompt_tokens_total += int64_t(req.prompt.size()) * req.n;
    return Status::ok();
}

void EngineCore::finish(Sequence* seq, FinishReason why, SeqEvent ev) {
    ev.choice = seq->choice;
    ev.finish = why;
    ev.prompt_tokens = seq->n_prompt;
    ev.cached_tokens = seq->cached_tokens;
    ev.completion_tokens = ev.completion_tokens ? ev.completion_tokens : seq->n_resolved_output();
    const auto now = Clock::now();
    if (why == FinishReason::kAbort) {
        ++stats_.requests_aborted_total;
    } else if (seq->choice == 0) {
        ++stats_.requests_finished_total;
        if (ev.completion_tokens > 1)
            stats_.tpot_s.observe(seconds_between(seq->first_token, now) / double(ev.completion_tokens - 1));
    }
    auto sink = seq->sink;
    sched_.finish(seq);  // seq is gone after this line
    if (sink) sink->on_event(std::move(ev));
}

void EngineCore::fail(Sequence* seq, const std::string& why) {
    SeqEvent ev;
    ev.error = why;
    finish(seq, FinishReason::kError, std::move(ev));
}

void EngineCore::abort(uint64_t request_id) {
    for (auto& seq : sched_.remove_request(request_id)) {
        SeqEvent ev;
        ev.choice = seq->choice;
        ev.finish = FinishReason::kAbort;
        ev.prompt_tokens = seq->n_prompt;
        ev.completion_tokens = seq->n_resolved_output();
        if (seq->choice == 0) ++stats_.requests_aborted_total;
        if (seq->sink) seq->sink->on_event(std::move(ev));
    }
}

void EngineCore::flush_prefix_cache() {
    if (PrefixCache* pc = sched_.prefix_cache()) pc->flush();
    publish_stats();
}

void EngineCore::abort_all(const std::string& why) {
    drain_inflight();
    for (auto& seq : sched_.remove_all()) {
        SeqEvent ev;
        ev.choice = seq->choice;
        ev.finish = FinishReason::kError;
        ev.error = why;
        ev.prompt_tokens = seq->n_prompt;
        ev.completion_tokens = seq->n_resolved_output();
        if (seq->sink) seq->sink->on_event(std::move(ev));
    }
}

SampleContext EngineCore::sample_context(const Sequence* seq, int64_t position) const {
    return SampleContext{
        .seed = seq->seed,
        .stream = uint64_t(seq->choice),
        .position = position,
        .suppress_stops = position < seq->params.min_tokens,
        .eos_token = int32_t(runner_.config().eos_token_id),
    };
}

// Plain-greedy rows are sampled by the runner when it can (an argmax, no logits copy); every other
// row by the runner's full sampler when it has one (kFull: penalties, masks, the seeded draw and
// logprobs where the logits are), else by the host sampler (kNone).
DeviceSample EngineCore::row_mode(const Sequence* seq, const SampleContext& ctx) const {
    if (!cfg_.device_sampling || (seq->constraint && seq->constraint_active)) return DeviceSample::kNone;
    const SamplingParams& p = seq->params;
    if (runner_.supports_device_sample(DeviceSample::kGreedy) && sample_is_plain_argmax(p, ctx))
        return DeviceSample::kGreedy;
    if (runner_.supports_device_sample(DeviceSample::kFull) && p.logprobs <= kMaxDeviceTopLogprobs)
        return DeviceSample::kFull;
    return DeviceSample::kNone;
}

void EngineCore::launch_plan(StepPlan plan, StepStats& st) {
    const auto t0 = Clock::now();
    st.n_seqs = int64_t(plan.chunks.size());
    st.n_prefill_tokens = plan.n_prefill_tokens;
    st.n_decode_tokens = plan.n_decode_tokens;
    InFlight f;
    ForwardBatch batch;
    batch.seqs.reserve(plan.chunks.size());
    std::vector<std::vector<PenaltyToken>> pen(plan.chunks.size());  // kFull rows' token lists
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
        const auto& c = plan.chunks[i];
        DeviceSample mode = DeviceSample::kNone;
        DeviceSampleParams dp;
        if (c.want_logits) {
            const SampleContext ctx = sample_context(c.seq, c.seq->n_output());
            mode = row_mode(c.seq, ctx);
            // A verify chunk's k + 1 rows on the device: greedy picks (a draft is accepted iff it is the
            // pick; plain argmax at the first row stays so at the later ones, min_tokens only unmasks),
            // or kFull rows sampled as one-token rows (sample_token_with_draft: a draft is kept iff it is
            // the row's own draw) when every row samples with the same lists: no penalties (row j's
            // counts would include drafts 0..j-1), no logprobs, the same stop masking at the first and
            // the last row. Else logits for the host.
            if (c.draft_tokens > 0 && mode == DeviceSample::kFull) {
                const SamplingParams& p = c.seq->params;
                const bool same_rows =
                    !p.has_penalties() && p.logprobs < 0 &&
                    sample_context(c.seq, c.seq->n_output() + c.draft_tokens).suppress_stops == ctx.suppress_stops;
                if (!same_rows) mode = DeviceSample::kNone;
            }
            if (mode == DeviceSample::kFull) {
                pen[i] = penalty_tokens(c.seq->params, c.seq->penalties, ctx);
                dp = device_sample_params(c.seq->params, ctx, pen[i]);
            }
            f.n_dev_rows += mode != DeviceSample::kNone ? 1 + c.draft_tokens : 0;
            f.n_host_rows += mode == DeviceSample::kNone ? 1 + c.draft_tokens : 0;
        }
        f.seq_id.push_back(c.seq->seq_id);
        f.mode.push_back(mode);
        f.drafts.push_back(c.draft_tokens);
        batch.seqs.push_back(SeqChunk{
            .seq_id = c.seq->seq_id,
            .tokens = std::span<const int32_t>(c.seq->tokens).subspan(size_t(c.start), size_t(c.n_tokens)),
            .start_pos = c.start,
            .want_logits = c.want_logits,
            .page_table = c.seq->pages,
            .sample = mode,
            .params = dp,
            .mtp = c.seq->speculate,
            .draft_tokens = c.draft_tokens,
        });
    }
    batch.page_copies = sched_.take_page_copies();
    st.schedule_us += us_since(t0);
    const auto t1 = Clock::now();
    const Status ls = runner_.launch(batch);
    st.launch_us += us_since(t1);
    if (!ls.is_ok()) {
        // Nothing was queued: fail exactly the sequences of this step; the page copies were not
        // done either, so no snapshot can be trusted.
        sched_.drop_snapshots();
        const bool fatal = mark_fatal(ls);
        for (const auto& c : plan.chunks) fail(c.seq, "model step failed: " + ls.message());
        if (fatal) on_fatal_error(ls);
        return;
    }
    sched_.commit(plan);
    // Each sampled row's token is pending until collected. A device-sampled row that may go on
    // can be decoded by the next step before that (the runner fills the token in); the others wait.
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
        Sequence* seq = plan.chunks[i].seq;
        if (!plan.chunks[i].want_logits) {
            f.out_at.push_back(-1);
            continue;
        }
        f.out_at.push_back(int64_t(seq->tokens.size()));
        seq->tokens.push_back(kPendingToken);
        const bool may_finish =
            seq->n_output() >= seq->params.max_tokens || int64_t(seq->tokens.size()) >= max_context_;
        // A constraint waiting for its start token: the next row's mode depends on this token.
        const bool may_constrain = seq->constraint && !seq->constraint_active;
        // A verify chunk's next position depends on how many drafts the host accepts.
        seq->await_output = f.mode[i] == DeviceSample::kNone || f.drafts[i] > 0 || may_finish || may_constrain;
    }
    ++stats_.steps_total;
    stats_.overlapped_steps_total += !inflight_.empty();
    stats_.step_prefill_tokens_total += st.n_prefill_tokens;
    stats_.step_decode_tokens_total += st.n_decode_tokens;
    stats_.last_step_seqs = st.n_seqs;
    stats_.last_step_prefill_tokens = st.n_prefill_tokens;
    stats_.last_step_decode_tokens = st.n_decode_tokens;
    f.plan = std::move(plan);
    inflight_.push_back(std::move(f));
}

bool EngineCore::emit(Sequence* seq, int64_t at, SampleResult res) {
    const int32_t eos = int32_t(runner_.config().eos_token_id);
    const int64_t pos = at - seq->n_prompt;  // index of this token in the output
    bool constraint_done = false;
    if (seq->constraint && seq->constraint_active) {
        if (!seq->constraint->advance(res.token)) {
            fail(seq, fmt::format("constrained decoding: token {} is outside the allowed set", res.token));
            return false;
        }
        constraint_done = seq->constraint->finished() || (res.token == eos && seq->constraint->complete());
    } else if (seq->constraint && res.token == seq->constraint_after) {
        seq->constraint_active = true;
    }
    const auto now = Clock::now();
    if (pos == 0) {
        seq->first_token = now;
        if (seq->choice == 0) stats_.ttft_s.observe(seconds_between(seq->arrival, now));
    }
    if (at == int64_t(seq->tokens.size()))
        seq->tokens.push_back(res.token);
    else
        seq->tokens[size_t(at)] = res.token;
    // A later step's row still in flight (overlap) keeps the wait its launch set: a verify chunk's
    // or a host row's next token is not known before that step is collected.
    if (at + 1 == int64_t(seq->tokens.size())) seq->await_output = false;
    seq->penalties.add_output(res.token);
    ++stats_.generated_tokens_total;

    SeqEvent ev;
    ev.choice = seq->choice;
    ev.prompt_tokens = seq->n_prompt;
    ev.completion_tokens = pos + 1;
    ev.cached_tokens = seq->cached_tokens;
    const auto& stops = seq->params.stop_token_ids;
    const bool is_eos = res.token == eos && (!seq->params.ignore_eos || constraint_done);
    const bool is_stop_id = std::find(stops.begin(), stops.end(), res.token) != stops.end();
    if (is_eos || is_stop_id) {
        ev.stop_token = res.token;
        finish(seq, FinishReason::kStop, std::move(ev));
        return false;
    }
    ev.tokens.push_back(res.token);
    if (seq->params.logprobs >= 0) ev.logprobs.push_back(std::move(res));
    if (constraint_done) {  // the document is whole and nothing may follow: done, as on EOS
        finish(seq, FinishReason::kStop, std::move(ev));
        return false;
    }
    if (pos + 1 >= seq->params.max_tokens || at + 1 >= max_context_) {
        finish(seq, FinishReason::kLength, std::move(ev));
        return false;
    }
    if (seq->sink) seq->sink->on_event(std::move(ev));
    return true;
}

void EngineCore::collect_oldest(StepStats& st) {
    InFlight f = std::move(inflight_.front());
    inflight_.pop_front();
    StepOutput out;
    const auto t0 = Clock::now();
    Status fs = runner_.collect(out);
    st.wait_us += us_since(t0);
    ++st.n_collected;
    stats_.engine_wait_us_total += us_since(t0);
    if (fs.is_ok() && (int64_t(out.logits.size()) != f.n_host_rows || int64_t(out.tokens.size()) != f.n_dev_rows))
        fs = error(StatusCode::kInternal, "runner returned {} logit rows and {} sampled tokens for {} and {}",
                   out.logits.size(), out.tokens.size(), f.n_host_rows, f.n_dev_rows);
    for (int32_t t : out.tokens)
        if (fs.is_ok() && (t < 0 || t >= runner_.config().vocab_size))
            fs = error(StatusCode::kInternal, "runner sampled token id {} outside the vocabulary", t);
    {
        size_t v = 0;
        for (size_t i = 0; i < f.drafts.size() && fs.is_ok(); ++i) {
            if (f.drafts[i] == 0 || f.out_at[i] < 0) continue;
            if (v >= out.drafts.size() || int64_t(out.drafts[v].size()) != f.drafts[i])
                fs = error(StatusCode::kInternal, "runner returned no {} drafts for verify chunk {}", f.drafts[i], i);
            else
                for (int32_t t : out.drafts[v])
                    if (t < 0 || t >= runner_.config().vocab_size)
                        fs = error(StatusCode::kInternal, "runner drafted token id {} outside the vocabulary", t);
            ++v;
        }
        if (fs.is_ok() && v != out.drafts.size())
            fs = error(StatusCode::kInternal, "runner returned {} draft lists for {} verify chunks", out.drafts.size(),
                       v);
    }
    auto alive = [&](size_t i) { return sched_.alive(f.plan.chunks[i].seq, f.seq_id[i]); };
    if (!fs.is_ok()) {
        // The step's state is unknown now: fail exactly the sequences that were in it (and are left).
        const bool fatal = mark_fatal(fs);
        for (size_t i = 0; i < f.plan.chunks.size(); ++i)
            if (alive(i)) fail(f.plan.chunks[i].seq, "model step failed: " + fs.message());
        if (fatal) on_fatal_error(fs);
        return;
    }

    const auto t2 = Clock::now();
    const int32_t eos = int32_t(runner_.config().eos_token_id);
    size_t row = 0, dev_row = 0, verify = 0;
    for (size_t i = 0; i < f.plan.chunks.size(); ++i) {
        if (f.out_at[i] < 0) continue;
        const bool on_device = f.mode[i] != DeviceSample::kNone;
        const int k = f.drafts[i];
        const size_t r = on_device ? dev_row : row;  // rows of finished sequences are skipped too
        (on_device ? dev_row : row) += size_t(1 + k);
        const std::vector<int32_t>* drafts = k > 0 ? &out.drafts[verify++] : nullptr;
        if (!alive(i)) continue;
        Sequence* seq = f.plan.chunks[i].seq;
        const int64_t at = f.out_at[i];
        if (k > 0) {
            // Verify chunk: row j judges draft j (the token at at + j); the first rejected one is
            // replaced by the row's own token, and all drafts accepted earn row k's token too.
            ++stats_.spec_verify_chunks_total;
            stats_.spec_draft_tokens_total += k;
            for (int j = 0; j <= k; ++j) {
                const SampleContext ctx = sample_context(seq, at + j - seq->n_prompt);
                DraftVerdict v;
                if (on_device) {  // the runner's token for row j: draft j kept iff it is that token
                    v.sample.token = out.tokens[r + size_t(j)];
                    v.accepted = j < k && v.sample.token == (*drafts)[size_t(j)];
                    ++st.n_device_sampled;
                } else if (j < k)
                    v = sample_token_with_draft(out.logits[r + size_t(j)], seq->params, seq->penalties, ctx,
                                                (*drafts)[size_t(j)]);
                else
                    v.sample = sample_token(out.logits[r + size_t(j)], seq->params, seq->penalties, ctx);
                const bool accepted = v.accepted;
                stats_.spec_accepted_tokens_total += accepted;
                if (!emit(seq, at + j, std::move(v.sample)) || !accepted) break;  // finished (seq is gone) or rejected
                sched_.accept_computed(seq, at + j);  // the verify chunk ran the accepted draft there
            }
            continue;
        }
        SampleResult res;
        if (on_device) {
            // kGreedy rows asked for no logprobs; kFull rows carry them when asked.
            res.token = out.tokens[r];
            if (r < out.logprobs.size()) res.logprob = out.logprobs[r];
            if (r < out.top_logprobs.size())
                for (const auto& [t, lp] : out.top_logprobs[r]) res.top.push_back({t, lp});
            ++st.n_device_sampled;
        } else {
            if (seq->constraint && seq->constraint_active) seq->constraint->mask(out.logits[r], eos);
            res = sample_token(out.logits[r], seq->params, seq->penalties, sample_context(seq, at - seq->n_prompt));
        }
        emit(seq, at, std::move(res));
    }
    st.sample_us += us_since(t2);
}

// Before any sequence gets its error event: a client that sees the error and then asks /health
// must find the engine failed (the hook sets Engine::failed()), never a stale "ok".
bool EngineCore::mark_fatal(const Status& s) {
    if (s.code() != StatusCode::kDeviceLost || !fatal_.is_ok()) return false;
    fatal_ = s;
    stats_.engine_failed = 1;
    if (fatal_hook_) fatal_hook_();
    return true;
}

void EngineCore::on_fatal_error(const Status& s) {
    // A sticky device error poisons the context: no later step can run, so nothing may wait for
    // one. Steps still in flight are collected (a lost runner answers at once) and every sequence
    // left, running or queued, ends with an error now instead of hanging.
    abort_all(fmt::format("the server must be restarted after a device error: {}", s.message()));
}

void EngineCore::drain_inflight() {
    while (!inflight_.empty()) {
        StepOutput out;
        (void)runner_.collect(out);  // the sequences are being ended anyway
        inflight_.pop_front();
    }
}

StepStats EngineCore::step() {
    StepStats st;
    if (!fatal_.is_ok()) return st;
    const auto t0 = Clock::now();
    StepPlan plan = sched_.schedule();
    stats_.preemptions_total += plan.n_preempted;
    // A plan that preempted sequences is made again once the step in flight is collected: a
    // victim's recompute must not start from a token that is still pending.
    if (!plan.empty() && !inflight_.empty() && plan.n_preempted > 0) {
        // Abandoning a plan is harmless: its page allocations and admissions stand, nothing ran.
        collect_oldest(st);
        plan = sched_.schedule();
        stats_.preemptions_total += plan.n_preempted;
    }
    st.n_preempted = plan.n_preempted;
    st.schedule_us = us_since(t0);
    const bool launched = !plan.empty();
    if (launched) launch_plan(std::move(plan), st);
    // Overlap keeps the newest step in flight and takes in the one before it; otherwise (or when
    // nothing new could be launched) everything launched is collected now.
    while (!inflight_.empty() && (!overlap_ || !launched || inflight_.size() > 1)) collect_oldest(st);
    const int64_t total_us = us_since(t0);
    stats_.engine_busy_us_total += total_us - st.wait_us;
    stats_.last_step_forward_us = st.launch_us + st.wait_us;
    stats_.last_step_total_us = total_us;
    if (launched || st.n_collected > 0) stats_.step_s.observe(double(total_us) * 1e-6);
    publish_stats();
    return st;
}

void EngineCore::publish_stats() {
    if (const PrefixCache* pc = sched_.prefix_cache()) {
        stats_.prefix_cache_queried_tokens_total = sched_.prefix_queried_tokens();
        stats_.prefix_cache_hit_tokens_total = sched_.prefix_hit_tokens();
        stats_.prefix_cache_evicted_blocks_total = pc->evicted_blocks();
        stats_.prefix_cache_blocks = pc->n_blocks();
        stats_.prefix_cache_pages = pc->pages_held();
    }
    stats_.running_requests = sched_.n_running_requests();
    stats_.waiting_requests = sched_.n_waiting_requests();
    stats_.running_seqs = sched_.n_running();
    stats_.waiting_seqs = sched_.n_waiting();
    stats_.pages_total = pages_.n_total();
    stats_.pages_used = pages_.n_used();
    stats_.pages_free = pages_.n_free();
}

}  // namespace dsv4
