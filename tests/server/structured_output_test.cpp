// Structured output in the engine (EngineCore with a TokenConstraint per choice): every request with
// finish_reason stop ends with a document that parses and matches its schema, whatever the model
// prefers (FakeRunner: peaks at hashed ids, so the mask decides); cut by max_tokens it reports
// length; n choices each get their own constraint state; a constraint that starts after a token
// (the end of the reasoning) leaves the tokens before it alone; identical with overlap on.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "constrain/json_constraint.h"
#include "sched/engine_core.h"
#include "sched/fake_runner.h"
#include "tests/server/host_sampling_runner.h"

namespace dsv4 {
namespace {

using json = nlohmann::json;
constexpr int64_t kVocab = 400;
constexpr int32_t kThink = 7;  // stands for </think>: special (no bytes)

// Ids 0-9 are special (EOS is 1); then printable ASCII characters; then JSON pieces; then words.
std::shared_ptr<const constrain::VocabIndex> vocab(std::vector<std::string>* out = nullptr) {
    std::vector<std::string> v(static_cast<size_t>(kVocab));
    size_t i = 10;
    for (char c = 0x20; c < 0x7f; ++c) v[i++] = std::string(1, c);
    v[i++] = "\n";
    for (const char* piece : {"{\"",       "\":", "\",", "\"}", "true", "false", "null", "name", "age", "tags",
                              "\"name\":", "[\"", "\"]", "12",  "3.5",  "  ",    "\n  ", "}}",   "]}",  "abc"})
        v[i++] = piece;
    while (i < size_t(kVocab)) v[i] = "w" + std::to_string(i), ++i;
    if (out) *out = v;
    return std::make_shared<const constrain::VocabIndex>(v);
}

class Sink : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        auto& c = choices[ev.choice];
        c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
        if (ev.finish != FinishReason::kNone) c.finish = ev.finish, c.error = ev.error;
    }
    struct Choice {
        std::vector<int32_t> tokens;
        FinishReason finish = FinishReason::kNone;
        std::string error;
    };
    std::map<int, Choice> choices;
};

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
    "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},"required":["name","age"],
    "additionalProperties":false})";

struct Outputs {
    std::vector<std::map<int, Sink::Choice>> out;
};

Outputs run(EngineConfig::Overlap overlap, int32_t after, const std::vector<SamplingParams>& ps, int n,
            std::vector<FakeRunnerOptions::Rule> rules = {}) {
    FakeRunnerOptions fo;
    fo.rules = std::move(rules);
    fo.vocab_size = kVocab;
    fo.page_tokens = 16;
    fo.n_pages = 2048;
    FakeRunner fake(fo);
    test::HostSamplingRunner runner(fake);
    EngineConfig cfg;
    cfg.sched = {.max_running = 8, .max_tokens_per_step = 64, .max_prefill_chunk = 32};
    cfg.overlap = overlap;
    cfg.default_seed = 11;
    EngineStats stats;
    EngineCore core(runner, cfg, stats);
    auto schema = constrain::compile_json_schema(json::parse(kSchema));
    EXPECT_TRUE(schema.is_ok());
    const std::shared_ptr<const TokenConstraint> proto =
        constrain::make_json_constraint(std::make_shared<const constrain::CompiledSchema>(*schema), vocab());
    std::vector<std::shared_ptr<Sink>> sinks;
    for (size_t i = 0; i < ps.size(); ++i) {
        sinks.push_back(std::make_shared<Sink>());
        GenRequest r{.id = i + 1, .prompt = {20, 30, int32_t(40 + i)}, .params = ps[i], .n = n, .sink = sinks.back()};
        r.constraint = proto;
        r.constraint_after = after;
        EXPECT_TRUE(core.add(std::move(r)).is_ok());
    }
    for (int guard = 0; core.has_work() && guard < 20000; ++guard) core.step();
    Outputs res;
    for (auto& s : sinks) res.out.push_back(s->choices);
    return res;
}

std::string text(const std::vector<int32_t>& toks, const std::vector<std::string>& v) {
    std::string t;
    for (int32_t id : toks) t += v[size_t(id)];
    return t;
}

bool matches_schema(const json& d) {
    if (!d.is_object() || !d.contains("name") || !d["name"].is_string() || !d.contains("age") ||
        !d["age"].is_number_integer())
        return false;
    for (auto it = d.begin(); it != d.end(); ++it)
        if (it.key() != "name" && it.key() != "age" && it.key() != "tags") return false;
    if (d.contains("tags")) {
        if (!d["tags"].is_array() || d["tags"].size() > 3) return false;
        for (const auto& t : d["tags"])
            if (t != "a" && t != "b") return false;
    }
    return true;
}

std::vector<SamplingParams> params() {
    std::vector<SamplingParams> ps;
    for (int i = 0; i < 12; ++i) {
        SamplingParams p;
        p.temperature = i % 3 == 0 ? 0.0f : 1.0f;
        p.seed = uint64_t(100 + i);
        p.max_tokens = i == 5 ? 4 : 300;
        if (i == 7) p.presence_penalty = 1.0f;
        ps.push_back(p);
    }
    return ps;
}

TEST(StructuredOutput, StoppedOutputsParseAndMatchTheSchema) {
    std::vector<std::string> v;
    vocab(&v);
    const Outputs r = run(EngineConfig::Overlap::kOff, -1, params(), 2);
    int stopped = 0, cut = 0;
    for (size_t i = 0; i < r.out.size(); ++i)
        for (const auto& [c, ch] : r.out[i]) {
            EXPECT_TRUE(ch.error.empty()) << ch.error;
            const std::string t = text(ch.tokens, v);
            if (ch.finish == FinishReason::kStop) {
                const json d = json::parse(t, nullptr, false);
                ASSERT_FALSE(d.is_discarded()) << "request " << i << " choice " << c << ": '" << t << "'";
                EXPECT_TRUE(matches_schema(d)) << t;
                ++stopped;
            } else {
                EXPECT_EQ(ch.finish, FinishReason::kLength);
                ++cut;
            }
        }
    EXPECT_GE(cut, 2);  // request 5's choices: 4 tokens cannot close the object
    EXPECT_GE(stopped, 12);
    // The same with the overlapped engine.
    const Outputs o = run(EngineConfig::Overlap::kAlways, -1, params(), 2);
    for (size_t i = 0; i < r.out.size(); ++i)
        for (const auto& [c, ch] : r.out[i]) EXPECT_EQ(o.out[i].at(c).tokens, ch.tokens) << i << "/" << c;
}

TEST(StructuredOutput, StartsAfterItsToken) {
    std::vector<std::string> v;
    vocab(&v);
    // The fake model writes "H", "R" (ids 50, 60: no JSON can start so) and then kThink: with the
    // constraint gated on kThink those stand, and what follows is the document.
    std::vector<SamplingParams> ps(6);
    for (size_t i = 0; i < ps.size(); ++i) ps[i].temperature = 1.0f, ps[i].seed = 50 + i, ps[i].max_tokens = 400;
    const Outputs r =
        run(EngineConfig::Overlap::kAlways, kThink, ps, 1, {{.trigger = {20, 30}, .output = {50, 60, kThink}}});
    int stopped = 0;
    for (const auto& out : r.out) {
        const auto& ch = out.at(0);
        ASSERT_GE(ch.tokens.size(), 4u);
        EXPECT_EQ(ch.tokens[0], 50);
        EXPECT_EQ(ch.tokens[1], 60);
        EXPECT_EQ(ch.tokens[2], kThink);
        if (ch.finish != FinishReason::kStop) continue;
        ++stopped;
        const std::string t = text(std::vector<int32_t>(ch.tokens.begin() + 3, ch.tokens.end()), v);
        const json d = json::parse(t, nullptr, false);
        ASSERT_FALSE(d.is_discarded()) << t;
        EXPECT_TRUE(matches_schema(d)) << t;
    }
    EXPECT_GE(stopped, 3);
    // Without the gate the same model cannot write "H": the constraint is on from the first token.
    const Outputs ungated =
        run(EngineConfig::Overlap::kOff, -1, ps, 1, {{.trigger = {20, 30}, .output = {50, 60, kThink}}});
    EXPECT_NE(ungated.out[0].at(0).tokens[0], 50);
}

}  // namespace
}  // namespace dsv4
