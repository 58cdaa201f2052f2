// `dsv4 generate`: run a prompt through a model and print tokens as they are produced.
// Model: `--model tiny` (built-in, seeded, real vocabulary) or an HF checkpoint directory.
// Prompt: `--prompt TEXT` (rendered with the DeepSeek-V4 chat format unless --raw, then
// tokenized) or `--prompt-ids 1,2,3`.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/ref_runner.h"
#include "runtime/runner_factory.h"
#include "sample/sampler.h"
#include "sched/device_sample.h"
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
                         "--tokenizer FILE)", tok_path);
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
    const auto t_load = std::chrono::steady_clock::now();
    DSV4_ASSIGN_OR_RETURN(auto runner, make_model_runner(ro));
    const ModelConfig& cfg = runner->config();
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    std::fprintf(stderr, "model: %s (loaded in %.2f s)\n", cfg.summary().c_str(), load_s);

    SimplePagePool pages(runner->n_pages());
    std::vector<int32_t> table;
    if (!pages.grow(table, runner->kv_layout().pages_for_tokens(int64_t(prompt.size()) + a.max_tokens)))
        return error(StatusCode::kResourceExhausted, "prompt of {} tokens + {} new tokens does not fit the cache",
                     prompt.size(), a.max_tokens);

    SamplingParams sp;
    sp.temperature = a.temperature;
    sp.top_p = a.top_p;
    sp.top_k = a.top_k;
    sp.seed = a.seed;
    sp.max_tokens = a.max_tokens;
    PenaltyState penalties;
    penalties.reset(prompt, {});
    std::optional<IncrementalDetokenizer> detok;
    if (tok) detok.emplace(*tok, /*skip_special_tokens=*/false);

    std::vector<int32_t> chunk = prompt, output;
    int64_t pos = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double ttft_s = 0;
    // Sampled where the logits are when the runner can (no logits copy): plain greedy as an
    // argmax, anything else by the runner's full sampler (the same tokens as the host's).
    const bool dev_greedy = runner->supports_device_sample(DeviceSample::kGreedy);
    const bool dev_full = runner->supports_device_sample(DeviceSample::kFull);
    for (int64_t i = 0; i < a.max_tokens; ++i) {
        SampleContext ctx{a.seed, 0, i, false, int32_t(cfg.eos_token_id)};
        DeviceSample mode = DeviceSample::kNone;
        if (dev_greedy && sample_is_plain_argmax(sp, ctx)) mode = DeviceSample::kGreedy;
        else if (dev_full) mode = DeviceSample::kFull;
        const std::vector<PenaltyToken> pen =
            mode == DeviceSample::kFull ? penalty_tokens(sp, penalties, ctx) : std::vector<PenaltyToken>{};
        ForwardBatch batch;
        batch.seqs.push_back(SeqChunk{.seq_id = 1, .tokens = chunk, .start_pos = pos, .want_logits = true,
                                      .page_table = table, .sample = mode,
                                      .params = device_sample_params(sp, ctx, pen)});
        StepOutput out;
        DSV4_RETURN_IF_ERROR(runner->forward_sampled(batch, out));
        pos += int64_t(chunk.size());
        SampleResult s;
        if (mode != DeviceSample::kNone) s.token = out.tokens.at(0);
        else s = sample_token(out.logits.at(0), sp, penalties, ctx);
        if (i == 0) ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        output.push_back(s.token);
        penalties.add_output(s.token);
        if (detok) std::fputs(detok->push(s.token).c_str(), stdout);
        else std::printf("%d ", s.token);
        std::fflush(stdout);
        if (s.token == cfg.eos_token_id && !a.ignore_eos) break;
        chunk = {s.token};
    }
    if (detok) std::fputs(detok->finish().c_str(), stdout);
    std::printf("\n");
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double decode_s = total_s - ttft_s;
    std::fprintf(stderr,
                 "prompt tokens: %zu, generated tokens: %zu, prefill %.3f s (%.1f tok/s), decode %.1f tok/s\n",
                 prompt.size(), output.size(), ttft_s, double(prompt.size()) / std::max(ttft_s, 1e-9),
                 output.size() > 1 ? double(output.size() - 1) / std::max(decode_s, 1e-9) : 0.0);
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
    cmd->add_option("--kv-rows", args->kv_rows, "cuda: KV row storage fp8 (default), bf16 or f32 (= --option kv_rows=...)");
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
