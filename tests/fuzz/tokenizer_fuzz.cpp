// libFuzzer target for the tokenizer encoder: any byte string must encode without crashing,
// produce ids in range, decode to valid UTF-8, round-trip when the input is valid UTF-8, and
// stream-decode to the same text. The official tokenizer.json is found via
// $DSV4_TOKENIZER_JSON or the repo's .cache/tokenizer/tokenizer.json.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const dsv4::Tokenizer& tokenizer() {
    static const std::unique_ptr<dsv4::Tokenizer> tok = [] {
        const char* env = std::getenv("DSV4_TOKENIZER_JSON");
        const std::string path = env && *env ? env : std::string(DSV4_SOURCE_DIR) + "/.cache/tokenizer/tokenizer.json";
        auto r = dsv4::Tokenizer::from_file(path);
        if (!r.is_ok()) {
            fprintf(stderr, "tokenizer_fuzz: %s\n", r.status().to_string().c_str());
            std::abort();
        }
        return std::make_unique<dsv4::Tokenizer>(std::move(r).value());
    }();
    return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const dsv4::Tokenizer& tok = tokenizer();
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    auto ids = tok.encode(input);
    if (!ids.is_ok()) std::abort();  // encode only fails on internal errors
    for (int32_t id : *ids) {
        if (id < 0 || id >= tok.vocab_size()) std::abort();
    }
    const std::string text = tok.decode(*ids, false);
    if (!dsv4::utf8::is_valid(text)) std::abort();
    if (text != dsv4::utf8::sanitize(input)) std::abort();  // round trip (after documented repair)
    dsv4::IncrementalDetokenizer inc(tok, false);
    std::string streamed;
    for (int32_t id : *ids) streamed += inc.push(id);
    streamed += inc.finish();
    if (streamed != text) std::abort();
    (void)tok.decode(*ids, true);
    return 0;
}
