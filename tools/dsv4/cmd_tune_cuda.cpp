// `dsv4 tune` on the GPU: the Flash proxy's decode step through the CUDA runner (synthetic weights,
// synthetic context) as the TuneBench of src/tune/tuner.h, the candidates from the kernel registries,
// then the tuning file and the ledger. The decisions and their statistics are tuner.h's.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "kernels/cuda/attention/sparse_decode.h"
#include "kernels/cuda/attention/sparse_decode_check.h"
#include "kernels/cuda/gemm/dense_gemv.h"
#include "kernels/cuda/moe/moe.h"
#include "model/flash_proxy.h"
#include "model/kv_rows.h"
#include "runtime/cuda_bench_runner.h"
#include "runtime/synthetic_context.h"
#include "runtime/tuning_select.h"
#include "tools/dsv4/cmd_tune.h"
#include "tools/dsv4/runtime_cli.h"
#include "tune/calibrate.h"
#include "tune/tune_ledger.h"
#include "tune/tuner.h"

namespace dsv4::cli {
namespace {

using tune::ShapePoint;

// The op's span in the step's op profile (runtime/cuda_runner_layers.cpp's marks).
const char* profile_label(TunedOp op) {
    switch (op) {
        case TunedOp::kSparseDecode:
            return "sparse_decode";
        case TunedOp::kMoeExpert:
        case TunedOp::kMoeGrouped:
            return "routed experts";
        case TunedOp::kDenseGemv:
            return nullptr;  // spread over many marks: no kernel stage
    }
    return nullptr;
}

class ProxyTuneBench : public tune::TuneBench {
public:
    ProxyTuneBench(CudaBenchRunner& r, const ModelConfig& cfg, const TuneCliOptions& o, cuda::KvFormat kfmt)
        : r_(r), cfg_(cfg), o_(o), kfmt_(kfmt) {}

    Status set_rules(const std::vector<TuningRule>& rules) override {
        DSV4_RETURN_IF_ERROR(r_.set_tuning_rules(rules));
        rules_ = rules;
        return Status::ok();
    }

    // sparse_decode rules: the op itself against fp64 (kernels/cuda/attention/sparse_decode_check.h)
    // at the point's batch and the rows its attention reads (the window plus the top-k compressed rows,
    // or the context when shorter), with the rule's variant and split-KV target. The step's logits are
    // no test of a reordered reduction: through 20 layers of top-k selection and expert routing a
    // rounding difference flips discrete choices (ledger E40: every change of the split count moved the
    // logits by 2-4 standard deviations, every unchanged one left them bitwise equal). Other ops: the
    // logits against the heuristics', within --max-logit-error of their sd.
    Result<Correctness> correctness(const ShapePoint& p) override {
        if (!rules_.empty() && std::all_of(rules_.begin(), rules_.end(),
                                           [](const TuningRule& r) { return r.op == TunedOp::kSparseDecode; })) {
            Correctness c;
            const int rows = int(std::min<int64_t>(p.context + 1, cfg_.sliding_window) +
                                 std::min<int64_t>((p.context + 1) / 4, cfg_.index_topk));
            for (const TuningRule& r : rules_) {
                const int v = cuda::variant_by_name(r.variant, cuda::sparse_decode_variant_count(),
                                                    [](int i) { return cuda::sparse_decode_variant_name(i); });
                if (v < 0 && !r.variant.empty()) return invalid_argument("no sparse_decode variant {}", r.variant);
                DSV4_ASSIGN_OR_RETURN(const cuda::SparseDecodeCheck k,
                                      cuda::check_sparse_decode(kfmt_, int(cfg_.n_heads), p.batch, rows, v,
                                                                r.split_kv_target_ctas, uint32_t(o_.seed + 17)));
                if (k.error() >= c.error)
                    c = {k.error(),
                         fmt::format("sparse_decode vs fp64 ({} rows, {} split(s)): rel L2 {:.3g} (bound "
                                     "{:.0e}), max abs {:.3g} (bound {:.0e}){}",
                                     rows, k.splits, k.rel_l2, k.kRelL2Bound, k.max_abs, k.kMaxAbsBound,
                                     k.nan_mismatch ? fmt::format(", {} NaN mismatches", k.nan_mismatch) : "")};
            }
            return c;
        }
        DSV4_ASSIGN_OR_RETURN(const double e, logit_error(p));
        return Correctness{e / o_.max_logit_error,
                           fmt::format("logits vs the heuristics': max difference {:.3g} x their sd (bound {:.3g})", e,
                                       o_.max_logit_error)};
    }

    Result<double> op_ms(const ShapePoint& p, TunedOp op) override {
        const char* label = profile_label(op);
        if (!label) return error(StatusCode::kUnimplemented, "no kernel stage for {}", tuned_op_name(op));
        DSV4_RETURN_IF_ERROR(ensure_filled(p));
        DSV4_ASSIGN_OR_RETURN(const DecodeGraphTiming t, r_.time_decode_graph(batch_, 1, 1, /*op_profile=*/true));
        const auto it = t.op_us.find(label);
        if (it == t.op_us.end()) return error(StatusCode::kInternal, "op profile has no '{}' span", label);
        return it->second / 1000.0;
    }

    Result<double> step_ms(const ShapePoint& p) override {
        DSV4_RETURN_IF_ERROR(ensure_filled(p));
        DSV4_ASSIGN_OR_RETURN(DecodeGraphTiming t, r_.time_decode_graph(batch_, o_.warmup, o_.reps));
        std::sort(t.step_us.begin(), t.step_us.end());
        return t.step_us[t.step_us.size() / 2] / 1000.0;
    }

    // The delay is a fraction of the heuristics' step at p, measured once (median of 3 measurements).
    Status set_slowdown(const ShapePoint& p, double fraction) override {
        if (fraction <= 0) return r_.set_test_delay_ns(0);
        const auto key = std::make_pair(p.batch, p.context);
        auto it = base_ms_.find(key);
        if (it == base_ms_.end()) {
            DSV4_RETURN_IF_ERROR(r_.set_test_delay_ns(0));
            std::vector<double> v;
            for (int i = 0; i < 3; ++i) {
                DSV4_ASSIGN_OR_RETURN(const double ms, step_ms(p));
                v.push_back(ms);
            }
            std::sort(v.begin(), v.end());
            it = base_ms_.emplace(key, v[1]).first;
        }
        return r_.set_test_delay_ns(int64_t(fraction * it->second * 1e6));
    }

private:
    Result<double> logit_error(const ShapePoint& p) {
        const auto key = std::make_pair(p.batch, p.context);
        auto it = ref_.find(key);
        if (it == ref_.end()) {
            const std::vector<TuningRule> keep = rules_;
            DSV4_RETURN_IF_ERROR(set_rules({}));
            DSV4_ASSIGN_OR_RETURN(auto ref, fresh_step(p));
            DSV4_RETURN_IF_ERROR(set_rules(keep));
            it = ref_.emplace(key, std::move(ref)).first;
        }
        DSV4_ASSIGN_OR_RETURN(const auto got, fresh_step(p));
        double worst = 0, sum = 0, sum2 = 0;
        int64_t n = 0;
        for (size_t s = 0; s < got.size(); ++s)
            for (size_t i = 0; i < got[s].size(); ++i) {
                const double a = it->second[s][i], b = got[s][i];
                if (!std::isfinite(b)) return std::numeric_limits<double>::infinity();
                worst = std::max(worst, std::fabs(a - b));
                sum += a;
                sum2 += a * a;
                ++n;
            }
        const double sd = std::sqrt(std::max(0.0, sum2 / double(std::max<int64_t>(n, 1)) - (sum / n) * (sum / n)));
        return sd > 0 ? worst / sd : worst;
    }

    // The batch of point p on a freshly filled context (the same rows every time: same seed).
    Status fill(const ShapePoint& p) {
        DSV4_RETURN_IF_ERROR(r_.for_each_pool([&](const CudaPoolInfo& pool) {
            return fill_synthetic_context(pool, r_.kv_layout(), cfg_, p.batch, p.context,
                                          o_.seed * 7919 + uint64_t(p.context));
        }));
        batch_ = ForwardBatch{};
        std::mt19937 g(uint32_t(o_.seed + uint64_t(p.batch)));
        toks_.assign(size_t(p.batch), {});
        tables_.assign(size_t(p.batch), {});
        for (int q = 0; q < p.batch; ++q) {  // the chunks view toks_ and tables_
            toks_[size_t(q)] = {int32_t(g() % uint32_t(cfg_.vocab_size))};
            tables_[size_t(q)] = synthetic_page_table(r_.kv_layout(), q, p.context);
            SeqChunk c;
            c.seq_id = q;
            c.tokens = toks_[size_t(q)];
            c.start_pos = p.context;
            c.want_logits = true;
            c.page_table = tables_[size_t(q)];
            batch_.seqs.push_back(std::move(c));
        }
        filled_ = {p.batch, p.context};
        return Status::ok();
    }
    Status ensure_filled(const ShapePoint& p) {
        return filled_ == std::make_pair(p.batch, p.context) ? Status::ok() : fill(p);
    }
    // One step's logits from a fresh fill: earlier replays of the step rewrote its state.
    Result<std::vector<std::vector<float>>> fresh_step(const ShapePoint& p) {
        DSV4_RETURN_IF_ERROR(fill(p));
        std::vector<std::vector<float>> logits;
        DSV4_RETURN_IF_ERROR(r_.forward(batch_, logits));
        return logits;
    }

    CudaBenchRunner& r_;
    const ModelConfig& cfg_;
    const TuneCliOptions& o_;
    cuda::KvFormat kfmt_;
    std::vector<TuningRule> rules_;
    ForwardBatch batch_;
    std::vector<std::vector<int32_t>> toks_, tables_;
    std::pair<int, int64_t> filled_{-1, -1};
    std::map<std::pair<int, int64_t>, std::vector<std::vector<float>>> ref_;
    std::map<std::pair<int, int64_t>, double> base_ms_;
};

std::vector<std::string> split_names(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(item);
    return out;
}

std::string params_label(const cuda::KernelParams& p) {
    return fmt::format("bt{} bh{} w{} s{}", p.block_t, p.block_h, p.warps, p.stages);
}

// The candidates of one op. sparse_decode: variants legal for the rows and heads, filtered by
// --variants, times --split-kv-targets, less the heuristics' own choice at the option's target.
Result<std::vector<tune::Candidate>> candidates_for(TunedOp op, const TuneCliOptions& o, const ModelConfig& cfg,
                                                    cuda::KvFormat fmt) {
    std::vector<tune::Candidate> out;
    auto wanted = [&](const std::string& name) {
        if (o.variants == "all" || o.variants == "default-tile") return true;
        const auto names = split_names(o.variants);
        return std::find(names.begin(), names.end(), name) != names.end();
    };
    auto add = [&](const std::string& label, const std::string& variant, int target) {
        tune::Candidate c;
        c.label = label;
        c.rule.op = op;
        c.rule.variant = variant;
        c.rule.split_kv_target_ctas = target;
        out.push_back(std::move(c));
    };
    switch (op) {
        case TunedOp::kSparseDecode: {
            int heuristic = -1;
            for (int i = 0; i < cuda::sparse_decode_variant_count() && heuristic < 0; ++i)
                if (cuda::sparse_decode_variant_legal(i, fmt, cfg.n_heads)) heuristic = i;
            if (heuristic < 0) return invalid_argument("tune: no sparse_decode variant is legal for this model");
            const cuda::KernelParams hp = cuda::sparse_decode_variant_params(heuristic);
            for (int i = 0; i < cuda::sparse_decode_variant_count(); ++i) {
                const std::string name = cuda::sparse_decode_variant_name(i);
                const cuda::KernelParams p = cuda::sparse_decode_variant_params(i);
                if (!cuda::sparse_decode_variant_legal(i, fmt, cfg.n_heads) || !wanted(name)) continue;
                if (o.variants == "default-tile" && (p.block_t != hp.block_t || p.block_h != hp.block_h)) continue;
                for (int t : o.split_kv_targets) {
                    if (i == heuristic && t == 0) continue;  // that is the heuristics
                    add(params_label(p) + (t > 0 ? fmt::format(", split-KV {}", t) : ""), i == heuristic ? "" : name,
                        t);
                }
            }
            break;
        }
        case TunedOp::kDenseGemv:
            for (int i = 0; i < cuda::dense_gemv_variant_count(); ++i)
                if (wanted(cuda::dense_gemv_variant_name(i)))
                    add(cuda::dense_gemv_variant_name(i), cuda::dense_gemv_variant_name(i), 0);
            break;
        case TunedOp::kMoeExpert:
            for (int i = 0; i < cuda::moe_expert_variant_count(); ++i)
                if (wanted(cuda::moe_expert_variant_name(i)))
                    add(cuda::moe_expert_variant_name(i), cuda::moe_expert_variant_name(i), 0);
            break;
        case TunedOp::kMoeGrouped:
            for (int i = 0; i < cuda::moe_grouped_variant_count(); ++i)
                if (wanted(cuda::moe_grouped_variant_name(i)))
                    add(cuda::moe_grouped_variant_name(i), cuda::moe_grouped_variant_name(i), 0);
            break;
    }
    if (out.empty())
        return invalid_argument("tune: no {} candidate matches --variants {}", tuned_op_name(op), o.variants);
    return out;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

std::string slug(const std::string& s) {
    std::string out;
    for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '-';
    return out;
}

}  // namespace

int run_tune_cmd(const TuneCliOptions& o) {
    auto fail = [](int code, const std::string& msg) {
        std::fprintf(stderr, "tune: %s\n", msg.c_str());
        return code;
    };
    FlashProxySpec spec;
    spec.n_layers = o.layers;
    auto cfg_r = flash_proxy_config(spec);
    if (!cfg_r) return fail(2, cfg_r.status().message());
    const ModelConfig cfg = *cfg_r;
    // Options as every command resolves them, but never a tuning file: the heuristics are the baseline.
    std::vector<std::string> settings = o.options;
    if (!o.kv_rows.empty()) settings.insert(settings.begin(), "kv_rows=" + o.kv_rows);
    RunnerOptions which;
    which.backend = "cuda";
    which.synthetic_flash_layers = o.layers;
    auto rt_r = resolve_runtime_options(settings, true, &which, "none");
    if (!rt_r) return fail(2, rt_r.status().message());
    const RuntimeOptions rt = *rt_r;
    // A forced variant would win over every candidate's rule: each would measure the forced kernel.
    for (const char* k : {"attn_variant", "gemv_variant", "moe_variant", "moe_gemm_variant"})
        if (!runtime_option_value(rt, k).empty())
            return fail(2, fmt::format("option {} is set ({}): it would override every candidate; unset it", k,
                                       runtime_option_value(rt, k)));
    for (int t : o.split_kv_targets)
        if (t < 0) return fail(2, fmt::format("--split-kv-targets: {} is negative", t));
    if (!cuda_device_available()) return fail(2, "no CUDA device");

    std::vector<TunedOp> ops;
    if (o.op == "all")
        ops = {TunedOp::kSparseDecode, TunedOp::kDenseGemv, TunedOp::kMoeExpert, TunedOp::kMoeGrouped};
    else if (o.op == "sparse_decode")
        ops = {TunedOp::kSparseDecode};
    else if (o.op == "dense_gemv")
        ops = {TunedOp::kDenseGemv};
    else if (o.op == "moe_expert")
        ops = {TunedOp::kMoeExpert};
    else
        ops = {TunedOp::kMoeGrouped};

    auto row_fmt = parse_kv_row_format(rt.kv_rows);
    if (!row_fmt) return fail(2, row_fmt.status().message());
    const cuda::KvFormat kfmt = *row_fmt == KvRowFormat::kFp8 ? cuda::KvFormat::kFp8 : cuda::KvFormat::kBf16;
    int max_target = 0;
    for (int t : o.split_kv_targets) max_target = std::max(max_target, t);

    // The runner: sized for the largest batch and context; the pool for the largest point.
    auto layout_r = KvLayout::make(cfg, 64, 4, *row_fmt);
    if (!layout_r) return fail(2, layout_r.status().message());
    int max_b = *std::max_element(o.batches.begin(), o.batches.end());
    int max_seqs = 1;
    while (max_seqs < max_b) max_seqs *= 2;
    const int64_t max_ctx = *std::max_element(o.contexts.begin(), o.contexts.end());
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    const double ws_est = double(max_seqs) * (0.7e6 + 4.0 * double(cfg.vocab_size) + 4.0 * 64 * 32 * 513) + 0.5e9;
    const double pool_budget = double(free_b) - double(proxy_weight_bytes(cfg).total()) - ws_est - o.reserve_gb * 1e9;
    const int64_t need = int64_t(max_b) * layout_r->pages_for_tokens(max_ctx + 1);
    if (double(need) * double(layout_r->page_bytes) > pool_budget)
        return fail(2,
                    fmt::format("batch {} at context {} needs {:.1f} GB of KV pool, {:.1f} GB free after the "
                                "weights: lower --batches or --contexts",
                                max_b, max_ctx, double(need) * double(layout_r->page_bytes) / 1e9, pool_budget / 1e9));
    CudaRunnerOptions ro;
    ro.page_tokens = 64;
    ro.n_pages = need;
    ro.max_seqs = max_seqs;
    ro.max_step_tokens = max_seqs;
    ro.max_context = max_ctx + 64;
    ro.rt = rt;
    ro.verbose = false;
    ro.split_kv_workspace_ctas = max_target;
    SyntheticWeightsOptions wo;
    wo.seed = o.seed;
    auto runner_r = make_cuda_runner_synthetic(cfg, wo, ro);
    if (!runner_r) return fail(3, runner_r.status().message());
    CudaBenchRunner& runner = **runner_r;

    const TuningKey key = this_machine_tuning_key(cfg);
    const std::string date = utc_now(), sha = build_git_sha();
    ProxyTuneBench bench(runner, cfg, o, kfmt);
    tune::TuneOptions topt;
    topt.pairs = o.pairs;
    topt.confidence = o.confidence;
    topt.min_effect = o.min_effect;
    topt.kernel_keep = o.kernel_keep;
    topt.time_budget_s = o.time_budget_s;
    topt.date = date;
    topt.git_sha = sha;

    if (o.calibrate > 0) {
        tune::CalibrationOptions co;
        co.aa = co.detect = o.calibrate;
        co.slowdown = o.slowdown;
        co.pairs = o.pairs;
        co.confidence = o.confidence;
        co.min_effect = o.min_effect;
        const ShapePoint at{o.batches.front(), int64_t(o.contexts.front())};
        std::printf("calibrating at batch %d, context %lld: %d A/A comparisons and %d against a %.0f%% slower step\n",
                    at.batch, (long long)at.context, co.aa, co.detect, 100 * co.slowdown);
        // One line per comparison, flushed: a run stopped part-way still leaves its measurements.
        auto rep = tune::calibrate(bench, at, co, [](bool slowed, int i, const tune::CalibrationComparison& c) {
            std::printf("  %s %3d: %s\n", slowed ? "slowed" : "A/A   ", i, c.test.describe().c_str());
            std::fflush(stdout);
        });
        if (!rep) return fail(3, rep.status().message());
        const tune::TuneRunInfo info{date, sha, key, o.command, ""};
        if (Status s = tune::append_calibration_jsonl(o.ledger, info, *rep); !s.is_ok()) return fail(3, s.message());
        const std::string md = tune::calibration_markdown(info, *rep);
        if (Status s = tune::append_text_file(o.ledger_md, md); !s.is_ok()) return fail(3, s.message());
        std::printf("\n%s", md.c_str());
        return 0;
    }
    std::vector<tune::ShapeClass> classes_ctx, classes_flat;
    {
        std::vector<int64_t> ctxs(o.contexts.begin(), o.contexts.end());
        auto a = tune::shape_classes(o.batches, ctxs, true);
        auto b = tune::shape_classes(o.batches, ctxs, false);
        if (!a) return fail(2, a.status().message());
        classes_ctx = *a;
        classes_flat = *b;
    }
    tune::TuneReport all;
    std::printf("tune on %s (driver %s, CUDA %s), build %s; proxy %d layers; %zu batch(es) x %zu context(s)\n",
                key.gpu.c_str(), key.driver.c_str(), key.cuda.c_str(), sha.c_str(), o.layers, o.batches.size(),
                o.contexts.size());
    std::vector<tune::Candidate> cands;
    for (TunedOp op : ops) {
        auto c = candidates_for(op, o, cfg, kfmt);
        if (!c) return fail(2, c.status().message());
        std::printf("  %s: %zu candidate(s)\n", tuned_op_name(op), c->size());
        cands.insert(cands.end(), c->begin(), c->end());
    }
    // sparse_decode candidates run over batch x context classes, the others over batches alone (their
    // rules carry no context); one run_tune call, so all comparisons form one family.
    std::vector<tune::CandidateSet> sets(2);
    sets[0].classes = classes_ctx;
    sets[1].classes = classes_flat;
    for (auto& c : cands) sets[c.rule.op == TunedOp::kSparseDecode ? 0 : 1].candidates.push_back(c);
    if (sets[1].candidates.empty()) sets.pop_back();
    if (sets[0].candidates.empty()) sets.erase(sets.begin());
    {
        auto rep = tune::run_tune(bench, sets, topt);
        if (!rep) return fail(3, rep.status().message());
        all = std::move(*rep);
    }

    // The tuning file: this run's rules, plus the file's rules of ops not tuned now (same key only).
    std::string out = o.out;
    if (out.empty()) {
        const auto dirs = tuning_search_dirs([](const char* k) { return std::getenv(k); });
        if (dirs.empty()) return fail(2, "no --out and neither DSV4_TUNING_DIR nor HOME is set");
        std::error_code ec;
        std::filesystem::create_directories(dirs.front(), ec);
        out = dirs.front() + "/" + slug(key.gpu) + "--" + slug(key.model_shape) + ".json";
    }
    TuningFile file;
    if (std::filesystem::exists(out)) {
        auto old = read_tuning_file(out);
        if (old && old->key.gpu == key.gpu && old->key.model_shape == key.model_shape) {
            file.options = old->options;
            for (const TuningRule& r : old->rules)
                if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) file.rules.push_back(r);
        } else {
            std::fprintf(stderr, "tune: replacing %s (%s)\n", out.c_str(),
                         old ? "made for another GPU or model shape" : old.status().message().c_str());
        }
    }
    file.path = out;
    file.key = key;
    file.made_date = date;
    file.made_git_sha = sha;
    file.made_command = o.command;
    file.rules.insert(file.rules.end(), all.chosen.begin(), all.chosen.end());
    {
        std::FILE* f = std::fopen((out + ".tmp").c_str(), "wb");
        if (!f) return fail(3, "cannot write " + out);
        const std::string text = tuning_file_json(file);
        const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
        if (std::fclose(f) != 0 || !ok) return fail(3, "writing " + out + " failed");
        std::filesystem::rename(out + ".tmp", out);  // never a half-written file in the default directory
    }
    tune::TuneRunInfo info{date, sha, key, o.command, out};
    if (Status s = tune::append_ledger_jsonl(o.ledger, info, all); !s.is_ok()) return fail(3, s.message());
    const std::string md = tune::ledger_markdown(info, all);
    if (Status s = tune::append_text_file(o.ledger_md, md); !s.is_ok()) return fail(3, s.message());
    std::printf("\n%s", md.c_str());
    std::printf("tuning file: %s (%zu rule(s) kept this run); ledger: %s, %s\n", out.c_str(), all.chosen.size(),
                o.ledger.c_str(), o.ledger_md.c_str());
    return 0;
}

}  // namespace dsv4::cli
