// Metrics from request records, the JSON-lines round trip, the per-level comparison and the
// gnuplot script.
#include <gtest/gtest.h>

#include "bench/compare.h"
#include "bench/plot.h"
#include "bench/record_io.h"

namespace dsv4::bench {
namespace {

RequestRecord make(double start, double first, double end, int tokens) {
    RequestRecord r;
    r.ok = true;
    r.saw_done = true;
    r.start = start;
    r.first_token = first;
    r.end = end;
    for (int i = 0; i < tokens; ++i) {
        r.chunk_times.push_back(first + (end - first) * i / std::max(1, tokens - 1));
    }
    r.text_chunks = tokens;
    r.usage_prompt_tokens = 10;
    return r;
}

TEST(BenchMetrics, IterationDefinitions) {
    std::vector<RequestRecord> recs = {make(0, 0.1, 1.1, 11), make(0, 0.3, 2.3, 11)};
    RequestRecord bad;
    bad.ok = false;
    bad.error = "boom";
    bad.start = 0.5;
    bad.end = 0.6;
    recs.push_back(bad);
    IterationMetrics m = compute_iteration(recs);
    EXPECT_EQ(m.n_requests, 3);
    EXPECT_EQ(m.n_ok, 2);
    EXPECT_EQ(m.n_errors, 1);
    EXPECT_EQ(m.error_samples, std::vector<std::string>{"boom"});
    EXPECT_DOUBLE_EQ(m.duration_s, 2.3);
    EXPECT_EQ(m.output_tokens, 22);
    EXPECT_EQ(m.input_tokens, 20);
    EXPECT_NEAR(m.output_tok_s, 22 / 2.3, 1e-9);
    EXPECT_NEAR(m.total_tok_s, 42 / 2.3, 1e-9);
    EXPECT_NEAR(m.req_s, 2 / 2.3, 1e-9);
    EXPECT_NEAR(m.ttft_ms.mean, 200, 1e-9);
    EXPECT_NEAR(m.tpot_ms.median, 150, 1e-9);    // (100 + 200) / 2 ms per token
    EXPECT_NEAR(m.tok_s_per_user, (10 + 5) / 2.0, 1e-9);
    EXPECT_EQ(m.itl_ms.count, 20);
    EXPECT_NEAR(m.e2e_ms.max, 2300, 1e-9);
    EXPECT_EQ(metric_value(m, "ttft_ms.p99"), m.ttft_ms.p99);
    EXPECT_FALSE(metric_value(m, "bogus"));
    EXPECT_EQ(m.n_refused, 0);
    EXPECT_EQ(m.n_unanswered, 1);  // "boom" came without an HTTP status
}

// Overload accounting: 429 and 503 answers are refusals (and whether they said when to retry),
// other statuses are plain errors, no status at all is "unanswered".
TEST(BenchMetrics, RefusalsAndUnansweredAreCounted) {
    std::vector<RequestRecord> recs = {make(0, 0.1, 1.1, 3)};
    auto failed = [&](int status, bool retry_after) {
        RequestRecord r;
        r.ok = false;
        r.http_status = status;
        r.retry_after = retry_after;
        r.error = "HTTP " + std::to_string(status);
        recs.push_back(r);
    };
    failed(429, true);
    failed(429, false);
    failed(503, true);
    failed(500, true);
    failed(0, false);
    const IterationMetrics m = compute_iteration(recs);
    EXPECT_EQ(m.n_requests, 6);
    EXPECT_EQ(m.n_ok, 1);
    EXPECT_EQ(m.n_errors, 5);
    EXPECT_EQ(m.n_refused, 3);
    EXPECT_EQ(m.n_refused_no_retry_after, 1);
    EXPECT_EQ(m.n_unanswered, 1);
}

TEST(BenchRecords, JsonlRoundTrip) {
    IterationMetrics m = compute_iteration({make(0, 0.1, 1.1, 5)});
    m.n_refused = 4;
    m.n_refused_no_retry_after = 1;
    m.n_unanswered = 2;
    m.config = "B";
    m.level = 8;
    m.iteration = 2;
    RunInfo info = current_run_info();
    info.url = "http://x:1";
    info.model = "tiny";
    const std::string path = ::testing::TempDir() + "bench_roundtrip.jsonl";
    auto w = JsonlWriter::open(path);
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE(w->write(info, m).is_ok());
    ASSERT_TRUE(w->write(info, m).is_ok());
    auto back = read_jsonl(path);
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    ASSERT_EQ(back->size(), 2u);
    const StoredRecord& r = (*back)[0];
    EXPECT_EQ(r.info.model, "tiny");
    EXPECT_EQ(r.info.url, "http://x:1");
    EXPECT_FALSE(r.info.host.empty());
    EXPECT_FALSE(r.info.date.empty());
    EXPECT_EQ(r.m.config, "B");
    EXPECT_EQ(r.m.level, 8);
    EXPECT_EQ(r.m.iteration, 2);
    EXPECT_DOUBLE_EQ(r.m.output_tok_s, m.output_tok_s);
    EXPECT_DOUBLE_EQ(r.m.ttft_ms.p90, m.ttft_ms.p90);
    EXPECT_EQ(r.m.n_refused, 4);
    EXPECT_EQ(r.m.n_refused_no_retry_after, 1);
    EXPECT_EQ(r.m.n_unanswered, 2);
    EXPECT_FALSE(read_jsonl(path + ".missing").is_ok());
}

TEST(BenchCompare, PerLevelVerdicts) {
    std::vector<IterationMetrics> a, b;
    const double noise[] = {1.0, 1.02, 0.98, 1.01};
    for (int level : {1, 8}) {
        for (int i = 0; i < 4; ++i) {
            IterationMetrics m;
            m.level = level;
            m.output_tok_s = 100 * level * noise[i];
            a.push_back(m);
            m.output_tok_s *= level == 8 ? 1.3 : 1.0;
            m.output_tok_s *= noise[(i + 1) % 4];
            b.push_back(m);
        }
    }
    auto rows = compare_levels(a, b, "output_tok_s");
    ASSERT_TRUE(rows.is_ok());
    ASSERT_EQ(rows->size(), 2u);
    EXPECT_EQ((*rows)[0].test.verdict, Verdict::kNoDifference);
    EXPECT_EQ((*rows)[1].test.verdict, Verdict::kFaster);
    const std::string text = format_comparison(*rows, "output_tok_s", "a", "b");
    EXPECT_NE(text.find("faster"), std::string::npos);
    EXPECT_NE(text.find("no detectable difference"), std::string::npos);
    EXPECT_FALSE(compare_levels(a, b, "nope").is_ok());
}

TEST(BenchPlot, ScriptHasBothPanels) {
    LevelSummary s;
    s.level = 4;
    s.output_tok_s.mean = 10;
    PlotSeries ser{.name = "x \"q\"", .levels = {s}};
    const std::string g = gnuplot_script("/tmp/a.png", {ser}, "t");
    EXPECT_NE(g.find("set terminal png"), std::string::npos);
    EXPECT_NE(g.find("yerrorlines"), std::string::npos);
    EXPECT_NE(g.find("tok/s per user"), std::string::npos);
    EXPECT_NE(g.find("\\\"q\\\""), std::string::npos);
    EXPECT_NE(gnuplot_script("/tmp/a.svg", {ser}, "t").find("set terminal svg"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::bench
