// Helpers of the fault tests (engine_fault_test.cpp, serve_loop_test.cpp): a sink that counts
// finish events, a ResponseWriter that records a reply, a byte-level tokenizer without merges (so
// an App runs without tokenizer.json), and the FakeRunner options of a model that faults at a given
// step.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sched/engine_core.h"
#include "sched/fake_runner.h"
#include "server/app.h"
#include "server/response_writer.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::test {

// Every event of one request; waits (on the condition, never on time alone) for its finish.
class FinishSink : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        std::lock_guard lk(mu_);
        if (ev.finish == FinishReason::kNone) return;
        ++finishes;
        finish = ev.finish;
        error = ev.error;
        cv_.notify_all();
    }
    bool wait_finished(std::chrono::seconds limit) {
        std::unique_lock lk(mu_);
        return cv_.wait_for(lk, limit, [&] { return finishes > 0; });
    }
    int n_finishes() {
        std::lock_guard lk(mu_);
        return finishes;
    }
    std::string error_text() {
        std::lock_guard lk(mu_);
        return error;
    }
    FinishReason reason() {
        std::lock_guard lk(mu_);
        return finish;
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    int finishes = 0;
    FinishReason finish = FinishReason::kNone;
    std::string error;
};

// A reply as a handler writes it. post() runs the function at once under a (recursive) mutex, which
// serialises handlers and engine events as the connection's strand does.
class RecordingWriter : public ResponseWriter {
public:
    void post(std::function<void()> fn) override {
        std::lock_guard lk(strand_);
        fn();
    }
    void send(int st, const std::string&, std::string b, const HeaderList& extra) override {
        std::lock_guard lk(mu_);
        status = st;
        body = std::move(b);
        headers = extra;
        done = true;
        cv_.notify_all();
    }
    void start_stream() override {
        std::lock_guard lk(mu_);
        status = 200;
        streamed = true;
    }
    void stream_data(std::string d) override {
        std::lock_guard lk(mu_);
        body += d;
    }
    void end_stream() override {
        std::lock_guard lk(mu_);
        done = true;
        cv_.notify_all();
    }
    void on_disconnect(std::function<void()>) override {}
    bool wait_done(std::chrono::seconds limit) {
        std::unique_lock lk(mu_);
        return cv_.wait_for(lk, limit, [&] { return done; });
    }
    std::string header(const std::string& name) {
        std::lock_guard lk(mu_);
        for (const auto& [k, v] : headers)
            if (k == name) return v;
        return "";
    }

    // Read after wait_done().
    int status = 0;
    std::string body;
    bool streamed = false;

private:
    std::recursive_mutex strand_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done = false;
    HeaderList headers;
};

// Byte-level BPE over the 256 byte symbols, no merges, no added tokens: ids 0..255 are the bytes.
inline Tokenizer byte_tokenizer() {
    nlohmann::json vocab = nlohmann::json::object();
    int extra = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const int cp = printable ? b : extra++;
        std::string s;
        if (cp < 0x80) {
            s.push_back(static_cast<char>(cp));
        } else {
            s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
            s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        }
        vocab[s] = b;
    }
    const nlohmann::json j = {
        {"version", "1.0"},
        {"added_tokens", nlohmann::json::array()},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"normalizer", {{"type", "Sequence"}, {"normalizers", nlohmann::json::array()}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           nlohmann::json::array(
               {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+|\\S+"}}}, {"behavior", "Isolated"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab", vocab},
          {"merges", nlohmann::json::array()}}}};
    auto t = Tokenizer::from_json_text(j.dump());
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    return std::move(t).value();
}

// The fake model (256-token vocabulary, EOS 1) whose `step`-th step and every later one fail with
// kDeviceLost; `step_delay_us` slows each step.
inline FakeRunnerOptions faulty_fake_model(int64_t step, int64_t step_delay_us = 0) {
    FakeRunnerOptions fo;
    fo.vocab_size = 256;
    fo.eos_token_id = 1;
    fo.bos_token_id = 0;
    fo.page_tokens = 16;
    fo.n_pages = 512;
    fo.step_delay_us = step_delay_us;
    fo.fault_inject_step = step;
    return fo;
}

// POST /v1/completions of the given prompt ids, greedy, ignoring EOS for max_tokens tokens.
inline HttpRequest completion_request(const std::vector<int>& prompt, int max_tokens, bool stream) {
    const nlohmann::json body = {
        {"prompt", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0}, {"stream", stream}};
    HttpRequest r;
    r.method = "POST";
    r.target = "/v1/completions";
    r.content_type = "application/json";
    r.body = body.dump();
    return r;
}

}  // namespace dsv4::test
