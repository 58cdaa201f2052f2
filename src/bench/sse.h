// Incremental Server-Sent Events decoding and OpenAI streaming-chunk interpretation.
// SseDecoder turns arbitrary byte slices (as they come off the socket, split anywhere) into
// complete events; parse_openai_chunk reads one event's data as an OpenAI
// chat.completion.chunk / text_completion chunk. StreamRecorder combines both with arrival
// times into the per-request timing record the metrics are computed from.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::bench {

// One dispatched SSE event: `data` holds the data lines joined by '\n'.
struct SseEvent {
    std::string event;  // the "event:" field, empty for the default message type
    std::string data;
};

class SseDecoder {
public:
    // Feeds bytes; calls on_event for each event completed by these bytes.
    void feed(std::string_view bytes, const std::function<void(const SseEvent&)>& on_event);

private:
    void end_line(const std::function<void(const SseEvent&)>& on_event);

    std::string line_;
    SseEvent pending_;
    bool has_data_ = false;
    bool skip_lf_ = false;  // last byte was '\r': a following '\n' belongs to the same break
};

// What one OpenAI streaming chunk says.
struct OpenAiChunk {
    bool done = false;  // the "[DONE]" sentinel
    std::string text;   // delta.content + delta.reasoning_content, or choices[].text
    std::optional<int64_t> prompt_tokens, completion_tokens;  // from "usage" when present
    std::optional<int64_t> cached_tokens;                     // usage.prompt_tokens_details.cached_tokens
    std::vector<int32_t> token_ids;                           // choices[].token_ids (vLLM's return_token_ids)
    std::optional<std::string> finish_reason;
    std::optional<std::string> error;  // an "error" object, or data that is not JSON
};
OpenAiChunk parse_openai_chunk(std::string_view data);

// Timing and token accounting of one streamed request. Times are seconds on the caller's
// clock (the runner passes steady_clock seconds since the iteration started).
struct RequestRecord {
    bool ok = false;
    std::string error;                // empty when ok
    int http_status = 0;              // 0: no answer (connect, write or header read failed)
    bool retry_after = false;         // the answer carried a Retry-After header
    double start = 0;                 // request issued
    double first_token = -1;          // first chunk carrying text (TTFT = first_token - start)
    double end = 0;                   // stream finished (or failed)
    std::vector<double> chunk_times;  // arrival of every text-carrying chunk
    int64_t text_chunks = 0;
    int64_t usage_prompt_tokens = -1;  // -1: server sent no usage
    int64_t usage_completion_tokens = -1;
    int64_t expected_prompt_tokens = -1;  // known for token-id prompts, else -1
    int64_t usage_cached_tokens = -1;     // prompt tokens the server took from its prefix cache
    std::vector<int32_t> token_ids;       // generated ids, when the server returned them
    bool saw_done = false;

    double ttft() const { return first_token >= 0 ? first_token - start : -1; }
    double e2e() const { return end - start; }
    // Output tokens: usage when the server reported it, else one per text chunk.
    int64_t output_tokens() const { return usage_completion_tokens >= 0 ? usage_completion_tokens : text_chunks; }
    int64_t prompt_tokens() const { return usage_prompt_tokens >= 0 ? usage_prompt_tokens : expected_prompt_tokens; }
};

// Feeds a response body into a RequestRecord.
class StreamRecorder {
public:
    explicit StreamRecorder(RequestRecord& rec) : rec_(rec) {}
    void on_body(std::string_view bytes, double now);
    // Called once the body ends; decides ok/error from what was seen.
    void finish(double now);

private:
    RequestRecord& rec_;
    SseDecoder decoder_;
    std::string first_error_;
};

}  // namespace dsv4::bench
