// Compares dsv4::Tokenizer with the reference output written by reference_corpus.js: ids,
// decode with and without special tokens, decode(encode(x)) == x, and streaming decode.
// With ONIG_SETS_JSON (from gen_unicode_delta.js) it also checks, for every code point, that our
// translated \p{L}/\p{M}/\p{N}/\p{P}/\p{S} and \s match exactly what the reference's Oniguruma matches.
// Usage: dsv4_tokenizer_reference_check TOKENIZER_JSON REFERENCE_JSON [ONIG_SETS_JSON]
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

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

// Number of code points where our category classes disagree with the reference's.
size_t check_categories(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    auto sets = nlohmann::json::parse(ss.str(), nullptr, false);
    if (sets.is_discarded()) {
        fprintf(stderr, "cannot parse %s\n", path.c_str());
        return 1;
    }
    size_t bad = 0;
    dsv4::RegexScratch scratch;
    for (const char* cat : {"L", "M", "N", "P", "S", "s"}) {
        const std::string onig = cat[0] == 's' ? std::string("\\s") : std::string("\\p{") + cat + "}";
        auto pattern = dsv4::translate_onig_pattern(onig);
        auto re = dsv4::RegexSplit::create(pattern.value(), false, dsv4::SplitBehavior::kRemoved);
        if (!re.is_ok()) {
            fprintf(stderr, "%s\n", re.status().to_string().c_str());
            return 1;
        }
        std::vector<bool> want(0x110000, false);
        for (const auto& cp : sets.at(cat)) want[cp.get<uint32_t>()] = true;
        std::vector<std::pair<uint32_t, uint32_t>> pieces;
        for (uint32_t cp = 0; cp < 0x110000; ++cp) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            std::string s;
            dsv4::utf8::append(s, cp);
            pieces.clear();
            (void)re->split(s, 0, pieces, scratch);
            const bool ours = pieces.empty();  // removed == matched
            if (ours != want[cp] && ++bad <= 10) {
                fprintf(stderr, "MISMATCH %s U+%04X: ours %d, reference %d\n", onig.c_str(), cp, ours,
                        static_cast<int>(want[cp]));
            }
        }
    }
    printf("unicode classes \\p{L,M,N,P,S} and \\s: %zu code points differ from the reference\n", bad);
    return bad;
}

struct Group {
    size_t texts = 0, bytes = 0, tokens = 0;
};

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON REFERENCE_JSON [ONIG_SETS_JSON]\n", argv[0]);
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
        const std::string text =
            raw ? base64_decode(rec.at("bytes_b64").get<std::string>()) : rec.at("text").get<std::string>();
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
        if (tok->decode(want, true) != rec.at("decoded_skip").get<std::string>())
            fail(name, "decode(skip=true) differs");
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
    if (argc == 4) failures += check_categories(argv[3]);
    return failures == 0 ? 0 : 1;
}
