// `dsv4 serve`: the OpenAI-compatible HTTP server. Builds a ModelRunner (the built-in tiny
// model on CPU by default, a checkpoint directory, or the deterministic `fake` runner used by
// tests), starts the engine thread and the Beast I/O threads, and runs until SIGINT/SIGTERM
// (exit 0) or until the engine fails for good (exit 3; server/serve_loop.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <spdlog/spdlog.h>

#include "runtime/runner_factory.h"
#include "sched/engine.h"
#include "sched/fake_runner.h"
#include "server/app.h"
#include "server/generation_defaults.h"
#include "server/http_server.h"
#include "server/serve_loop.h"
#include "tokenizer/tokenizer.h"
#include "tools/dsv4/commands.h"
#include "tools/dsv4/runtime_cli.h"

namespace dsv4::cli {
namespace {

struct ServeOptions {
    std::string model = "tiny";
    std::string backend = "cpu";
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string tokenizer;    // "": the model directory's tokenizer.json, else .cache/tokenizer/tokenizer.json
    std::string served_name;  // "": the model directory's name (see default_served_name), else deepseek-v4
    int max_running = 0;      // 0: the backend's default (set_step_budget_defaults)
    double gpu_memory_utilization = 0.9;  // cuda with --n-pages 0: the page pool's share of each GPU
    bool no_overlap = false;              // EngineConfig::overlap off (A/B of the overlap scheduler)
    bool no_prefix_cache = false;         // SchedulerConfig::prefix_cache off
    int max_queued = 1024;
    // 0 = the backend's default (set_step_budget_defaults).
    int64_t max_tokens_per_step = 0;
    int64_t max_prefill_chunk = 0;
    int64_t max_prefill_with_decode = -1;  // SchedulerConfig::max_prefill_tokens_with_decode; -1: backend default
    int64_t max_context = 0;
    int64_t page_tokens = 64;
    int64_t n_pages = 0;
    int io_threads = 2;
    uint64_t seed = 0;
    std::string fake_rules;
    int64_t fake_step_delay_us = 0;
    int64_t fake_token_delay_us = 0;
    int gpus = 1;
    bool synthetic_flash = false;
    int layers = 43;
    std::vector<std::string> options;  // --option KEY=VALUE
    std::string tuning;                // --tuning FILE | none
    std::string api_key;               // "" = the DSV4_API_KEY variable, else no key
    bool guard_health_metrics = false;
    int speculative_tokens = 0;  // SchedulerConfig::speculative_tokens (0: off)
    // SchedulerConfig::speculative_max_batch. Served on the 8-layer proxy (ledger E61, one H100, k = 2):
    // a speculating step costs 2.1x a plain one at one user, 2.5-3.2x at 4-32, so at the published
    // accept length 2.5 speculation gains at 1 (+18%) and about breaks even at 4 (+4%, noisy), and
    // loses from 8 (-12 to -21%).
    int speculative_max_batch = 4;
    std::string speculative_draft = "mtp";  // RunnerOptions::speculative_draft
    double health_stall_s = 60.0;
    double drain_timeout_s = 30.0;  // SIGTERM: how long admitted requests may run on
    HttpServerOptions http;         // host, port and io_threads are set from the fields above
};

// Measured on the 20-layer synthetic Flash proxy (H200, issue 22), when the CUDA runner still
// walked each chunk token by token: 8192/4096 against 512/512 gave 1.7x (128-token prompts), 3.2x
// (1K) and 1.65x (4K) prefill tok/s at 16 users (ledger E23). With batched prefill (E27) and the
// cuBLAS projections (E28) large chunks still pay off (the GEMMs take them whole); what a mixed
// step costs the decoding sequences is bounded separately (--max-prefill-with-decode). One prompt may
// take the whole step (chunk = budget): on a 12-layer proxy (ledger E62, H100) 8192-token chunks
// against 4096 took -8% off an 8K prompt and -6% off a 16K one at one user (the routed experts' GEMM
// runs twice the rows per expert); 16384-token steps gain another 3-4% at 16 users but double the
// step's workspace, so they stay a flag. The CPU reference keeps the small budget (its cost is per
// token; a smaller step keeps decode latency low).
void set_step_budget_defaults(ServeOptions& o) {
    const bool cuda = o.backend == "cuda";
    // The GPU step keeps gaining throughput up to 512 sequences (ledger E21: 256 -> 512 takes the
    // 20-layer proxy from 4.6K to 5.1K tok/s); its page pool is sized from memory (--n-pages 0).
    if (o.max_running <= 0) o.max_running = cuda ? 512 : 64;
    if (o.max_tokens_per_step <= 0) o.max_tokens_per_step = cuda ? 8192 : 512;
    if (o.max_prefill_chunk <= 0) o.max_prefill_chunk = cuda ? 8192 : 512;
    // With 64 users and 1K-token prompts arriving on the 20-layer proxy (ledger E29), 1,024 prefill
    // tokens per decoding step cut the ITL p99 from 754 to 124 ms (TPOT median 61 -> 73 ms, output
    // tok/s -6%); the CPU reference's 512-token budget already bounds its steps.
    if (o.max_prefill_with_decode < 0) o.max_prefill_with_decode = cuda ? 1024 : 0;
}

Result<std::unique_ptr<ModelRunner>> make_runner(const ServeOptions& o) {
    if (o.model == "fake") {
        if (o.speculative_tokens > 0)
            return invalid_argument("--speculative-tokens needs a model (the fake one has no MTP block)");
        FakeRunnerOptions fo;
        fo.step_delay_us = o.fake_step_delay_us;
        fo.token_delay_us = o.fake_token_delay_us;
        if (o.max_context > 0) fo.max_context = o.max_context;
        if (o.n_pages > 0) fo.n_pages = o.n_pages;
        fo.page_tokens = 16;
        // The fault hook is a run-time option of every backend that honours it (docs/env.md).
        DSV4_ASSIGN_OR_RETURN(const RuntimeOptions rt, resolve_runtime_options(o.options, false));
        fo.fault_inject_step = rt.fault_inject_step;
        if (!o.fake_rules.empty()) {
            std::ifstream f(o.fake_rules);
            if (!f) return error(StatusCode::kNotFound, "cannot read --fake-rules {}", o.fake_rules);
            std::stringstream ss;
            ss << f.rdbuf();
            DSV4_RETURN_IF_ERROR(FakeRunner::parse_rules(ss.str(), fo.rules));
        }
        return std::unique_ptr<ModelRunner>(std::make_unique<FakeRunner>(fo));
    }
    RunnerOptions ro;
    ro.model = o.model;
    ro.backend = o.backend;
    ro.page_tokens = o.page_tokens;
    ro.n_pages = o.n_pages;
    ro.gpu_memory_utilization = o.gpu_memory_utilization;
    ro.seed = o.seed;
    ro.gpus = o.gpus;
    ro.max_seqs = std::max(o.max_running, 1);
    // The runner's per-sequence and per-step limits follow the engine's (workspaces are sized by
    // them); with --max-context 0 the runner keeps its default and the engine takes the smaller.
    ro.max_context = o.max_context > 0 ? o.max_context : (o.model == "tiny" || o.synthetic_flash) ? 4096 : 0;
    ro.max_step_tokens = int(std::max<int64_t>(o.max_tokens_per_step, std::max(o.max_running, 1)));
    if (o.synthetic_flash) ro.synthetic_flash_layers = o.layers;
    ro.speculative_tokens = o.speculative_tokens;
    ro.speculative_draft = o.speculative_draft;
    DSV4_ASSIGN_OR_RETURN(ro.rt, resolve_runtime_options(o.options, o.backend == "cuda", &ro, o.tuning));
    return make_model_runner(ro);
}

bool is_model_dir(const std::string& model) {
    std::error_code ec;
    return model != "tiny" && model != "fake" && std::filesystem::is_directory(model, ec);
}

std::string default_tokenizer(const std::string& model) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (is_model_dir(model) && fs::exists(fs::path(model) / "tokenizer.json", ec))
        return (fs::path(model) / "tokenizer.json").string();
    return ".cache/tokenizer/tokenizer.json";
}

// The directory's name; for a Hugging Face cache snapshot
// (.../models--ORG--NAME/snapshots/HASH) the repository id ORG/NAME.
std::string default_served_name(const std::string& model) {
    namespace fs = std::filesystem;
    if (!is_model_dir(model)) return "deepseek-v4";
    fs::path p = fs::path(model).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    const std::string repo = p.parent_path().parent_path().filename().string();
    if (p.parent_path().filename() == "snapshots" && repo.rfind("models--", 0) == 0) {
        std::string id = repo.substr(8);
        if (const size_t at = id.find("--"); at != std::string::npos) id.replace(at, 2, "/");
        return id;
    }
    return p.filename().string();
}

int run_serve(ServeOptions o) {
    if (o.tokenizer.empty()) o.tokenizer = default_tokenizer(o.model);
    if (o.served_name.empty()) o.served_name = default_served_name(o.model);
    auto tok = Tokenizer::from_file(o.tokenizer);
    if (!tok.is_ok()) {
        std::fprintf(stderr,
                     "dsv4 serve: cannot load the tokenizer (%s).\n"
                     "Run scripts/get-tokenizer.sh, or pass --tokenizer FILE.\n",
                     tok.status().to_string().c_str());
        return 2;
    }
    AppOptions app_opt;
    app_opt.model_name = o.served_name;
    // The key from the environment keeps it out of the process list (the flag wins when given).
    if (o.api_key.empty())
        if (const char* k = std::getenv("DSV4_API_KEY"); k && *k) o.api_key = k;
    app_opt.api_key = o.api_key;
    app_opt.guard_health_metrics = o.guard_health_metrics;
    app_opt.health_stall_s = o.health_stall_s;
    if (!o.api_key.empty())
        std::fprintf(stderr, "dsv4 serve: API key required on /v1 routes and /tokenize, /detokenize%s\n",
                     o.guard_health_metrics ? ", /health, /ready and /metrics" : "");
    if (is_model_dir(o.model)) {  // checked before the weights load: a bad file fails fast
        auto gd = load_generation_defaults(o.model);
        if (!gd.is_ok()) {
            std::fprintf(stderr, "dsv4 serve: %s\n", gd.status().to_string().c_str());
            return 2;
        }
        app_opt.defaults = gd->params;
        app_opt.default_max_tokens = gd->max_tokens;
        if (!gd->summary.empty()) std::fprintf(stderr, "dsv4 serve: request defaults from %s\n", gd->summary.c_str());
    }
    auto runner = make_runner(o);
    if (!runner.is_ok()) {
        std::fprintf(stderr, "dsv4 serve: %s\n", runner.status().to_string().c_str());
        return 2;
    }
    EngineConfig cfg;
    cfg.sched.max_running = o.max_running;
    cfg.sched.max_tokens_per_step = o.max_tokens_per_step;
    cfg.sched.max_prefill_chunk = o.max_prefill_chunk;
    cfg.sched.max_prefill_tokens_with_decode = o.max_prefill_with_decode;
    cfg.max_queued = o.max_queued;
    cfg.max_context = o.max_context;
    if (o.no_overlap) cfg.overlap = EngineConfig::Overlap::kOff;
    cfg.sched.prefix_cache = !o.no_prefix_cache;
    cfg.sched.speculative_tokens = o.speculative_tokens;
    cfg.sched.speculative_max_batch = o.speculative_max_batch;
    if (o.speculative_tokens > 0)
        std::fprintf(stderr,
                     "dsv4 serve: speculative decoding with %d %s draft tokens per verify step, up to %d "
                     "running sequences\n",
                     o.speculative_tokens, o.speculative_draft.c_str(), o.speculative_max_batch);
    // The built-in tiny model claims a 1M context; a demo needs far less than that.
    if ((o.model == "tiny" || o.synthetic_flash) && o.max_context == 0) cfg.max_context = 4096;
    Engine engine(std::move(runner.value()), cfg);
    engine.start();
    App app(engine, std::move(tok.value()), app_opt);
    HttpServerOptions ho = o.http;
    ho.host = o.host;
    ho.port = uint16_t(o.port);
    ho.io_threads = o.io_threads;
    HttpServer server(app, ho);
    if (Status s = server.start(); !s.is_ok()) {
        std::fprintf(stderr, "dsv4 serve: %s\n", s.to_string().c_str());
        engine.stop();
        return 2;
    }
    // Tests read this line to learn the port (with --port 0).
    std::printf("dsv4 serve: model %s (%s), context %lld, listening on http://%s:%u\n",
                o.synthetic_flash
                    ? ("synthetic-flash-" + std::to_string(o.layers) + "L x" + std::to_string(o.gpus) + "gpu").c_str()
                    : o.model.c_str(),
                o.served_name.c_str(), (long long)engine.max_context(), o.host.c_str(), unsigned(server.port()));
    std::fflush(stdout);
    // Until SIGTERM/SIGINT (drain, exit 0) or a lost GPU (every request failed, exit 3: restart).
    ServeLoopOptions lo;
    lo.drain_timeout_s = o.drain_timeout_s;
    return run_serve_loop(server, app, engine, lo);
}

}  // namespace

void register_serve(CLI::App& app, CommandContext& ctx) {
    auto o = std::make_shared<ServeOptions>();
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
    cmd->add_option("--model", o->model, "tiny (built-in), a checkpoint directory, or fake");
    cmd->add_option("--backend", o->backend, "cpu | cuda");
    cmd->add_option("--host", o->host, "address to listen on");
    cmd->add_option("--port", o->port, "port (0 = any free port)");
    cmd->add_option("--tokenizer", o->tokenizer,
                    "tokenizer.json (default: the model directory's, else .cache/tokenizer/tokenizer.json)");
    cmd->add_option("--served-model-name", o->served_name,
                    "model name clients must use (default: the model directory's name)");
    cmd->add_option("--max-running", o->max_running, "sequences in the running batch (0 = 512 on cuda, 64 on cpu)");
    cmd->add_option("--gpu-memory-utilization", o->gpu_memory_utilization,
                    "cuda with --n-pages 0: share of each GPU's memory for weights, workspaces and the page pool")
        ->check(CLI::Range(0.05, 1.0));
    cmd->add_flag("--no-prefix-cache", o->no_prefix_cache,
                  "compute every prompt from its first token (no reuse of cached prefix blocks)");
    cmd->add_flag("--no-overlap-schedule", o->no_overlap,
                  "launch and collect each step in turn instead of planning the next step while one runs");
    cmd->add_option(
           "--speculative-tokens", o->speculative_tokens,
           "speculative decoding: draft tokens per verify step, 1-3, from the checkpoint's MTP block (0 = off; "
           "one GPU on cuda; requests with logprobs or structured output decode without it)")
        ->check(CLI::Range(0, 3));
    cmd->add_option("--speculative-max-batch", o->speculative_max_batch,
                    "speculate only in steps of at most this many running sequences (0 = always; default 4)");
    cmd->add_option(
           "--speculative-draft", o->speculative_draft,
           "mtp (the checkpoint's MTP block) | self (the model's own greedy tokens: a test mode, no speed-up; cpu "
           "backend only)")
        ->check(CLI::IsMember({"mtp", "self"}));
    cmd->add_option("--max-queued", o->max_queued, "waiting requests before 429");
    cmd->add_option("--max-tokens-per-step", o->max_tokens_per_step,
                    "token budget of one step (0 = 8192 on cuda, 512 on cpu)");
    cmd->add_option("--max-prefill-chunk", o->max_prefill_chunk,
                    "largest prefill chunk (0 = 8192 on cuda, 512 on cpu)");
    cmd->add_option("--max-prefill-with-decode", o->max_prefill_with_decode,
                    "prefill tokens of a step that also decodes (bounds inter-token latency; -1 = 1024 on cuda, 0 on "
                    "cpu; 0 = only the step budget)");
    cmd->add_option(
        "--api-key", o->api_key,
        "require 'Authorization: Bearer KEY' on /v1 routes and /tokenize, /detokenize (default: $DSV4_API_KEY)");
    cmd->add_flag("--guard-health-metrics", o->guard_health_metrics,
                  "with --api-key, also guard /health, /ready and /metrics");
    cmd->add_option("--health-stall-s", o->health_stall_s,
                    "GET /health answers 503 when requests wait and the engine made no progress this long (0 = never)");
    cmd->add_option("--drain-timeout-s", o->drain_timeout_s,
                    "on SIGTERM/SIGINT: refuse new requests and let admitted ones finish this long (default 30)");
    cmd->add_option("--max-body-bytes", o->http.max_body_bytes, "largest request body (413 beyond; default 8 MiB)");
    cmd->add_option("--max-header-bytes", o->http.max_header_bytes,
                    "largest request head (431 beyond; default 64 KiB)");
    cmd->add_option("--idle-timeout-s", o->http.idle_timeout_s,
                    "keep-alive connections idle this long are closed (default 300)")
        ->check(CLI::Range(1, 86400));
    cmd->add_option("--request-timeout-s", o->http.request_timeout_s,
                    "a request not fully received this long after its first byte closes its connection (default 60)")
        ->check(CLI::Range(1, 86400));
    cmd->add_option(
           "--write-timeout-s", o->http.write_timeout_s,
           "a client that takes none of a reply for this long is closed and its request cancelled (default 60)")
        ->check(CLI::Range(1, 86400));
    cmd->add_option("--max-write-buffer-bytes", o->http.max_write_buffer_bytes,
                    "reply bytes queued behind a client that reads too slowly before it is closed and its request "
                    "cancelled (default 16 MiB)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--max-connections", o->http.max_connections,
                    "open connections beyond this get 503 and are closed (default 4096)");
    cmd->add_option("--max-context", o->max_context, "prompt + output tokens (0 = the model's; 4096 for tiny)");
    cmd->add_option("--page-tokens", o->page_tokens, "tokens per cache page");
    cmd->add_option("--n-pages", o->n_pages, "cache pages (0 = cuda: from --gpu-memory-utilization; cpu: a default)");
    cmd->add_option("--io-threads", o->io_threads, "HTTP I/O threads");
    cmd->add_option("--seed", o->seed, "seed of the built-in tiny model");
    cmd->add_option("--gpus", o->gpus, "cuda: expert parallel over this many GPUs (NCCL; default 1)");
    cmd->add_flag("--synthetic-flash", o->synthetic_flash,
                  "cuda: serve the synthetic Flash proxy (Flash shapes, seeded weights, meaningless text)");
    cmd->add_option("--layers", o->layers, "layers of --synthetic-flash (default 43 = full Flash)");
    add_runtime_option_flag(cmd, &o->options, &o->tuning);
    cmd->add_option("--fake-rules", o->fake_rules, "fake model: JSON script rules");
    cmd->add_option("--fake-step-delay-us", o->fake_step_delay_us, "fake model: delay per step");
    cmd->add_option("--fake-token-delay-us", o->fake_token_delay_us, "fake model: delay per token");
    cmd->callback([o, &ctx] {
        set_step_budget_defaults(*o);
        ctx.exit_code = run_serve(*o);
    });
}

}  // namespace dsv4::cli
