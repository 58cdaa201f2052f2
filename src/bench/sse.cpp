// SSE decoding per the WHATWG event-stream rules that matter for OpenAI servers: lines end
// in LF, CRLF or CR; "data:" lines accumulate; a blank line dispatches; ':' lines are
// comments (keep-alives). Chunk parsing is lenient about fields a server leaves out.
#include "bench/sse.h"

#include <nlohmann/json.hpp>

namespace dsv4::bench {

void SseDecoder::feed(std::string_view bytes, const std::function<void(const SseEvent&)>& on_event) {
    for (char c : bytes) {
        if (skip_lf_) {
            skip_lf_ = false;
            if (c == '\n') continue;
        }
        if (c == '\r') {
            skip_lf_ = true;
            end_line(on_event);
        } else if (c == '\n') {
            end_line(on_event);
        } else {
            line_.push_back(c);
        }
    }
}

void SseDecoder::end_line(const std::function<void(const SseEvent&)>& on_event) {
    if (line_.empty()) {
        if (has_data_) on_event(pending_);
        pending_ = SseEvent{};
        has_data_ = false;
        return;
    }
    if (line_[0] == ':') {
        line_.clear();
        return;
    }
    std::string_view line(line_);
    const size_t colon = line.find(':');
    std::string_view field = line.substr(0, colon);
    std::string_view value;
    if (colon != std::string_view::npos) {
        value = line.substr(colon + 1);
        if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
        if (has_data_) pending_.data.push_back('\n');
        pending_.data.append(value);
        has_data_ = true;
    } else if (field == "event") {
        pending_.event.assign(value);
    }
    line_.clear();
}

OpenAiChunk parse_openai_chunk(std::string_view data) {
    OpenAiChunk out;
    if (data == "[DONE]") {
        out.done = true;
        return out;
    }
    auto j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        out.error = "stream chunk is not a JSON object: " + std::string(data.substr(0, 200));
        return out;
    }
    if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
        if (e->is_object() && e->contains("message") && (*e)["message"].is_string()) {
            out.error = (*e)["message"].get<std::string>();
        } else {
            out.error = e->dump();
        }
        return out;
    }
    if (auto ch = j.find("choices"); ch != j.end() && ch->is_array()) {
        for (const auto& choice : *ch) {
            if (!choice.is_object()) continue;
            if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
                for (const char* key : {"reasoning_content", "content"}) {
                    if (auto t = d->find(key); t != d->end() && t->is_string()) {
                        out.text += t->get<std::string>();
                    }
                }
            }
            if (auto t = choice.find("text"); t != choice.end() && t->is_string()) {
                out.text += t->get<std::string>();
            }
            if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) {
                out.finish_reason = f->get<std::string>();
            }
            if (auto t = choice.find("token_ids"); t != choice.end() && t->is_array()) {
                for (const auto& id : *t)
                    if (id.is_number_integer()) out.token_ids.push_back(id.get<int32_t>());
            }
        }
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
        if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer()) {
            out.prompt_tokens = p->get<int64_t>();
        }
        if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer()) {
            out.completion_tokens = c->get<int64_t>();
        }
        if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object()) {
            if (auto c = d->find("cached_tokens"); c != d->end() && c->is_number_integer())
                out.cached_tokens = c->get<int64_t>();
        }
    }
    return out;
}

void StreamRecorder::on_body(std::string_view bytes, double now) {
    decoder_.feed(bytes, [&](const SseEvent& ev) {
        if (ev.event == "error") {
            if (first_error_.empty()) first_error_ = "server sent error event: " + ev.data;
            return;
        }
        OpenAiChunk c = parse_openai_chunk(ev.data);
        if (c.error) {
            if (first_error_.empty()) first_error_ = *c.error;
            return;
        }
        if (c.done) {
            rec_.saw_done = true;
            return;
        }
        if (!c.text.empty()) {
            if (rec_.first_token < 0) rec_.first_token = now;
            rec_.chunk_times.push_back(now);
            ++rec_.text_chunks;
        }
        if (c.prompt_tokens) rec_.usage_prompt_tokens = *c.prompt_tokens;
        if (c.completion_tokens) rec_.usage_completion_tokens = *c.completion_tokens;
        if (c.cached_tokens) rec_.usage_cached_tokens = *c.cached_tokens;
        rec_.token_ids.insert(rec_.token_ids.end(), c.token_ids.begin(), c.token_ids.end());
    });
}

void StreamRecorder::finish(double now) {
    rec_.end = now;
    if (!first_error_.empty()) {
        rec_.ok = false;
        rec_.error = first_error_;
    } else if (!rec_.saw_done) {
        rec_.ok = false;
        rec_.error = "stream ended without data: [DONE]";
    } else if (rec_.output_tokens() <= 0) {
        rec_.ok = false;
        rec_.error = "stream carried no output tokens";
    } else {
        rec_.ok = true;
    }
}

}  // namespace dsv4::bench
