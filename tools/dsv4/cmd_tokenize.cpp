// `dsv4 tokenize`: text -> ids (JSON) and ids -> text for scripts and users, plus a
// single-threaded encode benchmark. Input is the TEXT argument, a JSONL file with a "text"
// field per line (one JSON id array per output line), or stdin taken verbatim. --chat renders a
// JSON conversation with the DeepSeek-V4 chat format first (--chat-text shows that prompt).
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_request.h"
#include "tokenizer/tokenizer.h"
#include "tools/dsv4/commands.h"

namespace dsv4::cli {
namespace {

struct TokenizeOptions {
    std::string text;
    bool has_text = false;
    std::string jsonl;
    std::string tokenizer_path;
    std::string model_dir;
    bool decode = false;
    bool skip_special = false;
    bool bench = false;
    int bench_reps = 5;
    std::string chat;  // --chat FILE or "-": a conversation rendered with the chat format first
    bool chat_text = false;
};

// Explicit --tokenizer, else --model DIR/tokenizer.json, else .cache/tokenizer/tokenizer.json
// in the working directory or in a parent of the executable's directory (the repo checkout).
Result<std::string> find_tokenizer(const TokenizeOptions& o) {
    namespace fs = std::filesystem;
    if (!o.tokenizer_path.empty()) return o.tokenizer_path;
    if (!o.model_dir.empty()) return (fs::path(o.model_dir) / "tokenizer.json").string();
    const fs::path rel = fs::path(".cache") / "tokenizer" / "tokenizer.json";
    if (fs::exists(rel)) return rel.string();
    std::error_code ec;
    fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    for (; !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
        if (fs::exists(dir / rel)) return (dir / rel).string();
    }
    return Status(StatusCode::kNotFound,
                  "no tokenizer.json: pass --tokenizer FILE or --model DIR, or run scripts/get-tokenizer.sh");
}

Result<std::vector<std::string>> read_jsonl_texts(const std::string& path) {
    std::ifstream in(path);
    if (!in) return Status(StatusCode::kNotFound, fmt::format("cannot open {}", path));
    std::vector<std::string> texts;
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string()) {
            return invalid_argument("{}:{}: expected a JSON object with a string \"text\" field", path, n);
        }
        texts.push_back(j["text"].get<std::string>());
    }
    return texts;
}

// --chat: a JSON messages array, or an object with "messages" and chat options (see
// tokenizer/chat_request.h), rendered to the DeepSeek-V4 prompt text.
Result<std::string> render_chat_file(const std::string& path) {
    std::string text;
    if (path == "-") {
        text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
        std::ifstream in(path, std::ios::binary);
        if (!in) return Status(StatusCode::kNotFound, fmt::format("cannot open {}", path));
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto doc = nlohmann::ordered_json::parse(text, nullptr, false);  // keeps the schemas' key order
    if (doc.is_discarded()) return invalid_argument("--chat {}: not valid JSON", path);
    auto req = parse_chat_request(doc);
    if (!req.is_ok()) return Status(req.status().code(), fmt::format("--chat {}: {}", path, req.status().message()));
    auto prompt = render_chat(req->messages, req->options);
    if (!prompt.is_ok())
        return Status(prompt.status().code(), fmt::format("--chat {}: {}", path, prompt.status().message()));
    return prompt;
}

std::string ids_json(const std::vector<int32_t>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(ids[i]);
    }
    return s + "]";
}

// Ids for --decode: a JSON array, or integers separated by spaces/commas/newlines.
Result<std::vector<int32_t>> parse_ids(const std::string& s) {
    auto j = nlohmann::json::parse(s, nullptr, false);
    std::vector<int32_t> ids;
    if (!j.is_discarded() && j.is_array()) {
        for (const auto& v : j) {
            if (!v.is_number_integer()) return invalid_argument("--decode: ids must be integers");
            ids.push_back(v.get<int32_t>());
        }
        return ids;
    }
    std::string cleaned = s;
    for (char& c : cleaned) {
        if (c == ',' || c == '[' || c == ']') c = ' ';
    }
    std::istringstream in(cleaned);
    std::string tok;
    while (in >> tok) {
        char* end = nullptr;
        const long v = std::strtol(tok.c_str(), &end, 10);
        if (end == tok.c_str() || *end != '\0') return invalid_argument("--decode: {:?} is not an id", tok);
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

int run_bench(const Tokenizer& tok, const std::vector<std::string>& texts, int reps) {
    size_t bytes = 0;
    for (const auto& t : texts) bytes += t.size();
    using clock = std::chrono::steady_clock;
    double best = 1e30, best_cpu = 1e30, first = 0;
    size_t tokens = 0;
    for (int r = 0; r < std::max(1, reps) + 1; ++r) {  // pass 0 is the cold (empty cache) pass
        tokens = 0;
        const auto t0 = clock::now();
        const std::clock_t c0 = std::clock();  // process CPU time: steadier on a loaded machine
        for (const auto& t : texts) {
            auto ids = tok.encode(t);
            if (!ids.is_ok()) {
                fprintf(stderr, "encode failed: %s\n", ids.status().to_string().c_str());
                return 1;
            }
            tokens += ids->size();
        }
        const double s = std::chrono::duration<double>(clock::now() - t0).count();
        const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
        if (r == 0) {
            first = s;
        } else {
            best = std::min(best, s);
            best_cpu = std::min(best_cpu, cpu);
        }
    }
    printf(
        "{\"texts\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, \"cpu_seconds\": %.6f, "
        "\"cold_seconds\": %.6f, \"mb_per_s\": %.3f, \"tokens_per_s\": %.0f}\n",
        texts.size(), bytes, tokens, best, best_cpu, first, bytes / best / 1e6, tokens / best);
    return 0;
}

int run(const TokenizeOptions& o) {
    std::optional<std::string> chat_prompt;
    if (!o.chat.empty() && (o.decode || o.has_text || !o.jsonl.empty())) {
        fprintf(stderr, "dsv4 tokenize: --chat takes no TEXT, --file or --decode\n");
        return 1;
    }
    if (!o.chat.empty()) {
        auto prompt = render_chat_file(o.chat);
        if (!prompt.is_ok()) {
            fprintf(stderr, "dsv4 tokenize: %s\n", prompt.status().message().c_str());
            return 1;
        }
        if (o.chat_text) {  // the prompt only; no tokenizer needed
            fwrite(prompt->data(), 1, prompt->size(), stdout);
            return 0;
        }
        chat_prompt = std::move(prompt).value();
    }
    auto path = find_tokenizer(o);
    if (!path.is_ok()) {
        fprintf(stderr, "dsv4 tokenize: %s\n", path.status().message().c_str());
        return 1;
    }
    auto tok = Tokenizer::from_file(*path);
    if (!tok.is_ok()) {
        fprintf(stderr, "dsv4 tokenize: %s\n", tok.status().to_string().c_str());
        return 1;
    }
    std::vector<std::string> inputs;
    if (chat_prompt) {
        inputs.push_back(std::move(*chat_prompt));
    } else if (!o.jsonl.empty()) {
        auto texts = read_jsonl_texts(o.jsonl);
        if (!texts.is_ok()) {
            fprintf(stderr, "dsv4 tokenize: %s\n", texts.status().message().c_str());
            return 1;
        }
        inputs = std::move(texts).value();
    } else if (o.has_text) {
        inputs.push_back(o.text);
    } else {
        inputs.emplace_back(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    if (o.bench) return run_bench(*tok, inputs, o.bench_reps);

    const auto t0 = std::chrono::steady_clock::now();
    size_t tokens = 0, bytes = 0;
    for (const std::string& in : inputs) {
        if (o.decode) {
            auto ids = parse_ids(in);
            if (!ids.is_ok()) {
                fprintf(stderr, "dsv4 tokenize: %s\n", ids.status().message().c_str());
                return 1;
            }
            const std::string text = tok->decode(*ids, o.skip_special);
            fwrite(text.data(), 1, text.size(), stdout);
            if (!o.jsonl.empty()) fputc('\n', stdout);
            tokens += ids->size();
            bytes += text.size();
        } else {
            auto ids = tok->encode(in);
            if (!ids.is_ok()) {
                fprintf(stderr, "dsv4 tokenize: %s\n", ids.status().to_string().c_str());
                return 1;
            }
            printf("%s\n", ids_json(*ids).c_str());
            tokens += ids->size();
            bytes += in.size();
        }
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    fprintf(stderr, "dsv4 tokenize: %zu text%s, %zu tokens, %zu bytes, %.2f ms (%s)\n", inputs.size(),
            inputs.size() == 1 ? "" : "s", tokens, bytes, ms, path->c_str());
    return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, CommandContext& ctx) {
    auto opts = std::make_shared<TokenizeOptions>();
    auto* cmd = app.add_subcommand("tokenize", "Text to token ids (JSON) and back with --decode");
    cmd->add_option("text", opts->text, "Text to encode (or ids to decode); stdin when omitted");
    cmd->add_option("--file", opts->jsonl, "JSONL file, one {\"text\": ...} object per line")->check(CLI::ExistingFile);
    cmd->add_option("--tokenizer", opts->tokenizer_path, "tokenizer.json to use")->check(CLI::ExistingFile);
    cmd->add_option("--model", opts->model_dir, "Model directory containing tokenizer.json")
        ->check(CLI::ExistingDirectory);
    cmd->add_flag("--decode", opts->decode, "Input is token ids (JSON array or list); prints the text");
    cmd->add_flag("--skip-special", opts->skip_special, "With --decode, drop special tokens");
    cmd->add_flag("--bench", opts->bench, "Print single-threaded encode throughput over the input texts");
    cmd->add_option("--reps", opts->bench_reps, "Benchmark repetitions (best is reported)");
    cmd->add_option("--chat", opts->chat,
                    "JSON conversation (messages array, or object with \"messages\" and options such as "
                    "\"thinking\", \"tools\", \"reasoning_effort\") to render with the DeepSeek-V4 chat "
                    "format, then tokenize; - reads stdin");
    cmd->add_flag("--chat-text", opts->chat_text, "With --chat, print the rendered prompt text instead of ids");
    cmd->callback([opts, cmd, &ctx] {
        opts->has_text = cmd->count("text") > 0;
        ctx.exit_code = run(*opts);
    });
}

}  // namespace dsv4::cli
