// /metrics: Prometheus text exposition (format 0.0.4) of engine and server state.
#include <fmt/format.h>

#include "server/app.h"

namespace dsv4 {
namespace {

void gauge(std::string& out, const char* name, const char* help, int64_t v, const char* type = "gauge") {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
    const auto s = h.snapshot();
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    for (size_t i = 0; i < s.bounds.size(); ++i)
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, s.bounds[i], s.counts[i]);
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, s.counts.back(), name, s.sum,
                       name, s.count);
}

}  // namespace

std::string App::metrics_text() const {
    const EngineStats& e = engine_.stats();
    std::string o;
    gauge(o, "dsv4_requests_running", "Requests with a sequence in the running batch", e.running_requests);
    gauge(o, "dsv4_requests_waiting", "Requests waiting for admission", e.waiting_requests);
    gauge(o, "dsv4_sequences_running", "Sequences in the running batch", e.running_seqs);
    gauge(o, "dsv4_sequences_waiting", "Sequences waiting (new or preempted)", e.waiting_seqs);
    gauge(o, "dsv4_cache_pages_total", "KV/state cache pages in the pool", e.pages_total);
    gauge(o, "dsv4_cache_pages_used", "KV/state cache pages held by sequences or the prefix cache", e.pages_used);
    gauge(o, "dsv4_cache_pages_free", "KV/state cache pages free", e.pages_free);
    gauge(o, "dsv4_preemptions_total", "Sequences preempted by recompute", e.preemptions_total, "counter");
    gauge(o, "dsv4_prompt_tokens_total", "Prompt tokens admitted", e.prompt_tokens_total, "counter");
    gauge(o, "dsv4_generation_tokens_total", "Tokens generated", e.generated_tokens_total, "counter");
    gauge(o, "dsv4_requests_finished_total", "Requests finished (stop or length)", e.requests_finished_total,
          "counter");
    gauge(o, "dsv4_requests_aborted_total", "Requests aborted (client gone or stop string)", e.requests_aborted_total,
          "counter");
    gauge(o, "dsv4_requests_rejected_total", "Requests refused because the queue was full", e.requests_rejected_total,
          "counter");
    gauge(o, "dsv4_engine_steps_total", "Engine steps run", e.steps_total, "counter");
    gauge(o, "dsv4_step_prefill_tokens_total", "Prefill tokens computed", e.step_prefill_tokens_total, "counter");
    gauge(o, "dsv4_step_decode_tokens_total", "Decode tokens computed", e.step_decode_tokens_total, "counter");
    gauge(o, "dsv4_spec_verify_chunks_total", "Speculative decoding: verify chunks run", e.spec_verify_chunks_total,
          "counter");
    gauge(o, "dsv4_spec_draft_tokens_total", "Speculative decoding: draft tokens verified", e.spec_draft_tokens_total,
          "counter");
    gauge(o, "dsv4_spec_accepted_tokens_total", "Speculative decoding: draft tokens accepted",
          e.spec_accepted_tokens_total, "counter");
    gauge(o, "dsv4_last_step_sequences", "Sequences in the last step", e.last_step_seqs);
    gauge(o, "dsv4_last_step_forward_microseconds", "Forward time of the last step", e.last_step_forward_us);
    gauge(o, "dsv4_engine_wait_microseconds_total", "Engine thread time blocked on running steps",
          e.engine_wait_us_total, "counter");
    gauge(o, "dsv4_engine_busy_microseconds_total",
          "Engine thread stepping time not blocked on the device (scheduling, launching, sampling, events)",
          e.engine_busy_us_total, "counter");
    gauge(o, "dsv4_prefix_cache_queried_tokens_total", "Prompt tokens looked up in the prefix cache",
          e.prefix_cache_queried_tokens_total, "counter");
    gauge(o, "dsv4_prefix_cache_hit_tokens_total", "Prompt tokens resumed from the prefix cache",
          e.prefix_cache_hit_tokens_total, "counter");
    gauge(o, "dsv4_prefix_cache_evicted_blocks_total", "Cached prefix blocks dropped to make room",
          e.prefix_cache_evicted_blocks_total, "counter");
    gauge(o, "dsv4_prefix_cache_blocks", "Prefix blocks in the cache", e.prefix_cache_blocks);
    gauge(o, "dsv4_prefix_cache_pages", "Cache pages held by the prefix cache (idle: equal to pages used)",
          e.prefix_cache_pages);
    gauge(o, "dsv4_engine_failed", "1 once the engine failed for good after a device error (the process must restart)",
          e.engine_failed);
    gauge(o, "dsv4_engine_overlapped_steps_total", "Steps launched while the previous step was still running",
          e.overlapped_steps_total, "counter");
    histogram(o, "dsv4_time_to_first_token_seconds", "Time to first token", e.ttft_s);
    histogram(o, "dsv4_time_per_output_token_seconds", "Mean time per output token after the first", e.tpot_s);
    histogram(o, "dsv4_step_seconds", "Engine step time", e.step_s);
    gauge(o, "dsv4_http_connections_open", "Open HTTP connections", stats_.connections_open);
    gauge(o, "dsv4_http_connections_total", "Accepted HTTP connections", stats_.connections_total, "counter");
    gauge(o, "dsv4_http_requests_total", "HTTP requests received", stats_.requests_total, "counter");
    gauge(o, "dsv4_http_responses_2xx_total", "2xx replies", stats_.responses_2xx, "counter");
    gauge(o, "dsv4_http_responses_4xx_total", "4xx replies", stats_.responses_4xx, "counter");
    gauge(o, "dsv4_http_responses_429_total", "429 replies (overload)", stats_.responses_429, "counter");
    gauge(o, "dsv4_http_responses_5xx_total", "5xx replies", stats_.responses_5xx, "counter");
    gauge(o, "dsv4_http_streams_open", "Open SSE streams", stats_.streams_open);
    gauge(o, "dsv4_http_replies_pending", "Requests read whose reply is not yet all written", stats_.replies_pending);
    gauge(o, "dsv4_http_client_disconnects_total", "Clients gone before their reply ended", stats_.client_disconnects,
          "counter");
    gauge(o, "dsv4_http_request_timeouts_total", "Connections closed because a request arrived too slowly",
          stats_.request_timeouts, "counter");
    gauge(o, "dsv4_http_slow_readers_total",
          "Connections closed because the client did not read its reply (write-buffer cap or write timeout)",
          stats_.slow_readers, "counter");
    return o;
}

}  // namespace dsv4
