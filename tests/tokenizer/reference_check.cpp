// Compares dsv4::Tokenizer with the reference output written by reference_corpus.js: ids,
// decode with and without special tokens, decode(encode(x)) == x, and streaming decode.
// Usage: dsv4_tokenizer_reference_check TOKENIZER_JSON REFERENCE_JSON
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string base64_decode(const std::string& in) {
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    std::string out;
    int bits = 0, acc = 0;
    for (char c : in) {
        const int v = val(c);
        if (v < 0) continue;
        acc = (acc << 6) | v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xFF));
        }
    }
    return out;
}

std::string ids_str(const std::vector<int32_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size() && i < 40; ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + (v.size() > 40 ? ",...]" : "]");
}

struct Group {
    size_t texts = 0, bytes = 0, tokens = 0;
};

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON REFERENCE_JSON\n", argv[0]);
        return 2;
    }
    auto tok = dsv4::Tokenizer::from_file(argv[1]);
    if (!tok.is_ok()) {
        fprintf(stderr, "%s\n", tok.status().to_string().c_str());
        return 1;
    }
    std::ifstream in(argv[2]);
    std::stringstream ss;
    ss << in.rdbuf();
    auto ref = nlohmann::json::parse(ss.str(), nullptr, false);
    if (ref.is_discarded() || !ref.is_array()) {
        fprintf(stderr, "cannot parse %s\n", argv[2]);
        return 1;
    }
    std::map<std::string, Group> groups;
    size_t failures = 0;
    auto fail = [&](const std::string& name, const std::string& what) {
        if (++failures <= 20) fprintf(stderr, "MISMATCH %s: %s\n", name.c_str(), what.c_str());
    };
    for (const auto& rec : ref) {
        const std::string name = rec.at("name").get<std::string>();
        const bool raw = rec.contains("bytes_b64");
        const std::string text = raw ? base64_decode(rec.at("bytes_b64").get<std::string>()) : rec.at("text").get<std::string>();
        const auto want = rec.at("ids").get<std::vector<int32_t>>();
        auto got = tok->encode(text);
        Group& g = groups[name.substr(0, name.find('/'))];
        ++g.texts;
        g.bytes += text.size();
        g.tokens += want.size();
        if (!got.is_ok()) {
            fail(name, "encode failed: " + got.status().to_string());
            continue;
        }
        if (*got != want) {
            fail(name, "ids differ\n  ours " + ids_str(*got) + "\n  ref  " + ids_str(want));
            continue;
        }
        const std::string dec = tok->decode(want, false);
        if (dec != rec.at("decoded").get<std::string>()) fail(name, "decode(skip=false) differs");
        if (tok->decode(want, true) != rec.at("decoded_skip").get<std::string>()) fail(name, "decode(skip=true) differs");
        // "lossy" records use lstrip/rstrip tokens, which drop whitespace by design.
        if (!raw && !rec.value("lossy", false) && dec != text) fail(name, "decode(encode(x)) != x");
        dsv4::IncrementalDetokenizer inc(*tok, false);
        std::string streamed;
        for (int32_t id : want) streamed += inc.push(id);
        streamed += inc.finish();
        if (streamed != dec) fail(name, "incremental decode differs from decode");
    }
    size_t texts = 0, bytes = 0, tokens = 0;
    for (const auto& [name, g] : groups) {
        printf("%-14s %6zu texts %9zu bytes %8zu tokens\n", name.c_str(), g.texts, g.bytes, g.tokens);
        texts += g.texts;
        bytes += g.bytes;
        tokens += g.tokens;
    }
    printf("%-14s %6zu texts %9zu bytes %8zu tokens, %zu mismatches\n", "total", texts, bytes, tokens, failures);
    return failures == 0 ? 0 : 1;
}
