// Locates and loads the official tokenizer.json for tests: $DSV4_TOKENIZER_JSON, else the one
// scripts/get-tokenizer.sh writes to .cache/tokenizer/. Tests skip (with the reason) when
// neither exists.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tokenizer/tokenizer.h"

namespace dsv4::testing_support {

inline std::string tokenizer_json_path() {
    if (const char* env = std::getenv("DSV4_TOKENIZER_JSON"); env && *env) return env;
    return std::string(DSV4_SOURCE_DIR) + "/.cache/tokenizer/tokenizer.json";
}

// nullptr when the file is missing; a load failure is a test failure (aborts loudly).
inline const Tokenizer* official_tokenizer() {
    static const Tokenizer* tok = []() -> const Tokenizer* {
        const std::string path = tokenizer_json_path();
        if (!std::filesystem::exists(path)) return nullptr;
        auto r = Tokenizer::from_file(path);
        if (!r.is_ok()) {
            fprintf(stderr, "loading %s failed: %s\n", path.c_str(), r.status().to_string().c_str());
            std::abort();
        }
        return new Tokenizer(std::move(r).value());
    }();
    return tok;
}

}  // namespace dsv4::testing_support

#define DSV4_REQUIRE_TOKENIZER(var)                                                               \
    const ::dsv4::Tokenizer* var = ::dsv4::testing_support::official_tokenizer();                 \
    if (var == nullptr) {                                                                         \
        GTEST_SKIP() << "no tokenizer.json at " << ::dsv4::testing_support::tokenizer_json_path() \
                     << " (run scripts/get-tokenizer.sh)";                                        \
    }
