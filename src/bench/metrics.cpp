// Metric computation (definitions in metrics.h).
#include "bench/metrics.h"

#include <algorithm>

namespace dsv4::bench {

IterationMetrics compute_iteration(const std::vector<RequestRecord>& records) {
    IterationMetrics m;
    m.n_requests = static_cast<int>(records.size());
    if (records.empty()) return m;
    double t_begin = records.front().start, t_end = records.front().end;
    std::vector<double> ttft, tpot, itl, e2e, per_user;
    for (const RequestRecord& r : records) {
        t_begin = std::min(t_begin, r.start);
        t_end = std::max(t_end, r.end);
        if (!r.ok) {
            ++m.n_errors;
            if (r.http_status == 429 || r.http_status == 503) {
                ++m.n_refused;
                m.n_refused_no_retry_after += !r.retry_after;
            }
            m.n_unanswered += r.http_status == 0;
            if (m.error_samples.size() < 5 &&
                std::find(m.error_samples.begin(), m.error_samples.end(), r.error) == m.error_samples.end()) {
                m.error_samples.push_back(r.error);
            }
            continue;
        }
        ++m.n_ok;
        const int64_t out = r.output_tokens();
        m.output_tokens += out;
        if (r.prompt_tokens() >= 0) {
            m.input_tokens += r.prompt_tokens();
        } else {
            m.input_tokens_known = false;
        }
        e2e.push_back(1e3 * r.e2e());
        if (r.ttft() >= 0) ttft.push_back(1e3 * r.ttft());
        const double decode_s = r.end - r.first_token;
        if (out > 1 && r.first_token >= 0 && decode_s > 0) {
            tpot.push_back(1e3 * decode_s / static_cast<double>(out - 1));
            per_user.push_back(static_cast<double>(out - 1) / decode_s);
        }
        for (size_t i = 1; i < r.chunk_times.size(); ++i) {
            itl.push_back(1e3 * (r.chunk_times[i] - r.chunk_times[i - 1]));
        }
    }
    m.duration_s = std::max(t_end - t_begin, 1e-9);
    m.output_tok_s = static_cast<double>(m.output_tokens) / m.duration_s;
    m.total_tok_s = static_cast<double>(m.output_tokens + m.input_tokens) / m.duration_s;
    m.req_s = m.n_ok / m.duration_s;
    m.tok_s_per_user = mean(per_user);
    m.ttft_ms = summarize(std::move(ttft));
    m.tpot_ms = summarize(std::move(tpot));
    m.itl_ms = summarize(std::move(itl));
    m.e2e_ms = summarize(std::move(e2e));
    return m;
}

namespace {
std::optional<double> dist_stat(const Dist& d, std::string_view stat) {
    if (stat == "mean") return d.mean;
    if (stat == "median") return d.median;
    if (stat == "p90") return d.p90;
    if (stat == "p99") return d.p99;
    return std::nullopt;
}
}  // namespace

std::optional<double> metric_value(const IterationMetrics& m, std::string_view name) {
    if (name == "output_tok_s") return m.output_tok_s;
    if (name == "total_tok_s") return m.total_tok_s;
    if (name == "req_s") return m.req_s;
    if (name == "tok_s_per_user") return m.tok_s_per_user;
    if (name == "duration_s") return m.duration_s;
    if (name == "n_errors") return m.n_errors;
    const size_t dot = name.find('.');
    if (dot == std::string_view::npos) return std::nullopt;
    const std::string_view dist = name.substr(0, dot), stat = name.substr(dot + 1);
    if (dist == "ttft_ms") return dist_stat(m.ttft_ms, stat);
    if (dist == "tpot_ms") return dist_stat(m.tpot_ms, stat);
    if (dist == "itl_ms") return dist_stat(m.itl_ms, stat);
    if (dist == "e2e_ms") return dist_stat(m.e2e_ms, stat);
    return std::nullopt;
}

bool metric_higher_is_better(std::string_view name) {
    return name == "output_tok_s" || name == "total_tok_s" || name == "req_s" || name == "tok_s_per_user";
}

const std::vector<std::string>& known_metric_names() {
    static const std::vector<std::string> kNames = [] {
        std::vector<std::string> v = {"output_tok_s", "total_tok_s", "req_s", "tok_s_per_user"};
        for (const char* d : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
            for (const char* s : {"mean", "median", "p90", "p99"}) {
                v.push_back(std::string(d) + "." + s);
            }
        }
        return v;
    }();
    return kNames;
}

LevelSummary summarize_level(const std::vector<IterationMetrics>& its) {
    LevelSummary s;
    if (its.empty()) return s;
    s.config = its.front().config;
    s.level = its.front().level;
    s.iterations = static_cast<int>(its.size());
    s.n_requests = its.front().n_requests;
    auto ci = [&](auto get) {
        std::vector<double> v;
        for (const auto& m : its) v.push_back(get(m));
        return mean_ci(v);
    };
    for (const auto& m : its) s.n_errors += m.n_errors;
    s.output_tok_s = ci([](const IterationMetrics& m) { return m.output_tok_s; });
    s.total_tok_s = ci([](const IterationMetrics& m) { return m.total_tok_s; });
    s.req_s = ci([](const IterationMetrics& m) { return m.req_s; });
    s.tok_s_per_user = ci([](const IterationMetrics& m) { return m.tok_s_per_user; });
    s.ttft_median_ms = ci([](const IterationMetrics& m) { return m.ttft_ms.median; });
    s.ttft_p99_ms = ci([](const IterationMetrics& m) { return m.ttft_ms.p99; });
    s.tpot_median_ms = ci([](const IterationMetrics& m) { return m.tpot_ms.median; });
    s.itl_median_ms = ci([](const IterationMetrics& m) { return m.itl_ms.median; });
    s.itl_p99_ms = ci([](const IterationMetrics& m) { return m.itl_ms.p99; });
    s.e2e_median_ms = ci([](const IterationMetrics& m) { return m.e2e_ms.median; });
    return s;
}

}  // namespace dsv4::bench
