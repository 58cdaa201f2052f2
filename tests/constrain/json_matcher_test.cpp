// Constrained decoding of JSON (src/constrain): the schema compiler's errors, the byte-level matcher
// on valid and invalid documents and all their prefixes, token masks from the vocabulary walk
// against trying every token, and a schema fuzz: random schemas, random token-by-token generation
// from the mask, every complete document parsed and checked by an independent validator.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "constrain/json_constraint.h"
#include "constrain/json_schema.h"
#include "constrain/vocab_index.h"
#include "tests/tokenizer/test_tokenizer_file.h"

namespace dsv4::constrain {
namespace {

using json = nlohmann::json;

std::shared_ptr<const CompiledSchema> compile(const char* text) {
    auto r = compile_json_schema(json::parse(text));
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return std::make_shared<const CompiledSchema>(r.is_ok() ? *r : any_json_object());
}

bool matches(const std::shared_ptr<const CompiledSchema>& s, const std::string& doc) {
    JsonMatcher m(s);
    for (size_t i = 0; i < doc.size(); ++i)
        if (!m.feed(uint8_t(doc[i]))) return false;
    return m.accepting();
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
    for (const char* bad :
         {R"({"type":"string","pattern":"a+"})", R"({"type":"object","properties":{"x":{"minLength":1}}})",
          R"({"type":"number","minimum":0})", R"({"$ref":"http://x/y"})", R"({"type":"strng"})",
          R"({"type":"object","required":["y"],"properties":{"x":{}}})"}) {
        auto r = compile_json_schema(json::parse(bad));
        ASSERT_FALSE(r.is_ok()) << bad;
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
    auto r = compile_json_schema(json::parse(R"({"type":"object","properties":{"x":{"minLength":1}}})"));
    EXPECT_NE(r.status().message().find("'minLength'"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("#/properties/x"), std::string::npos) << r.status().message();
}

TEST(JsonMatcher, ObjectSchemaAcceptsExactlyValidDocuments) {
    const auto s = compile(R"({"type":"object","title":"person","properties":{
        "name":{"type":"string","description":"who"},"age":{"type":"integer"},
        "tags":{"type":"array","items":{"type":"string"},"maxItems":2},
        "kind":{"enum":["a","bc",3,null]}},
        "required":["name","age"],"additionalProperties":false})");
    for (const char* ok : {R"({"name":"a","age":3})", R"({"age": 3, "name": "x\"y\u00e9", "tags": ["a","b"]})",
                           R"({ "name" : "" , "age" : -0 , "tags" : [ ] })", R"({"name":"n","age":10,"kind":"bc"})",
                           R"({"name":"n","age":1,"kind":null})", R"({"name":"n","age":1,"kind":3})",
                           "{\n  \"name\": \"a\",\n  \"age\": 12\n}"})
        EXPECT_TRUE(matches(s, ok)) << ok;
    for (const char* bad :
         {R"({"name":"a"})", R"({"name":1,"age":2})", R"({"nam":"a","age":1})", R"({"name":"a","age":1.5})", R"(["a"])",
          R"({"name":"a","age":1,"tags":["a","b","c"]})", R"({"name":"a","name":"b","age":1})",
          R"({"name":"a","age":1,"extra":1})", R"({"name":"a","age":01})", R"({"name":"a","age":1,"kind":"b"})",
          R"({"name":"a","age":1} )", R"({"name":"a\x","age":1})", R"({"name":"a","age":1,})"})
        EXPECT_FALSE(matches(s, bad)) << bad;
}

TEST(JsonMatcher, RefsAnyOfTypeListsAndAnyObject) {
    const auto tree = compile(R"({"$defs":{"node":{"type":"object","properties":{
        "v":{"type":["integer","null"]},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
        "required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})");
    EXPECT_TRUE(matches(tree, R"({"v":1,"kids":[{"v":null},{"v":2,"kids":[{"v":3}]}]})"));
    EXPECT_FALSE(matches(tree, R"({"v":1,"kids":[{"w":1}]})"));
    const auto alt =
        compile(R"({"anyOf":[{"type":"string"},{"type":"array","items":{"const":true}},{"type":"number"}]})");
    for (const char* ok : {R"("x")", R"([true,true])", "1.5e-3", "-2"}) EXPECT_TRUE(matches(alt, ok)) << ok;
    for (const char* bad : {"[false]", "true", "{}", "1.", "--1"}) EXPECT_FALSE(matches(alt, bad)) << bad;
    const auto obj = std::make_shared<const CompiledSchema>(any_json_object());
    EXPECT_TRUE(matches(obj, R"({"a":[1,{"b":null}],"c":"d","e":true})"));
    EXPECT_TRUE(matches(obj, "{}"));
    EXPECT_FALSE(matches(obj, "[1]"));
    EXPECT_FALSE(matches(obj, "\"x\""));
}

TEST(JsonMatcher, EveryPrefixIsLiveAndOnlyTheWholeIsComplete) {
    const auto s =
        compile(R"({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"string"}},"required":["a"]})");
    const std::string doc = R"({"b": "x y", "a": 12.5e+3, "c": [1, {"d": false}]})";
    JsonMatcher m(s);
    for (size_t i = 0; i < doc.size(); ++i) {
        EXPECT_FALSE(m.accepting()) << "complete after " << i << " bytes";
        ASSERT_TRUE(m.feed(uint8_t(doc[i]))) << "refused byte " << i << " of " << doc;
    }
    EXPECT_TRUE(m.accepting());
    EXPECT_TRUE(m.finished());
    EXPECT_FALSE(m.feed(uint8_t(' ')));
    // Whitespace runs are bounded.
    JsonMatcher w(s);
    for (int i = 0; i < JsonMatcher::kMaxWhitespace; ++i) EXPECT_TRUE(w.feed(uint8_t(' ')));
    EXPECT_FALSE(w.feed(uint8_t(' ')));
    // A root number may go on: complete but not finished.
    JsonMatcher n(compile(R"({"type":"integer"})"));
    EXPECT_TRUE(n.feed(std::string_view("12")));
    EXPECT_TRUE(n.accepting());
    EXPECT_FALSE(n.finished());
}

// An independent check of a parsed document against the supported subset of JSON Schema.
bool valid(const json& v, const json& s, const json& root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
        const std::string ref = s["$ref"];
        if (ref == "#") return valid(v, root, root);
        return valid(v, root["$defs"][ref.substr(8)], root);
    }
    if (s.contains("const")) return v == s["const"];
    if (s.contains("enum")) {
        for (const auto& e : s["enum"])
            if (v == e) return true;
        return false;
    }
    if (s.contains("anyOf")) {
        for (const auto& o : s["anyOf"])
            if (valid(v, o, root)) return true;
        return false;
    }
    if (s.contains("type")) {
        const std::string t = s["type"];
        if (t == "string" && !v.is_string()) return false;
        if (t == "integer" && !v.is_number_integer()) return false;
        if (t == "number" && !v.is_number()) return false;
        if (t == "boolean" && !v.is_boolean()) return false;
        if (t == "null" && !v.is_null()) return false;
        if (t == "array") {
            if (!v.is_array()) return false;
            if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
            if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
            for (const auto& it : v)
                if (!valid(it, s.value("items", json(true)), root)) return false;
        }
        if (t == "object") {
            if (!v.is_object()) return false;
            const json props = s.value("properties", json::object());
            for (const auto& r : s.value("required", json::array()))
                if (!v.contains(r.get<std::string>())) return false;
            for (auto it = v.begin(); it != v.end(); ++it) {
                if (props.contains(it.key())) {
                    if (!valid(it.value(), props[it.key()], root)) return false;
                } else if (!valid(it.value(), s.value("additionalProperties", json(true)), root)) {
                    return false;
                }
            }
        }
    }
    return true;
}

json random_schema(std::mt19937& g, int depth) {
    const int kind = int(g() % (depth > 2 ? 7 : 10));
    switch (kind) {
        case 0:
            return {{"type", "string"}};
        case 1:
            return {{"type", "number"}};
        case 2:
            return {{"type", "integer"}};
        case 3:
            return {{"type", "boolean"}};
        case 4:
            return {{"enum", json::array({"x", 7, nullptr, "yz"})}};
        case 5:
            return {{"const", "k"}};
        case 6:
            return {{"type", "null"}};
        case 7: {
            json props = json::object(), req = json::array();
            const int n = int(g() % 4);
            for (int i = 0; i < n; ++i) {
                const std::string name = std::string(1, char('a' + i)) + (g() % 2 ? "b" : "");
                props[name] = random_schema(g, depth + 1);
                if (g() % 2) req.push_back(name);
            }
            json o = {{"type", "object"}, {"properties", props}, {"required", req}};
            if (g() % 2) o["additionalProperties"] = false;
            return o;
        }
        case 8: {
            json a = {{"type", "array"}, {"items", random_schema(g, depth + 1)}};
            if (g() % 2) a["minItems"] = int(g() % 2);
            if (g() % 2) a["maxItems"] = 1 + int(g() % 3);
            if (a.contains("minItems") && a.contains("maxItems") && a["maxItems"] < a["minItems"])
                a["maxItems"] = a["minItems"];
            return a;
        }
        default:
            return {{"anyOf", json::array({random_schema(g, depth + 1), random_schema(g, depth + 1)})}};
    }
}

// A small vocabulary: every printable ASCII character (a byte-level BPE vocabulary holds every
// byte, so no document is ever cut off) and common JSON pieces.
std::vector<std::string> fragments() {
    std::vector<std::string> v = {
        "",      "{",    "}",   "[",    "]",      ",",   ":",   "\"",  " ",   "\n",    "-",   ".",    "e",   "+",
        "0",     "1",    "7",   "x",    "k",      "y",   "z",   "a",   "b",   "c",     "ab",  "bb",   "cb",  "true",
        "false", "null", "\\",  "\\\"", "\\u00",  "41",  "{\"", "\":", "\",", "\"}",   "},",  "],",   "[\"", "12",
        "3.5",   "yz\"", "\"a", "\"ab", "\"b\":", "nul", "tr",  "ue",  "}]",  "\"k\"", " \"", "\":\""};
    for (char ch = 0x20; ch < 0x7f; ++ch)
        if (std::find(v.begin(), v.end(), std::string(1, ch)) == v.end()) v.push_back(std::string(1, ch));
    return v;
}

TEST(JsonConstraint, MaskEqualsTryingEveryTokenAndFuzzedOutputsValidate) {
    const auto vocab = std::make_shared<const VocabIndex>(fragments());
    std::mt19937 g(5);
    int complete_docs = 0, checked_states = 0;
    for (int trial = 0; trial < 300; ++trial) {
        const json schema = random_schema(g, 0);
        auto compiled = compile_json_schema(schema);
        ASSERT_TRUE(compiled.is_ok()) << schema.dump() << ": " << compiled.status().to_string();
        const auto cs = std::make_shared<const CompiledSchema>(*compiled);
        JsonConstraint c(JsonMatcher(cs), vocab);
        JsonMatcher shadow(cs);
        std::string text;
        const int32_t eos = 0;  // the "" token stands for EOS
        for (int step = 0; step < 200; ++step) {
            std::vector<float> logits(size_t(vocab->size()), 0.0f);
            c.mask(logits, eos);
            // The mask against feeding every token to a copy of the matcher.
            for (int32_t t = 1; t < vocab->size(); ++t) {
                JsonMatcher probe = shadow;
                const bool ok = probe.feed(vocab->bytes(t));
                ASSERT_EQ(std::isfinite(logits[size_t(t)]), ok)
                    << schema.dump() << " after '" << text << "' token '" << vocab->bytes(t) << "'";
            }
            ++checked_states;
            ASSERT_EQ(std::isfinite(logits[0]), shadow.accepting());
            std::vector<int32_t> live;
            for (int32_t t = 0; t < vocab->size(); ++t)
                if (std::isfinite(logits[size_t(t)])) live.push_back(t);
            ASSERT_FALSE(live.empty()) << "no token allowed: " << schema.dump() << " after '" << text << "'";
            const bool stop = shadow.accepting() && (shadow.finished() || g() % 3 == 0);
            if (stop) {
                ASSERT_TRUE(c.advance(eos));
                const json doc = json::parse(text, nullptr, false);
                ASSERT_FALSE(doc.is_discarded()) << schema.dump() << ": '" << text << "' does not parse";
                EXPECT_TRUE(valid(doc, schema, schema)) << schema.dump() << ": '" << text << "' does not validate";
                ++complete_docs;
                break;
            }
            int32_t t = live[g() % live.size()];
            if (t == eos) t = live.back();
            ASSERT_TRUE(c.advance(t));
            ASSERT_TRUE(shadow.feed(vocab->bytes(t)));
            text += vocab->bytes(t);
        }
    }
    EXPECT_GT(complete_docs, 150);
    std::printf(
        "[json constraint] 300 random schemas: %d complete documents parsed and validated; %d masks equal to "
        "trying every token\n",
        complete_docs, checked_states);
}

}  // namespace
}  // namespace dsv4::constrain

namespace dsv4::constrain {
namespace {

// The official vocabulary (129,280 tokens): the tokens of valid documents, as the tokenizer cuts
// them, are allowed at every step (the mask never refuses what a model writing that text would
// pick); and how long one uncached mask takes (printed; not a timed test).
TEST(JsonConstraint, OfficialVocabularyAllowsRealTokenizations) {
    const Tokenizer* tok = testing_support::official_tokenizer();
    if (!tok) GTEST_SKIP() << "no tokenizer.json (scripts/get-tokenizer.sh)";
    std::vector<std::string> bytes(size_t(tok->vocab_size()));
    for (int32_t id = 0; id < int32_t(bytes.size()); ++id)
        if (!tok->is_special(id)) bytes[size_t(id)] = std::string(tok->token_bytes(id, false));
    const auto vocab = std::make_shared<const VocabIndex>(std::move(bytes));
    const auto schema = compile(R"({"type":"object","properties":{"city":{"type":"string"},
        "population":{"type":"integer"},"rivers":{"type":"array","items":{"type":"string"}},
        "capital":{"type":"boolean"},"mayor":{"type":["string","null"]}},"required":["city","population"]})");
    int64_t steps = 0;
    double total_ms = 0, worst_ms = 0;
    for (const char* doc :
         {R"({"city": "Zürich", "population": 421878, "rivers": ["Limmat", "Sihl"], "capital": false})",
          "{\n  \"city\": \"東京\",\n  \"population\": 13960000,\n  \"mayor\": null\n}",
          R"({"population":1,"city":"a \"quoted\" name\\n"})"}) {
        auto ids = tok->encode(doc);
        ASSERT_TRUE(ids.is_ok());
        JsonMatcher m(schema);
        std::vector<uint8_t> allow;
        for (int32_t id : *ids) {
            const auto t0 = std::chrono::steady_clock::now();
            vocab->allowed(m, allow);
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            total_ms += ms, worst_ms = std::max(worst_ms, ms), ++steps;
            ASSERT_TRUE(allow[size_t(id)])
                << "token " << id << " '" << tok->token_bytes(id, false) << "' refused in " << doc;
            ASSERT_TRUE(m.feed(tok->token_bytes(id, false)));
        }
        EXPECT_TRUE(m.accepting()) << doc;
    }
    std::printf(
        "[json constraint, official vocabulary] %lld steps: every real token allowed; uncached mask %.2f ms "
        "mean, %.2f ms worst\n",
        (long long)steps, total_ms / double(steps), worst_ms);
}

}  // namespace
}  // namespace dsv4::constrain
