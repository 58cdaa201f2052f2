// GenerationHandler: turns one request's engine events into its HTTP reply. Per choice it runs
// token ids -> IncrementalDetokenizer (no split characters, B20) -> StopMatcher (stops across
// tokens, held-back text flushed at the end, B23) -> for chat, StreamingOutputParser
// (reasoning_content / content / DSML tool_calls, chunking-independent, B21/B22), then writes
// OpenAI SSE chunks or one JSON body. Engine events arrive on the engine thread and are posted
// to the connection's executor, where all state of this object lives. A client disconnect
// aborts the request in the engine, which frees its pages (B29).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sched/engine.h"
#include "server/openai_request.h"
#include "server/response_writer.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/output_parser.h"
#include "tokenizer/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

class GenerationHandler : public RequestSink, public std::enable_shared_from_this<GenerationHandler> {
public:
    GenerationHandler(Engine& engine, const Tokenizer& tok, std::string model_name, ParsedRequest req,
                      uint64_t request_id, int64_t prompt_tokens, std::shared_ptr<ResponseWriter> writer);

    // On the executor, after the engine accepted the request.
    void begin();
    void on_event(SeqEvent&& ev) override;  // engine thread
    void cancel();                          // executor: the client went away

private:
    struct Choice {
        std::optional<IncrementalDetokenizer> detok;
        std::optional<StopMatcher> stop;
        std::optional<StreamingOutputParser> parser;
        ParsedOutput parsed;      // chat, non-stream: accumulated
        std::string text;         // completions, non-stream: accumulated
        nlohmann::json logprobs;  // accumulated (non-stream) or pending (stream)
        int64_t text_offset = 0;
        int n_tool_calls = 0;
        bool done = false;
        bool engine_done = false;  // the engine sent this choice's final event
        std::string finish_reason;
        int64_t completion_tokens = 0;
        int64_t cached_tokens = 0;       // prompt tokens the engine took from the prefix cache
        std::vector<int32_t> token_ids;  // generated ids (return_token_ids)
    };

    void handle(SeqEvent ev);
    void feed_text(int index, std::string text);
    void emit(int index, const OutputDelta* d, const std::string* text);
    void add_logprobs(Choice& c, const std::vector<SampleResult>& lps);
    void finish_choice(int index, const std::string& reason);
    void complete();
    void fail(const std::string& message);
    nlohmann::json chunk_base() const;
    nlohmann::json usage() const;
    std::string token_text(int32_t id) const;

    Engine& engine_;
    Tokenizer tok_;
    std::string model_;
    ParsedRequest req_;
    uint64_t id_;
    int64_t prompt_tokens_;
    int64_t created_;
    std::shared_ptr<ResponseWriter> w_;
    std::vector<Choice> choices_;
    bool finished_ = false;
    bool cancelled_ = false;
};

}  // namespace dsv4
