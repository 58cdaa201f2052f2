// GenerationHandler implementation (see generation.h). Chunk shapes follow the OpenAI API:
// chat.completion.chunk with delta {role, content, reasoning_content, tool_calls}, and
// text_completion for /v1/completions; usage goes in a last chunk with empty choices when
// stream_options.include_usage is set; the stream ends with "data: [DONE]".
#include "server/generation.h"

#include <chrono>

#include <fmt/format.h>

namespace dsv4 {
namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace

GenerationHandler::GenerationHandler(Engine& engine, const Tokenizer& tok, std::string model_name, ParsedRequest req,
                                     uint64_t request_id, int64_t prompt_tokens, std::shared_ptr<ResponseWriter> writer)
    : engine_(engine),
      tok_(tok),
      model_(std::move(model_name)),
      req_(std::move(req)),
      id_(request_id),
      prompt_tokens_(prompt_tokens),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      w_(std::move(writer)),
      choices_(size_t(req_.n)) {
    for (auto& c : choices_) {
        c.detok.emplace(tok_, req_.skip_special_tokens);
        c.stop.emplace(req_.stop);
        if (req_.chat) c.parser.emplace(req_.thinking);
        c.logprobs = json::array();
    }
}

json GenerationHandler::chunk_base() const {
    return json{{"id", fmt::format("{}-{}", req_.chat ? "chatcmpl" : "cmpl", id_)},
                {"object", req_.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_}};
}

json GenerationHandler::usage() const {
    int64_t completion = 0;
    for (const auto& c : choices_) completion += c.completion_tokens;
    return json{{"prompt_tokens", prompt_tokens_},
                {"completion_tokens", completion},
                {"total_tokens", prompt_tokens_ + completion},
                {"prompt_tokens_details", {{"cached_tokens", choices_.front().cached_tokens}}}};
}

std::string GenerationHandler::token_text(int32_t id) const {
    const int32_t one[1] = {id};
    return tok_.decode(one, false);
}

void GenerationHandler::begin() {
    if (!req_.stream) return;
    w_->start_stream();
    if (req_.chat) {
        for (int i = 0; i < req_.n; ++i) {
            json c = chunk_base();
            c["choices"] = json::array({json{{"index", i},
                                             {"delta", {{"role", "assistant"}, {"content", ""}}},
                                             {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}});
            w_->stream_data(sse(c));
        }
    }
}

void GenerationHandler::on_event(SeqEvent&& ev) {
    auto self = shared_from_this();
    w_->post([self, ev = std::move(ev)]() mutable { self->handle(std::move(ev)); });
}

void GenerationHandler::cancel() {
    if (finished_) return;
    cancelled_ = true;
    finished_ = true;
    engine_.abort(id_);
}

void GenerationHandler::add_logprobs(Choice& c, const std::vector<SampleResult>& lps) {
    if (req_.params.logprobs < 0) return;
    for (const auto& r : lps) {
        if (req_.chat) {
            json top = json::array();
            for (const auto& t : r.top) {
                const auto b = tok_.token_bytes(t.token, false);
                top.push_back({{"token", token_text(t.token)},
                               {"logprob", t.logprob},
                               {"bytes", std::vector<uint8_t>(b.begin(), b.end())}});
            }
            const auto b = tok_.token_bytes(r.token, false);
            c.logprobs.push_back({{"token", token_text(r.token)},
                                  {"logprob", r.logprob},
                                  {"bytes", std::vector<uint8_t>(b.begin(), b.end())},
                                  {"top_logprobs", top}});
        } else {
            json top = json::object();
            for (const auto& t : r.top) top[token_text(t.token)] = t.logprob;
            c.logprobs.push_back(
                {{"token", token_text(r.token)}, {"logprob", r.logprob}, {"top", top}, {"offset", c.text_offset}});
        }
    }
}

// Completions logprobs come out as parallel arrays.
static json completion_logprobs(const json& entries) {
    json out = {{"tokens", json::array()},
                {"token_logprobs", json::array()},
                {"top_logprobs", json::array()},
                {"text_offset", json::array()}};
    for (const auto& e : entries) {
        out["tokens"].push_back(e["token"]);
        out["token_logprobs"].push_back(e["logprob"]);
        out["top_logprobs"].push_back(e["top"]);
        out["text_offset"].push_back(e["offset"]);
    }
    return out;
}

void GenerationHandler::emit(int index, const OutputDelta* d, const std::string* text) {
    Choice& c = choices_[size_t(index)];
    if (!req_.stream) {
        if (d) apply_delta(c.parsed, *d);
        if (text) c.text += *text;
        return;
    }
    const bool has_lp = req_.params.logprobs >= 0 && !c.logprobs.empty();
    if ((d == nullptr || d->empty()) && (text == nullptr || text->empty()) && !has_lp) return;
    json choice = {{"index", index}, {"finish_reason", nullptr}};
    if (req_.chat) {
        json delta = json::object();
        if (d && !d->reasoning.empty()) delta["reasoning_content"] = d->reasoning;
        if (d && !d->content.empty()) delta["content"] = d->content;
        if (d && !d->tool_events.empty()) {
            json calls = json::array();
            for (const auto& te : d->tool_events) {
                if (!te.name.empty()) {
                    calls.push_back({{"index", te.index},
                                     {"id", fmt::format("call_{}_{}_{}", id_, index, te.index)},
                                     {"type", "function"},
                                     {"function", {{"name", te.name}, {"arguments", ""}}}});
                    c.n_tool_calls = std::max(c.n_tool_calls, te.index + 1);
                }
                if (!te.arguments_delta.empty())
                    calls.push_back({{"index", te.index}, {"function", {{"arguments", te.arguments_delta}}}});
            }
            delta["tool_calls"] = calls;
        }
        choice["delta"] = delta;
        choice["logprobs"] = has_lp ? json{{"content", c.logprobs}} : json(nullptr);
    } else {
        choice["text"] = text ? *text : std::string();
        choice["logprobs"] = has_lp ? completion_logprobs(c.logprobs) : json(nullptr);
    }
    c.logprobs = json::array();
    json chunk = chunk_base();
    chunk["choices"] = json::array({choice});
    w_->stream_data(sse(chunk));
}

void GenerationHandler::feed_text(int index, std::string text) {
    Choice& c = choices_[size_t(index)];
    if (text.empty()) return;
    auto out = c.stop->push(text);
    c.text_offset += int64_t(out.emit.size());
    if (c.parser) {
        OutputDelta d = c.parser->push(out.emit);
        emit(index, &d, nullptr);
    } else {
        emit(index, nullptr, &out.emit);
    }
    if (out.stopped) finish_choice(index, "stop");
}

void GenerationHandler::finish_choice(int index, const std::string& reason) {
    Choice& c = choices_[size_t(index)];
    if (c.done) return;
    c.done = true;
    // Flush what the detokenizer, the stop matcher and the parser held back.
    if (!c.stop->stopped()) {
        auto out = c.stop->push(c.detok->finish());
        std::string tail = out.emit + (out.stopped ? std::string() : c.stop->finish());
        if (c.parser) {
            OutputDelta d = c.parser->push(tail);
            emit(index, &d, nullptr);
        } else {
            emit(index, nullptr, &tail);
        }
    }
    if (c.parser) {
        OutputDelta d = c.parser->finish();
        emit(index, &d, nullptr);
    }
    c.finish_reason = reason;
    if (req_.chat && reason == "stop") {
        const bool any_calls = req_.stream ? c.n_tool_calls > 0 : !c.parsed.tool_calls.empty();
        if (any_calls) c.finish_reason = "tool_calls";
    }
    if (req_.stream) {
        json choice = {{"index", index}, {"finish_reason", c.finish_reason}, {"logprobs", nullptr}};
        if (req_.chat)
            choice["delta"] = json::object();
        else
            choice["text"] = "";
        if (req_.return_token_ids) choice["token_ids"] = c.token_ids;  // all of them, in the last chunk
        if (req_.params.logprobs >= 0 && !c.logprobs.empty()) {
            choice["logprobs"] = req_.chat ? json{{"content", c.logprobs}} : completion_logprobs(c.logprobs);
            c.logprobs = json::array();
        }
        json chunk = chunk_base();
        chunk["choices"] = json::array({choice});
        w_->stream_data(sse(chunk));
    }
    for (const auto& o : choices_)
        if (!o.done) return;
    complete();
}

void GenerationHandler::complete() {
    if (finished_) return;
    finished_ = true;
    // Choices finished by a stop string may still be running in the engine; requests that
    // ended normally issue no abort at all (B29).
    bool running = false;
    for (const auto& c : choices_) running |= !c.engine_done;
    if (running) engine_.abort(id_);
    if (req_.stream) {
        if (req_.include_usage) {
            json chunk = chunk_base();
            chunk["choices"] = json::array();
            chunk["usage"] = usage();
            w_->stream_data(sse(chunk));
        }
        w_->stream_data("data: [DONE]\n\n");
        w_->end_stream();
        return;
    }
    json body = chunk_base();
    body["object"] = req_.chat ? "chat.completion" : "text_completion";
    json arr = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
        const Choice& c = choices_[i];
        json choice = {{"index", i}, {"finish_reason", c.finish_reason}};
        if (req_.return_token_ids) choice["token_ids"] = c.token_ids;
        if (req_.chat) {
            json msg = {{"role", "assistant"}};
            msg["content"] =
                c.parsed.content.empty() && !c.parsed.tool_calls.empty() ? json(nullptr) : json(c.parsed.content);
            if (!c.parsed.reasoning.empty()) msg["reasoning_content"] = c.parsed.reasoning;
            if (!c.parsed.tool_calls.empty()) {
                json calls = json::array();
                for (size_t k = 0; k < c.parsed.tool_calls.size(); ++k)
                    calls.push_back({{"id", fmt::format("call_{}_{}_{}", id_, i, k)},
                                     {"type", "function"},
                                     {"function",
                                      {{"name", c.parsed.tool_calls[k].name},
                                       {"arguments", c.parsed.tool_calls[k].arguments_json}}}});
                msg["tool_calls"] = calls;
            }
            choice["message"] = msg;
            choice["logprobs"] = req_.params.logprobs >= 0 ? json{{"content", c.logprobs}} : json(nullptr);
        } else {
            choice["text"] = c.text;
            choice["logprobs"] = req_.params.logprobs >= 0 ? completion_logprobs(c.logprobs) : json(nullptr);
        }
        arr.push_back(choice);
    }
    body["choices"] = arr;
    body["usage"] = usage();
    w_->send(200, "application/json", dump(body));
}

void GenerationHandler::fail(const std::string& message) {
    if (finished_) return;
    finished_ = true;
    engine_.abort(id_);
    ApiError e{500, message, "server_error", {}, {}};
    if (req_.stream) {
        w_->stream_data("data: " + e.body() + "\n\n");
        w_->stream_data("data: [DONE]\n\n");
        w_->end_stream();
    } else {
        w_->send(500, "application/json", e.body());
    }
}

void GenerationHandler::handle(SeqEvent ev) {
    if (finished_ || ev.choice < 0 || ev.choice >= int(choices_.size())) return;
    Choice& c = choices_[size_t(ev.choice)];
    if (ev.finish != FinishReason::kNone) c.engine_done = true;
    if (c.done) return;
    c.completion_tokens = ev.completion_tokens;
    c.cached_tokens = std::max(c.cached_tokens, ev.cached_tokens);
    if (req_.return_token_ids) c.token_ids.insert(c.token_ids.end(), ev.tokens.begin(), ev.tokens.end());
    add_logprobs(c, ev.logprobs);
    std::string text;
    for (int32_t t : ev.tokens) text += c.detok->push(t);
    feed_text(ev.choice, std::move(text));
    if (c.done) return;  // a stop string ended it
    switch (ev.finish) {
        case FinishReason::kNone:
            break;
        case FinishReason::kStop:
            finish_choice(ev.choice, "stop");
            break;
        case FinishReason::kLength:
            finish_choice(ev.choice, "length");
            break;
        case FinishReason::kAbort:
            fail("the request was aborted");
            break;
        case FinishReason::kError:
            fail(ev.error.empty() ? "generation failed" : ev.error);
            break;
    }
}

}  // namespace dsv4
