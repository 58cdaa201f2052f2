// FakeRunner implementation (see fake_runner.h).
#include "sched/fake_runner.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/philox.h"

namespace dsv4 {

FakeRunner::FakeRunner(FakeRunnerOptions opt) : opt_(std::move(opt)) {
    cfg_.vocab_size = opt_.vocab_size;
    cfg_.eos_token_id = opt_.eos_token_id;
    cfg_.bos_token_id = opt_.bos_token_id;
    cfg_.max_position_embeddings = opt_.max_context;
    layout_.page_tokens = opt_.page_tokens;
    layout_.page_bytes = opt_.page_tokens * 4;
    layout_.n_state_pages = 1;
    pages_.assign(size_t(opt_.n_pages), std::vector<int32_t>(size_t(opt_.page_tokens), -1));
}

Status FakeRunner::parse_rules(const std::string& json_text, std::vector<FakeRunnerOptions::Rule>& out) {
    auto j = nlohmann::json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) return invalid_argument("fake rules: expected a JSON array");
    for (const auto& r : j) {
        FakeRunnerOptions::Rule rule;
        try {
            if (r.contains("trigger")) rule.trigger = r.at("trigger").get<std::vector<int32_t>>();
            rule.output = r.at("output").get<std::vector<int32_t>>();
        } catch (const nlohmann::json::exception& e) {
            return invalid_argument("fake rules: {}", e.what());
        }
        out.push_back(std::move(rule));
    }
    return Status::ok();
}

void FakeRunner::fill_logits(const std::vector<int32_t>& h, std::vector<float>& row) const {
    row.assign(size_t(opt_.vocab_size), 0.0f);
    for (const auto& rule : opt_.rules) {
        size_t e = 0;  // end of the first trigger occurrence
        if (!rule.trigger.empty()) {
            auto it = std::search(h.begin(), h.end(), rule.trigger.begin(), rule.trigger.end());
            if (it == h.end()) continue;
            e = size_t(it - h.begin()) + rule.trigger.size();
        }
        // Longest m such that the history ends with output[0, m) after the trigger.
        size_t m = std::min(rule.output.size(), h.size() - e);
        for (; m > 0; --m)
            if (std::equal(rule.output.begin(), rule.output.begin() + long(m), h.end() - long(m))) break;
        const int64_t next = m < rule.output.size() ? rule.output[m] : opt_.eos_token_id;
        row[size_t(next)] = 30.0f;
        return;
    }
    // FNV-1a over the whole history.
    uint64_t x = 1469598103934665603ull;
    for (int32_t t : h) x = (x ^ uint32_t(t)) * 1099511628211ull;
    for (uint64_t j = 0; j < 8; ++j) {
        const auto tok = int64_t(philox_uniform(x, 1, j) * double(opt_.vocab_size)) % opt_.vocab_size;
        row[size_t(tok)] = 8.0f + 4.0f * philox_uniform(x, 2, j);
    }
}

Status FakeRunner::forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) {
    const int64_t pt = opt_.page_tokens;
    // Like a sticky CUDA error, the fault poisons every later step too.
    if (!batch.seqs.empty()) ++steps_;
    if (opt_.fault_inject_step > 0 && steps_ >= opt_.fault_inject_step)
        return error(StatusCode::kDeviceLost,
                     "injected device fault at step {} (option fault_inject_step; the fake model's stand-in for a "
                     "sticky CUDA error)",
                     opt_.fault_inject_step);
    for (const PageCopy& pc : batch.page_copies) {
        if (pc.src < 0 || pc.src >= opt_.n_pages || pc.dst < 0 || pc.dst >= opt_.n_pages)
            return error(StatusCode::kOutOfRange, "page copy {} -> {} outside the pool", pc.src, pc.dst);
        pages_[size_t(pc.dst)] = pages_[size_t(pc.src)];
    }
    for (const auto& s : batch.seqs) {
        for (int32_t t : s.tokens)
            if (t < 0 || t >= opt_.vocab_size)
                return error(StatusCode::kOutOfRange, "token id {} outside the vocabulary", t);
        const int64_t end = s.start_pos + int64_t(s.tokens.size());
        if (int64_t(s.page_table.size()) < layout_.pages_for_tokens(end))
            return error(StatusCode::kOutOfRange, "seq {}: page table has {} pages, needs {}", s.seq_id,
                         s.page_table.size(), layout_.pages_for_tokens(end));
        for (int32_t p : s.page_table)
            if (p < 0 || p >= opt_.n_pages) return error(StatusCode::kOutOfRange, "page id {} outside the pool", p);
        // State page slot 0: tokens processed so far, like a compressor's residual state.
        auto& state = pages_[size_t(s.page_table[0])];
        if (s.start_pos == 0) state[0] = 0;
        if (state[0] != s.start_pos)
            return error(StatusCode::kInternal, "seq {}: state page holds {} tokens, chunk starts at {}", s.seq_id,
                         state[0], s.start_pos);
        for (size_t i = 0; i < s.tokens.size(); ++i) {
            const int64_t pos = s.start_pos + int64_t(i);
            pages_[size_t(s.page_table[size_t(1 + pos / pt)])][size_t(pos % pt)] = s.tokens[i];
        }
        state[0] = int32_t(end);
    }
    for (const auto& s : batch.seqs) {
        if (!s.want_logits) continue;
        const int64_t end = s.start_pos + int64_t(s.tokens.size());
        std::vector<int32_t> h(static_cast<size_t>(end));
        for (int64_t pos = 0; pos < end; ++pos) {
            const int32_t t = pages_[size_t(s.page_table[size_t(1 + pos / pt)])][size_t(pos % pt)];
            if (t < 0) return error(StatusCode::kInternal, "seq {}: position {} was never written", s.seq_id, pos);
            h[size_t(pos)] = t;
        }
        logits.emplace_back();
        fill_logits(h, logits.back());
    }
    const int64_t delay = opt_.step_delay_us + opt_.token_delay_us * batch.n_tokens();
    if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    return Status::ok();
}

}  // namespace dsv4
