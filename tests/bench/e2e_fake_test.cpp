// End-to-end: the load generator and the `dsv4 bench` command against the in-test fake
// OpenAI server on loopback: sweeps, error reporting, JSONL + plot output, compare, and an
// A/A run that must report no difference.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/record_io.h"
#include "bench/sweep.h"
#include "tests/bench/fake_openai_server.h"

namespace dsv4::bench {
namespace {

using testing::FakeOpenAiServer;

PromptSource words(int len) {
    PromptSourceOptions o;
    o.kind = PromptKind::kRandomWords;
    o.input_len = len;
    return PromptSource::create(o).value();
}

TEST(BenchE2eFake, SweepMeasuresEveryRequest) {
    FakeOpenAiServer srv;
    auto url = parse_url(srv.url());
    ASSERT_TRUE(url.is_ok());
    auto model = discover_model(*url);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    EXPECT_EQ(*model, "fake-model");

    for (bool chat : {true, false}) {
        SweepOptions o;
        o.levels = {1, 4};
        o.n = 8;
        o.max_tokens = 8;
        o.iterations = 2;
        o.warmup = 1;
        o.chat = chat;
        std::vector<Target> targets = {Target{.name = "", .url = *url, .model = *model}};
        int seen = 0;
        SweepHooks hooks;
        hooks.on_iteration = [&](const IterationMetrics&) { ++seen; };
        auto r = run_sweep(o, words(8), targets, hooks);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        ASSERT_EQ(r->size(), 4u);
        EXPECT_EQ(seen, 4);
        for (const IterationMetrics& m : *r) {
            EXPECT_EQ(m.n_ok, 8) << (m.error_samples.empty() ? "" : m.error_samples[0]);
            EXPECT_EQ(m.output_tokens, 64);
            EXPECT_EQ(m.input_tokens, 56);  // usage.prompt_tokens = 7 per request
            EXPECT_GT(m.ttft_ms.median, 1.0);
            EXPECT_GT(m.tpot_ms.median, 0.5);
            EXPECT_EQ(m.itl_ms.count, 8 * 7);
            EXPECT_GT(m.tok_s_per_user, 0);
        }
        // Four streams in flight overlap: clearly more throughput than one.
        EXPECT_GT((*r)[2].output_tok_s, 1.5 * (*r)[0].output_tok_s);
    }
}

// Open loop (--request-rate): every request sent is answered; no request starts before its
// Poisson arrival time (timers never fire early, so this cannot fail on a slow machine); the cap
// holds: never more than `concurrency` requests in flight.
TEST(BenchE2eFake, OpenLoopArrivalsAndCap) {
    FakeOpenAiServer srv;
    auto url = parse_url(srv.url());
    ASSERT_TRUE(url.is_ok());
    SweepOptions so;
    so.max_tokens = 4;
    so.chat = false;
    const auto jobs = build_jobs(words(4), "fake-model", so, 7, 30);
    const std::vector<double> at = poisson_arrivals(30, 200.0, 99);
    ASSERT_EQ(at.size(), 30u);
    for (size_t i = 1; i < at.size(); ++i) EXPECT_GT(at[i], at[i - 1]);
    EXPECT_EQ(poisson_arrivals(30, 200.0, 99), at);  // seeded
    BatchOptions b{.url = *url,
                   .path = "/v1/completions",
                   .concurrency = 3,
                   .timeout_s = 60,
                   .request_rate = 200.0,
                   .arrival_seed = 99};
    auto r = run_streaming_batch(b, jobs, nullptr);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 30u);
    for (size_t i = 0; i < r->size(); ++i) {
        const RequestRecord& rec = (*r)[i];
        EXPECT_TRUE(rec.ok) << rec.error;
        EXPECT_GE(rec.start + 1e-6, at[i]) << "request " << i << " started before its arrival";
        int in_flight = 0;  // requests running at this one's start
        for (const RequestRecord& o : *r) in_flight += o.start <= rec.start && o.end > rec.start;
        EXPECT_LE(in_flight, 3);
    }
    b.request_rate = -1;
    EXPECT_FALSE(run_streaming_batch(b, jobs, nullptr).is_ok());
}

TEST(BenchE2eFake, ChunkCountsWithoutUsage) {
    testing::FakeServerOptions fo;
    fo.send_usage = false;
    FakeOpenAiServer srv(fo);
    SweepOptions o;
    o.levels = {2};
    o.n = 4;
    o.max_tokens = 5;
    o.iterations = 1;
    o.warmup = 0;
    auto r =
        run_sweep(o, words(4), {Target{.name = "", .url = parse_url(srv.url()).value(), .model = "fake-model"}}, {});
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ((*r)[0].output_tokens, 20);
    EXPECT_FALSE((*r)[0].input_tokens_known);
}

TEST(BenchE2eFake, FailuresAreReported) {
    FakeOpenAiServer srv;
    SweepOptions o;
    o.levels = {2};
    o.n = 3;
    o.iterations = 1;
    o.warmup = 0;
    std::vector<IterationMetrics> got;
    SweepHooks hooks;
    hooks.on_iteration = [&](const IterationMetrics& m) { got.push_back(m); };
    auto r = run_sweep(o, words(4), {Target{.name = "", .url = parse_url(srv.url()).value(), .model = "wrong"}}, hooks);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("HTTP 404"), std::string::npos) << r.status().message();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].n_errors, 3);

    // Nothing listens on this port once the server is gone.
    const std::string dead = srv.url();
    {
        FakeOpenAiServer other;
        (void)other;
    }
    auto url = parse_url("http://127.0.0.1:1");
    ASSERT_TRUE(url.is_ok());
    auto r2 = run_sweep(o, words(4), {Target{.name = "", .url = *url, .model = "m"}}, {});
    ASSERT_FALSE(r2.is_ok());
    EXPECT_NE(r2.status().message().find("connect"), std::string::npos) << r2.status().message();
}

TEST(BenchE2eFake, UrlParsing) {
    auto u = parse_url("http://localhost:8080/v1/");
    ASSERT_TRUE(u.is_ok());
    EXPECT_EQ(u->host, "localhost");
    EXPECT_EQ(u->port, "8080");
    EXPECT_EQ(u->base_path, "");
    auto p = parse_url("127.0.0.1:9/proxy");
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(p->base_path, "/proxy");
    EXPECT_FALSE(parse_url("https://x").is_ok());
    EXPECT_FALSE(parse_url("http://:80").is_ok());
    EXPECT_FALSE(parse_url("http://h:x").is_ok());
}

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

int run_cli(const std::string& args, const std::string& out_path) {
    const std::string cmd = std::string(DSV4_EXE) + " " + args + " >" + out_path + " 2>&1";
    return std::system(cmd.c_str());
}

bool has_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

TEST(BenchE2eFake, CommandWritesTableJsonlPlotAndCompares) {
    FakeOpenAiServer srv;
    const std::string dir = ::testing::TempDir() + "bench_cli/";
    std::filesystem::create_directories(dir);
    const std::string jsonl = dir + "run.jsonl", log = dir + "run.log";
    std::filesystem::remove(dir + "run.svg");
    ASSERT_EQ(run_cli("bench --url " + srv.url() +
                          " --conc 1,4 --n 8 --max-tokens 8 --iterations 3 --warmup 2 "
                          "--input-len 6 --no-progress --out " +
                          jsonl,
                      log),
              0)
        << slurp(log);
    const std::string out = slurp(log);
    EXPECT_NE(out.find("output tok/s"), std::string::npos) << out;
    auto recs = read_jsonl(jsonl);
    ASSERT_TRUE(recs.is_ok()) << recs.status().to_string();
    ASSERT_EQ(recs->size(), 6u);
    EXPECT_EQ((*recs)[0].info.model, "fake-model");
    EXPECT_EQ((*recs)[0].info.url, parse_url(srv.url())->to_string());
    EXPECT_EQ((*recs)[5].m.level, 4);
    EXPECT_TRUE(std::filesystem::exists(dir + "run.gp"));
    if (has_gnuplot()) {
        EXPECT_GT(std::filesystem::file_size(dir + "run.svg"), 1000u) << out;
    }

    const std::string cmp_log = dir + "cmp.log";
    ASSERT_EQ(run_cli("bench compare " + jsonl + " " + jsonl, cmp_log), 0) << slurp(cmp_log);
    EXPECT_NE(slurp(cmp_log).find("no detectable difference"), std::string::npos) << slurp(cmp_log);
    EXPECT_NE(run_cli("bench compare " + jsonl, cmp_log), 0) << "single non-AB file";
}

TEST(BenchE2eFake, AaRunReportsNoDifference) {
    FakeOpenAiServer srv;
    const std::string dir = ::testing::TempDir() + "bench_aa/";
    std::filesystem::create_directories(dir);
    // --confidence 0.99: an A/A run still claims a difference somewhere in up to 1% of runs
    // (the family-wise rate over its levels) by design, so one retry keeps the test from
    // flaking while a broken comparison fails both attempts.
    std::string out;
    for (int attempt = 0; attempt < 2; ++attempt) {
        const std::string log = dir + "aa.log";
        ASSERT_EQ(run_cli("bench --url " + srv.url() + " --ab " + srv.url() +
                              " --conc 1,4 --n 8 --max-tokens 8 --iterations 4 --warmup 1 "
                              "--confidence 0.99 --no-progress --plot none --out " +
                              dir + "aa.jsonl",
                          log),
                  0)
            << slurp(log);
        out = slurp(log);
        const bool any_difference = out.find("-> B faster") != std::string::npos ||
                                    out.find("  faster") != std::string::npos ||
                                    out.find("  slower") != std::string::npos;
        if (!any_difference) break;
    }
    EXPECT_NE(out.find("no detectable difference"), std::string::npos) << out;
    EXPECT_EQ(out.find("  faster"), std::string::npos) << out;
    EXPECT_EQ(out.find("  slower"), std::string::npos) << out;
    auto recs = read_jsonl(dir + "aa.jsonl");
    ASSERT_TRUE(recs.is_ok());
    EXPECT_EQ(recs->size(), 16u);  // 2 levels x 4 iterations x 2 sides
    // ABBA: pair 0 runs A then B, pair 1 B then A, ...; each record says where it ran.
    const char* expected[] = {"A", "B", "B", "A", "A", "B", "B", "A"};
    for (int i = 0; i < 8; ++i) {
        const IterationMetrics& m = (*recs)[i].m;
        EXPECT_EQ(m.config, expected[i]) << i;
        EXPECT_EQ(m.level, 1);
        EXPECT_EQ(m.pair, i / 2) << i;
        EXPECT_EQ(m.pair_position, i % 2) << i;
        EXPECT_EQ(m.iteration, i / 2) << i;
    }
    EXPECT_NE(out.find("paired t test"), std::string::npos) << out;
    EXPECT_NE(out.find("Family of 2 levels"), std::string::npos) << out;
    // The single --ab file can be compared on its own.
    const std::string cmp = dir + "cmp.log";
    EXPECT_EQ(run_cli("bench compare " + dir + "aa.jsonl", cmp), 0) << slurp(cmp);
    EXPECT_NE(slurp(cmp).find("paired t test"), std::string::npos) << slurp(cmp);
    // Two files are two runs: unpaired, whatever their records say.
    EXPECT_EQ(run_cli("bench compare " + dir + "aa.jsonl " + dir + "aa.jsonl", cmp), 0) << slurp(cmp);
    EXPECT_NE(slurp(cmp).find("unpaired"), std::string::npos) << slurp(cmp);
    // A series of one: the tally and its JSON.
    EXPECT_EQ(run_cli("bench series " + dir + "aa.jsonl --json " + dir + "series.json", cmp), 0) << slurp(cmp);
    EXPECT_NE(slurp(cmp).find("1 family (1 paired), 2 levels tested"), std::string::npos) << slurp(cmp);
    EXPECT_NE(slurp(dir + "series.json").find("\"families_any_verdict\""), std::string::npos);
    EXPECT_NE(run_cli("bench series " + dir + "missing.jsonl", cmp), 0);
}

}  // namespace
}  // namespace dsv4::bench
