// Multi-turn conversation workload (see multi_turn.h).
#include "bench/multi_turn.h"

#include <nlohmann/json.hpp>

#include "core/philox.h"
#include "bench/sweep.h"

namespace dsv4::bench {
namespace {

std::vector<int32_t> draw_ids(const MultiTurnOptions& o, uint64_t stream, int n) {
    std::vector<int32_t> v;
    v.reserve(size_t(n));
    const double span = double(o.id_max - o.id_min);
    for (int i = 0; i < n; ++i)
        v.push_back(o.id_min + int32_t(std::min(span - 1, double(philox_uniform(o.seed, stream, uint64_t(i))) * span)));
    return v;
}

}  // namespace

std::vector<int32_t> multi_turn_prompt(const MultiTurnOptions& opt, int conv, int turn,
                                       const std::vector<std::vector<int32_t>>& answers) {
    std::vector<int32_t> p = draw_ids(opt, 1, opt.system_len);
    auto user = [&](int t) { return draw_ids(opt, 1000 + uint64_t(conv) * 1000 + uint64_t(t), opt.user_len); };
    for (int t = 1; t < turn; ++t) {
        const auto u = user(t);
        p.insert(p.end(), u.begin(), u.end());
        if (size_t(t - 1) < answers.size())
            p.insert(p.end(), answers[size_t(t - 1)].begin(), answers[size_t(t - 1)].end());
    }
    const auto u = user(turn);
    p.insert(p.end(), u.begin(), u.end());
    return p;
}

Result<std::vector<TurnMetrics>> run_multi_turn(const Url& url, const MultiTurnOptions& opt) {
    std::string model = opt.model;
    if (model.empty()) {
        DSV4_ASSIGN_OR_RETURN(model, discover_model(url, std::min(opt.timeout_s, 30.0)));
    }
    std::vector<std::vector<std::vector<int32_t>>> answers(size_t(opt.conversations));
    std::vector<TurnMetrics> out;
    for (int turn = 1; turn <= opt.turns; ++turn) {
        std::vector<StreamJob> jobs;
        for (int c = 0; c < opt.conversations; ++c) {
            const auto prompt = multi_turn_prompt(opt, c, turn, answers[size_t(c)]);
            nlohmann::json body = {{"model", model},
                                   {"prompt", prompt},
                                   {"max_tokens", opt.answer_len},
                                   {"temperature", opt.temperature},
                                   {"ignore_eos", true},
                                   {"return_token_ids", true},
                                   {"stream", true},
                                   {"stream_options", {{"include_usage", true}}}};
            if (opt.temperature > 0) body["seed"] = opt.seed * 1000003 + uint64_t(c) * 101 + uint64_t(turn);
            jobs.push_back({body.dump(), int64_t(prompt.size())});
        }
        BatchOptions bo;
        bo.url = url;
        bo.path = "/v1/completions";
        bo.concurrency = opt.conversations;
        bo.timeout_s = opt.timeout_s;
        DSV4_ASSIGN_OR_RETURN(auto recs, run_streaming_batch(bo, jobs, nullptr));
        TurnMetrics m;
        m.turn = turn;
        std::vector<double> ttft;
        for (size_t c = 0; c < recs.size(); ++c) {
            const RequestRecord& r = recs[c];
            m.wall_s = std::max(m.wall_s, r.end);
            if (!r.ok) {
                ++m.n_errors;
                answers[c].push_back({});  // the conversation goes on without that answer
                continue;
            }
            ++m.n_ok;
            if (r.ttft() >= 0) ttft.push_back(r.ttft() * 1e3);
            m.prompt_tokens += r.prompt_tokens();
            m.cached_tokens += std::max<int64_t>(0, r.usage_cached_tokens);
            answers[c].push_back(r.token_ids);
        }
        if (m.n_ok == 0)
            return error(StatusCode::kUnavailable, "turn {}: every request failed ({})", turn,
                         recs.empty() ? std::string("no requests") : recs.front().error);
        m.ttft_ms = summarize(ttft);
        m.ttft_values_ms = std::move(ttft);
        out.push_back(m);
    }
    return out;
}

}  // namespace dsv4::bench
