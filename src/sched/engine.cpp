// Engine implementation (see engine.h).
#include "sched/engine.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace dsv4 {
namespace {

Status refused_after(const Status& fatal) {
    return error(StatusCode::kUnavailable, "the engine stopped after a device error (the server must be restarted): {}",
                 fatal.message());
}

}  // namespace

Engine::Engine(std::unique_ptr<ModelRunner> runner, EngineConfig cfg)
    : runner_(std::move(runner)), cfg_(cfg), core_(*runner_, cfg_, stats_) {
    core_.set_fatal_hook([this] { note_fatal(); });
}

Engine::~Engine() { stop(); }

void Engine::start() {
    std::lock_guard lk(mu_);
    if (thread_.joinable() || stopping_) return;
    thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
    {
        std::lock_guard lk(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    // The thread is gone (or never ran): this thread owns the core now.
    std::vector<GenRequest> left;
    {
        std::lock_guard lk(mu_);
        left.swap(inbox_);
    }
    for (auto& r : left) {
        for (int c = 0; c < r.n; ++c) {
            SeqEvent ev;
            ev.choice = c;
            ev.finish = FinishReason::kError;
            ev.error = "the server is shutting down";
            if (r.sink) r.sink->on_event(std::move(ev));
        }
    }
    core_.abort_all("the server is shutting down");
}

void Engine::flush_prefix_cache() {
    {
        std::lock_guard lk(mu_);
        flush_prefix_ = true;
    }
    cv_.notify_one();
}

uint64_t Engine::next_request_id() {
    std::lock_guard lk(mu_);
    return next_id_++;
}

Status Engine::fatal_error() const {
    std::lock_guard lk(mu_);
    return fatal_;
}

void Engine::on_fatal(std::function<void(const Status&)> fn) {
    Status already;
    {
        std::lock_guard lk(mu_);
        on_fatal_ = fn;
        already = fatal_;
    }
    if (fn && !already.is_ok()) fn(already);
}

void Engine::note_fatal() {
    std::function<void(const Status&)> fn;
    Status s = core_.fatal();
    {
        std::lock_guard lk(mu_);
        if (failed_.load()) return;
        fatal_ = s;
        failed_ = true;
        fn = on_fatal_;
    }
    if (fn) fn(s);  // the owner logs it (dsv4 serve: one line, then exit)
}

Status Engine::submit(GenRequest req) {
    // A failed engine answers 503 before anything else: the request is not at fault.
    if (failed_.load()) return refused_after(fatal_error());
    DSV4_RETURN_IF_ERROR(core_.validate(req));
    {
        std::lock_guard lk(mu_);
        if (stopping_) return error(StatusCode::kUnavailable, "the server is shutting down");
        if (failed_.load()) return refused_after(fatal_);
        const int64_t queued = int64_t(inbox_.size()) + stats_.waiting_requests.load();
        if (queued >= cfg_.max_queued) {
            ++stats_.requests_rejected_total;
            return error(StatusCode::kResourceExhausted,
                         "the server is busy: {} requests are already waiting; retry later", queued);
        }
        // Idle until now: the stall clock starts with this request, not with the last step.
        if (inbox_.empty() && stats_.running_requests.load() + stats_.waiting_requests.load() == 0)
            stats_.progress_us = steady_now_us();
        inbox_.push_back(std::move(req));
    }
    cv_.notify_one();
    return Status::ok();
}

void Engine::abort(uint64_t request_id) {
    {
        std::lock_guard lk(mu_);
        aborts_.push_back(request_id);
    }
    cv_.notify_one();
}

void Engine::loop() {
    std::vector<GenRequest> inbox;
    std::vector<uint64_t> aborts;
    bool flush = false;
    for (;;) {
        {
            std::unique_lock lk(mu_);
            cv_.wait(lk, [&] {
                return stopping_ || !inbox_.empty() || !aborts_.empty() || flush_prefix_ || core_.has_work();
            });
            if (stopping_) return;
            inbox.swap(inbox_);
            aborts.swap(aborts_);
            flush = std::exchange(flush_prefix_, false);
            // Count the new arrivals as waiting right away so submit() sees a full queue.
            stats_.waiting_requests += int64_t(inbox.size());
        }
        for (auto& r : inbox) {
            auto sink = r.sink;
            const int n = r.n;
            if (Status s = core_.add(std::move(r)); !s.is_ok()) {
                for (int c = 0; c < n; ++c) {
                    SeqEvent ev;
                    ev.choice = c;
                    ev.finish = FinishReason::kError;
                    ev.error = s.message();
                    if (sink) sink->on_event(std::move(ev));
                }
            }
        }
        inbox.clear();
        // Aborts after adds: an abort that raced with its own submit still finds the request.
        for (uint64_t id : aborts) core_.abort(id);
        aborts.clear();
        if (flush) core_.flush_prefix_cache();
        stats_.progress_us = steady_now_us();
        if (core_.has_work()) {
            // A step that neither launched nor collected anything should not happen (admission
            // guarantees progress); never spin on it.
            const StepStats st = core_.step();
            if (!core_.fatal().is_ok())
                note_fatal();
            else if (st.n_seqs == 0 && st.n_collected == 0)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else {
            core_.publish_stats();
        }
        stats_.progress_us = steady_now_us();
    }
}

}  // namespace dsv4
