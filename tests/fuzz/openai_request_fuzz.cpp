// libFuzzer target for the OpenAI request parser (src/server/openai_request.h) and, for accepted
// chat bodies, the chat renderer (src/tokenizer/chat_encoding.h): any byte string is a candidate
// body, for /v1/chat/completions and /v1/completions alike (issue 21 item 2). Invariants checked
// (a violation traps):
//  - the parser returns a request or an error, never throws;
//  - an error is a 4xx whose JSON body parses and stays under 1 KiB (no echo of the body);
//  - an accepted request's values lie in the API's ranges (temperature [0, 2], top_p (0, 1],
//    n [1, 16], max_tokens >= 1, logprobs <= 20, logit_bias values [-100, 100]);
//  - rendering an accepted chat request returns text or an error status, never throws.
// Built only with -DDSV4_FUZZ=ON and clang.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "tokenizer/chat_encoding.h"

namespace {

void check(bool ok) {
    if (!ok) __builtin_trap();
}

void run(std::string_view body, bool chat) {
    auto r = dsv4::parse_openai_request(body, chat);
    if (const auto* e = std::get_if<dsv4::ApiError>(&r)) {
        check(e->status >= 400 && e->status < 500);
        const std::string b = e->body();
        check(b.size() < 1024);
        check(!nlohmann::json::parse(b, nullptr, false).is_discarded());
        return;
    }
    const dsv4::ParsedRequest& p = std::get<dsv4::ParsedRequest>(r);
    check(p.params.temperature >= 0.0f && p.params.temperature <= 2.0f);
    check(p.params.top_p > 0.0f && p.params.top_p <= 1.0f);
    check(p.n >= 1 && p.n <= 16);
    check(p.params.max_tokens >= 1);
    check(p.params.logprobs <= 20);
    for (const auto& [t, b] : p.params.logit_bias) check(t >= 0 && b >= -100.0f && b <= 100.0f);
    if (chat) {
        (void)dsv4::render_chat(p.messages, dsv4::chat_options(p));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    run(body, true);
    run(body, false);
    return 0;
}
