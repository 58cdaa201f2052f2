// `dsv4 generate`: run a prompt through a model and print tokens as they are produced, through the
// serving engine (EngineCore) as one request.
// Model: `--model tiny` (built-in, seeded, real vocabulary) or an HF checkpoint directory.
// Prompt: `--prompt TEXT` (rendered with the DeepSeek-V4 chat format unless --raw, then
// tokenized) or `--prompt-ids 1,2,3`.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/runner_factory.h"
#include "sched/engine_core.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tools/dsv4/commands.h"
#include "tools/dsv4/runtime_cli.h"

namespace dsv4::cli {

namespace {

struct GenerateArgs {
    std::string model = "tiny";
    std::string backend = "cpu";
    std::string prompt;
    std::string prompt_ids;
    std::string tokenizer;
    bool raw = false;
    bool thinking = false;
    int64_t max_tokens = 32;
    float temperature = 0.0f;
    float top_p = 1.0f;
    int top_k = 0;
    uint64_t seed = 0;
    bool ignore_eos = false;
    bool reference_numerics = false;
    int gpus = 1;
    std::string kv_rows;
    std::vector<std::string> options;  // --option KEY=VALUE
    std::string tuning;                // --tuning FILE | none
    int speculative_tokens = 0;
    std::string speculative_draft = "mtp";
};

Result<std::vector<int32_t>> parse_ids(const std::string& s) {
    std::vector<int32_t> ids;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        char* end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (*end != '\0' || v < INT32_MIN || v > INT32_MAX)
            return invalid_argument("--prompt-ids: '{}' is not an integer token id", item);
        ids.push_back(int32_t(v));
    }
    if (ids.empty()) return invalid_argument("--prompt-ids: no ids given");
    return ids;
}

std::string default_tokenizer_path(const std::string& model) {
    namespace fs = std::filesystem;
    if (model != "tiny" && fs::exists(fs::path(model) / "tokenizer.json"))
        return (fs::path(model) / "tokenizer.json").string();
    return ".cache/tokenizer/tokenizer.json";
}

// Prints each token as the engine reports it (text through the incremental detokenizer, else ids).
class PrintSink : public RequestSink {
public:
    explicit PrintSink(const Tokenizer* tok) {
        if (tok) detok_.emplace(*tok, /*skip_special_tokens=*/false);
    }
    void on_event(SeqEvent&& ev) override {
        if (ttft_s == 0 && (!ev.tokens.empty() || ev.finish != FinishReason::kNone))
            ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        for (int32_t t : ev.tokens) {
            if (detok_)
                std::fputs(detok_->push(t).c_str(), stdout);
            else
                std::printf("%d ", t);
        }
        std::fflush(stdout);
        completion_tokens = ev.completion_tokens;
        if (ev.finish == FinishReason::kError) error = ev.error;
    }
    void finish_text() {
        if (detok_) std::fputs(detok_->finish().c_str(), stdout);
        std::printf("\n");
    }
    std::chrono::steady_clock::time_point start;
    double ttft_s = 0;
    int64_t completion_tokens = 0;  // including a final EOS
    std::string error;

private:
    std::optional<IncrementalDetokenizer> detok_;
};

Status run_generate(const GenerateArgs& a) {
    if (a.prompt.empty() == a.prompt_ids.empty())
        return invalid_argument("give exactly one of --prompt TEXT or --prompt-ids IDS");
    if (a.max_tokens < 1) return invalid_argument("--max-tokens must be >= 1, got {}", a.max_tokens);

    std::optional<Tokenizer> tok;
    const std::string tok_path = a.tokenizer.empty() ? default_tokenizer_path(a.model) : a.tokenizer;
    if (std::filesystem::exists(tok_path)) {
        auto t = Tokenizer::from_file(tok_path);
        if (!t) return t.status();
        tok = std::move(t).value();
    }
    std::vector<int32_t> prompt;
    if (!a.prompt_ids.empty()) {
        DSV4_ASSIGN_OR_RETURN(prompt, parse_ids(a.prompt_ids));
    } else {
        if (!tok)
            return error(StatusCode::kNotFound,
                         "--prompt needs a tokenizer: '{}' not found (run scripts/get-tokenizer.sh or pass "
                         "--tokenizer FILE)",
                         tok_path);
        std::string text = a.prompt;
        if (!a.raw) {
            ChatOptions co;
            co.thinking = a.thinking;
            nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", a.prompt}}});
            DSV4_ASSIGN_OR_RETURN(text, render_chat(msgs, co));
        }
        DSV4_ASSIGN_OR_RETURN(prompt, tok->encode(text));
    }

    RunnerOptions ro;
    ro.model = a.model;
    ro.backend = a.backend;
    ro.seed = 0;
    ro.numerics.kv_fp8 = ro.numerics.indexer_fp4 = a.reference_numerics;
    ro.gpus = a.gpus;
    {
        std::vector<std::string> settings = a.options;
        if (!a.kv_rows.empty()) settings.insert(settings.begin(), "kv_rows=" + a.kv_rows);  // --option still wins
        DSV4_ASSIGN_OR_RETURN(ro.rt, resolve_runtime_options(settings, a.backend == "cuda", &ro, a.tuning));
    }
    ro.speculative_tokens = a.speculative_tokens;
    ro.speculative_draft = a.speculative_draft;
    const auto t_load = std::chrono::steady_clock::now();
    DSV4_ASSIGN_OR_RETURN(auto runner, make_model_runner(ro));
    const ModelConfig& cfg = runner->config();
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    std::fprintf(stderr, "model: %s (loaded in %.2f s)\n", cfg.summary().c_str(), load_s);

    // One request through the serving engine (EngineCore): the same chunked prefill, sampling
    // (on the device where the runner can), stop handling and speculation as `dsv4 serve`.
    const bool cuda = a.backend == "cuda";
    EngineConfig ec;
    ec.sched.max_running = 1;
    ec.sched.max_tokens_per_step = cuda ? 8192 : 512;
    ec.sched.max_prefill_chunk = cuda ? 4096 : 512;
    ec.sched.speculative_tokens = a.speculative_tokens;
    EngineStats stats;
    EngineCore core(*runner, ec, stats);

    GenRequest req;
    req.id = 1;
    req.prompt = prompt;
    req.params.temperature = a.temperature;
    req.params.top_p = a.top_p;
    req.params.top_k = a.top_k;
    req.params.seed = a.seed;
    req.params.max_tokens = a.max_tokens;
    req.params.ignore_eos = a.ignore_eos;
    auto sink = std::make_shared<PrintSink>(tok ? &*tok : nullptr);
    req.sink = sink;
    const auto t0 = std::chrono::steady_clock::now();
    sink->start = t0;
    DSV4_RETURN_IF_ERROR(core.add(std::move(req)));
    while (core.has_work()) core.step();
    sink->finish_text();
    if (!sink->error.empty()) return error(StatusCode::kInternal, "{}", sink->error);
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double decode_s = total_s - sink->ttft_s;
    const int64_t n = sink->completion_tokens;
    std::fprintf(stderr, "prompt tokens: %zu, generated tokens: %lld, prefill %.3f s (%.1f tok/s), decode %.1f tok/s\n",
                 prompt.size(), (long long)n, sink->ttft_s, double(prompt.size()) / std::max(sink->ttft_s, 1e-9),
                 n > 1 ? double(n - 1) / std::max(decode_s, 1e-9) : 0.0);
    if (stats.spec_verify_chunks_total > 0)
        std::fprintf(
            stderr, "speculative decoding: %lld verify steps, %lld of %lld drafts accepted, accept length %.2f\n",
            (long long)stats.spec_verify_chunks_total.load(), (long long)stats.spec_accepted_tokens_total.load(),
            (long long)stats.spec_draft_tokens_total.load(),
            1.0 + double(stats.spec_accepted_tokens_total) / double(stats.spec_verify_chunks_total));
    return Status::ok();
}

}  // namespace

void register_generate(CLI::App& app, CommandContext& ctx) {
    auto args = std::make_shared<GenerateArgs>();
    auto* cmd = app.add_subcommand("generate", "Generate tokens from a prompt");
    cmd->add_option("--model", args->model, "'tiny' (built-in seeded model) or an HF checkpoint directory");
    cmd->add_option("--backend", args->backend, "cpu | cuda");
    cmd->add_option("--prompt", args->prompt, "prompt text (chat-formatted unless --raw)");
    cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated prompt token ids");
    cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: model dir or .cache/tokenizer)");
    cmd->add_flag("--raw", args->raw, "tokenize --prompt as is, without the chat format");
    cmd->add_flag("--thinking", args->thinking, "chat format in thinking mode");
    cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate");
    cmd->add_option("--temperature", args->temperature, "0 = greedy");
    cmd->add_option("--top-p", args->top_p);
    cmd->add_option("--top-k", args->top_k);
    cmd->add_option("--seed", args->seed, "sampling seed");
    cmd->add_flag("--ignore-eos", args->ignore_eos);
    cmd->add_option("--gpus", args->gpus, "cuda: expert parallel over this many GPUs (NCCL; default 1)");
    cmd->add_option("--kv-rows", args->kv_rows,
                    "cuda: KV row storage fp8 (default), bf16 or f32 (= --option kv_rows=...)");
    cmd->add_option(
           "--speculative-tokens", args->speculative_tokens,
           "speculative decoding: draft tokens per verify step, 1-3, from the MTP block (0 = off; one GPU on cuda)")
        ->check(CLI::Range(0, 3));
    cmd->add_option("--speculative-draft", args->speculative_draft,
                    "mtp | self (the model's own tokens: a test mode, cpu backend only)")
        ->check(CLI::IsMember({"mtp", "self"}));
    add_runtime_option_flag(cmd, &args->options, &args->tuning);
    cmd->add_flag("--reference-numerics", args->reference_numerics,
                  "simulate the DeepSeek reference's FP8 KV and FP4 indexer (CPU backend)");
    cmd->callback([args, &ctx] {
        Status s = run_generate(*args);
        if (!s.is_ok()) {
            std::fprintf(stderr, "dsv4 generate: %s\n", s.message().c_str());
            ctx.exit_code = 2;
        }
    });
}

}  // namespace dsv4::cli
