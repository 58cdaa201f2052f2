// Metrics from request records, the JSON-lines round trip, the per-level comparison and the
// gnuplot script.
#include <gtest/gtest.h>

#include "bench/compare.h"
#include "bench/plot.h"
#include "bench/record_io.h"
#include "bench/series.h"

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
    EXPECT_NEAR(m.tpot_ms.median, 150, 1e-9);  // (100 + 200) / 2 ms per token
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
    m.pair = 2;
    m.pair_position = 0;  // pair 2 runs B A
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
    EXPECT_EQ(r.m.pair, 2);
    EXPECT_EQ(r.m.pair_position, 0);
    EXPECT_FALSE(read_jsonl(path + ".missing").is_ok());
    // A single-target record has no pair and writes none.
    IterationMetrics plain = m;
    plain.pair = plain.pair_position = -1;
    const nlohmann::json j = record_to_json(info, plain);
    EXPECT_FALSE(j.contains("pair"));
    EXPECT_FALSE(j.contains("pair_position"));
}

// A record as written before pairs were recorded (an --ab run of the old A B A B order) still
// reads, as "not paired".
TEST(BenchRecords, OldRecordWithoutPairFieldsReads) {
    const auto j = nlohmann::json::parse(R"({"schema":"dsv4.bench.v1","git_sha":"abc","url":"u",
        "model":"m","config":"A","level":4,"iteration":1,"n_requests":8,"n_ok":8,"n_errors":0,
        "duration_s":1.5,"output_tok_s":123.5,"ttft_ms":{"median":10}})");
    auto r = record_from_json(j);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->m.level, 4);
    EXPECT_EQ(r->m.iteration, 1);
    EXPECT_DOUBLE_EQ(r->m.output_tok_s, 123.5);
    EXPECT_EQ(r->m.pair, -1);
    EXPECT_EQ(r->m.pair_position, -1);
}

IterationMetrics level_record(int level, int pair, double tok_s) {
    IterationMetrics m;
    m.level = level;
    m.iteration = pair;
    m.pair = pair;
    m.pair_position = 0;
    m.output_tok_s = tok_s;
    return m;
}

// Levels 1 and 8 of an --ab run, 4 pairs each; B is 30% faster at level 8 only. The pairs
// share a level shift (the machine's state) that an unpaired test would have to see through.
void ab_records(std::vector<IterationMetrics>& a, std::vector<IterationMetrics>& b) {
    const double shift[] = {1.0, 1.5, 0.7, 1.25};
    const double noise[] = {1.0, 1.01, 0.99, 1.005};
    for (int level : {1, 8}) {
        for (int k = 0; k < 4; ++k) {
            const double base = 100 * level * shift[k];
            a.push_back(level_record(level, k, base));
            b.push_back(level_record(level, k, base * (level == 8 ? 1.3 : 1.0) * noise[k]));
        }
    }
}

TEST(BenchCompare, PairedPerLevelVerdictsWithHolm) {
    std::vector<IterationMetrics> a, b;
    ab_records(a, b);
    auto c = compare_levels(a, b, "output_tok_s");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_TRUE(c->paired);
    EXPECT_EQ(c->m, 2);
    EXPECT_NEAR(c->ci_level, 0.975, 1e-12);
    ASSERT_EQ(c->rows.size(), 2u);
    EXPECT_EQ(c->rows[0].level, 1);
    EXPECT_EQ(c->rows[0].test.verdict, Verdict::kNoDifference);
    EXPECT_EQ(c->rows[1].test.verdict, Verdict::kFaster);
    EXPECT_TRUE(c->rows[1].test.paired);
    EXPECT_EQ(c->rows[1].test.n_a, 4);
    const std::string text = format_comparison(*c, "output_tok_s", "a", "b");
    EXPECT_NE(text.find("faster"), std::string::npos) << text;
    EXPECT_NE(text.find("no detectable difference"), std::string::npos) << text;
    EXPECT_NE(text.find("97.5% CI"), std::string::npos) << text;
    EXPECT_NE(text.find("paired t test"), std::string::npos) << text;
    EXPECT_NE(text.find("ABBA"), std::string::npos) << text;
    EXPECT_NE(text.find("Family of 2 levels"), std::string::npos) << text;
    EXPECT_NE(text.find("family-wise error rate of 5%"), std::string::npos) << text;
    EXPECT_FALSE(compare_levels(a, b, "nope").is_ok());

    // The same records unpaired (two files): the shift between pairs hides the 30% at level 8.
    auto u = compare_levels(a, b, "output_tok_s", 0.95, Pairing::kUnpaired);
    ASSERT_TRUE(u.is_ok());
    EXPECT_FALSE(u->paired);
    EXPECT_EQ(u->rows[1].test.n_b, 4);
    EXPECT_EQ(u->rows[1].test.verdict, Verdict::kNoDifference);
    const std::string utext = format_comparison(*u, "output_tok_s", "a", "b");
    EXPECT_NE(utext.find("unpaired"), std::string::npos) << utext;
    EXPECT_NE(utext.find("Welch"), std::string::npos) << utext;
    EXPECT_NE(utext.find("Holm-Bonferroni"), std::string::npos) << utext;
}

TEST(BenchCompare, PairingNeedsEveryRecordPaired) {
    std::vector<IterationMetrics> a, b;
    ab_records(a, b);
    // A run stopped midway: level 8 lost B's last pair. The other three pairs still pair.
    std::vector<IterationMetrics> b_short(b.begin(), b.end() - 1);
    auto c = compare_levels(a, b_short, "output_tok_s");
    ASSERT_TRUE(c.is_ok());
    EXPECT_TRUE(c->paired);
    EXPECT_EQ(c->rows[1].test.n_a, 3);
    // An old record without a pair index: the whole comparison falls back to Welch.
    std::vector<IterationMetrics> a_old = a;
    a_old[0].pair = -1;
    c = compare_levels(a_old, b, "output_tok_s");
    ASSERT_TRUE(c.is_ok());
    EXPECT_FALSE(c->paired);
    // A pair index twice on one side (two runs concatenated) is not a pairing either.
    std::vector<IterationMetrics> a_twice = a;
    a_twice.insert(a_twice.end(), a.begin(), a.end());
    c = compare_levels(a_twice, b, "output_tok_s");
    ASSERT_TRUE(c.is_ok());
    EXPECT_FALSE(c->paired);
    EXPECT_EQ(c->rows[0].test.n_a, 8);
}

// A series of three families: one quiet, one with level 8 faster, one with both levels slower.
TEST(BenchSeries, TallyCountsFamiliesAndLevels) {
    auto family = [](Verdict v1, Verdict v8) {
        Comparison c;
        c.paired = true;
        c.m = 2;
        for (auto [level, v] : {std::pair{1, v1}, std::pair{8, v8}}) {
            LevelComparison r;
            r.level = level;
            r.test.verdict = v;
            c.rows.push_back(r);
        }
        return c;
    };
    SeriesTally t;
    add_family(t, family(Verdict::kNoDifference, Verdict::kNoDifference));
    add_family(t, family(Verdict::kNoDifference, Verdict::kFaster));
    add_family(t, family(Verdict::kSlower, Verdict::kSlower));
    add_family(t, family(Verdict::kInsufficientData, Verdict::kSlower));
    EXPECT_EQ(t.families, 4);
    EXPECT_EQ(t.families_paired, 4);
    EXPECT_EQ(t.families_any_verdict, 3);
    EXPECT_EQ(t.families_any_faster, 1);
    EXPECT_EQ(t.families_any_slower, 2);
    EXPECT_EQ(t.families_all_faster, 0);
    EXPECT_EQ(t.families_all_slower, 2);  // untested levels do not count against "all"
    EXPECT_EQ(t.rows, 7);
    EXPECT_EQ(t.rows_faster, 1);
    EXPECT_EQ(t.rows_slower, 3);
    const nlohmann::json j = series_json(t);
    EXPECT_EQ(j["families_any_verdict"]["k"], 3);
    EXPECT_DOUBLE_EQ(j["families_any_verdict"]["rate"].get<double>(), 0.75);
    const Proportion w = wilson_interval(3, 4);
    EXPECT_DOUBLE_EQ(j["families_any_verdict"]["wilson"][0].get<double>(), w.lo);
    EXPECT_NE(format_series(t).find("Wilson"), std::string::npos);
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
