// write_synthetic_checkpoint (see synthetic_checkpoint.h). The tensors are described with their
// generators (GeneratedTensor), grouped into shards, and each shard is written by
// write_generated_shard (model/generated_shard.h): chunks generated and written by a thread pool.
#include "model/synthetic_checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "model/generated_shard.h"

namespace dsv4 {

namespace {

namespace fs = std::filesystem;

// UE8M0 byte making a K-long dot product of unit-RMS inputs ~unit RMS
// (runtime/synthetic_weights.cpp).
int scale_byte(double code_rms, int64_t K) {
    return 127 - int(std::lround(std::log2(code_rms * std::sqrt(double(std::max<int64_t>(K, 1))))));
}
constexpr double kE4m3Rms = 1.9, kE2m1Rms = 2.93;

struct Builder {
    uint64_t seed;
    uint64_t stream = 0;
    std::vector<GeneratedTensor> out;
    uint64_t next() { return seed * 1000003ull + (++stream); }

    void add(std::string name, DType dt, std::vector<int64_t> shape,
             std::function<void(std::span<uint8_t>, uint64_t)> g) {
        uint64_t n = dtype_size(dt);
        for (int64_t s : shape) n *= uint64_t(s);
        out.push_back({std::move(name), dt, std::move(shape), n, std::move(g)});
    }
    // Elementwise generators over byte ranges aligned to their element size (chunks are multiples
    // of 8).
    void f32(const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
        const uint64_t s = next();
        add(name, DType::kF32, std::move(shape), [=](std::span<uint8_t> b, uint64_t first) {
            synth_host::fill_f32({reinterpret_cast<float*>(b.data()), b.size() / 4}, s, lo, hi, int64_t(first / 4));
        });
    }
    void bf16(const std::string& name, std::vector<int64_t> shape, float amp) {
        const uint64_t s = next();
        add(name, DType::kBF16, std::move(shape), [=](std::span<uint8_t> b, uint64_t first) {
            synth_host::fill_bf16({reinterpret_cast<uint16_t*>(b.data()), b.size() / 2}, s, amp, int64_t(first / 2));
        });
    }
    // A norm weight around 1 (BF16 in the checkpoint).
    void norm(const std::string& name, int64_t n) {
        const uint64_t s = next();
        add(name, DType::kBF16, {n}, [=](std::span<uint8_t> b, uint64_t first) {
            std::vector<float> v(b.size() / 2);
            synth_host::fill_f32(v, s, 0.8f, 1.2f, int64_t(first / 2));
            for (size_t i = 0; i < v.size(); ++i) {
                const uint16_t h = f32_to_bf16(v[i]);
                std::memcpy(b.data() + 2 * i, &h, 2);
            }
        });
    }
    void matrix_bf16(const std::string& name, int64_t N, int64_t K) {
        bf16(name, {N, K}, float(std::sqrt(3.0 / double(K))));
    }
    void fp8(const std::string& base, int64_t N, int64_t K) {
        const uint64_t s = next(), ss = next();
        const int e = scale_byte(kE4m3Rms, K);
        add(base + ".weight", DType::kF8E4M3, {N, K},
            [=](std::span<uint8_t> b, uint64_t first) { synth_host::fill_e4m3(b, s, int64_t(first)); });
        add(base + ".scale", DType::kF8E8M0, {(N + 127) / 128, (K + 127) / 128},
            [=](std::span<uint8_t> b, uint64_t first) { synth_host::fill_ue8m0(b, ss, e - 1, e, int64_t(first)); });
    }
    // Routed experts of one projection, [E] x ([N, K/2] MXFP4 codes + [N, K/32] UE8M0 scales): as
    // on the GPU, one stream for all experts' codes and one for their scales, expert e being slice
    // e of the stacked fill. Streams drawn by expert_streams, tensors added by expert_add (expert-major order).
    struct ExpertStreams {
        uint64_t codes, scales;
        int64_t N, K;
    };
    ExpertStreams expert_streams(int64_t N, int64_t K) {
        const uint64_t c = next(), sc = next();
        return {c, sc, N, K};
    }
    void expert_add(const std::string& base, int64_t e, const ExpertStreams& x) {
        const int64_t nd = x.N * (x.K / 2), ns = x.N * ((x.K + 31) / 32);
        const int s8 = scale_byte(kE2m1Rms, x.K);
        const uint64_t c = x.codes, sc = x.scales;
        add(base + ".weight", DType::kI8, {x.N, x.K / 2},
            [=](std::span<uint8_t> b, uint64_t first) { synth_host::fill_mxfp4(b, c, e * nd + int64_t(first)); });
        add(base + ".scale", DType::kF8E8M0, {x.N, (x.K + 31) / 32}, [=](std::span<uint8_t> b, uint64_t first) {
            synth_host::fill_ue8m0(b, sc, s8 - 1, s8, e * ns + int64_t(first));
        });
    }
    // A tensor of zeros (no stream: the GPU uploads the router bias from the host).
    void zeros(const std::string& name, DType dt, std::vector<int64_t> shape) {
        add(name, dt, std::move(shape), [](std::span<uint8_t> b, uint64_t) { std::fill(b.begin(), b.end(), 0); });
    }
    void mhc(const std::string& p, int64_t rows, int64_t in, int64_t n_scale) {
        const float a = float(std::sqrt(3.0 / double(in)));
        f32(p + "_fn", {rows, in}, -a, a);
        f32(p + "_base", {rows}, -0.5f, 0.5f);
        f32(p + "_scale", {n_scale}, 0.5f, 1.5f);
    }
    void compressor(const std::string& p, int64_t r, int64_t kappa, int64_t c, int64_t d) {
        matrix_bf16(p + "wkv.weight", kappa * c, d);
        matrix_bf16(p + "wgate.weight", kappa * c, d);
        f32(p + "ape", {r, kappa * c}, -0.1f, 0.1f);
        norm(p + "norm.weight", c);
    }
    // One decoder block (layers.L. or mtp.0.): ratio / csa / hash from the schedule. The streams
    // are drawn in the order and with the ranges of make_synthetic_weights
    // (runtime/synthetic_weights.cpp), so every tensor holds the synthetic GPU runner's values for
    // the same seed (the norms rounded to BF16: its bf16_norms option), which the bitwise test
    // tests/kernels/cuda_runner/cuda_checkpoint_load_test.cpp checks.
    void block(const ModelConfig& cfg, const std::string& p, int ratio, bool csa, bool hash) {
        const int64_t d = cfg.hidden_size, H = cfg.n_heads, D = cfg.head_dim, qr = cfg.q_lora_rank;
        const int64_t G = cfg.o_groups, orank = cfg.o_lora_rank, E = cfg.n_routed_experts,
                      I = cfg.moe_intermediate_size;
        const int64_t n = cfg.hc_mult, mix = cfg.hc_mix_dim();
        mhc(p + "hc_attn", mix, n * d, 3);
        mhc(p + "hc_ffn", mix, n * d, 3);
        norm(p + "attn_norm.weight", d);
        norm(p + "ffn_norm.weight", d);
        f32(p + "attn.attn_sink", {H}, -1.0f, 1.0f);
        norm(p + "attn.q_norm.weight", qr);
        norm(p + "attn.kv_norm.weight", D);
        fp8(p + "attn.wq_a", qr, d);
        fp8(p + "attn.wq_b", H * D, qr);
        fp8(p + "attn.wkv", D, d);
        fp8(p + "attn.wo_a", G * orank, (H / G) * D);
        fp8(p + "attn.wo_b", d, G * orank);
        if (ratio > 0) compressor(p + "attn.compressor.", ratio, csa ? 2 : 1, D, d);
        if (csa) {
            const int64_t IH = cfg.index_n_heads, ID = cfg.index_head_dim;
            compressor(p + "attn.indexer.compressor.", ratio, 2, ID, d);
            fp8(p + "attn.indexer.wq_b", IH * ID, qr);
            matrix_bf16(p + "attn.indexer.weights_proj.weight", IH, d);
        }
        matrix_bf16(p + "ffn.gate.weight", E, d);
        if (hash) {
            const uint64_t s = next();
            const int64_t V = cfg.vocab_size, k = cfg.n_experts_per_tok;
            const int hot = int(E);
            add(p + "ffn.gate.tid2eid", DType::kI64, {V, k}, [=](std::span<uint8_t> b, uint64_t first) {
                // Rows are cheap: regenerate the whole table and copy the slice asked for.
                std::vector<int32_t> t(size_t(V * k));
                synth_host::fill_tid2eid(t, V, int(k), hot, s);
                for (size_t i = 0; i < b.size() / 8; ++i) {
                    const int64_t v = t[first / 8 + i];
                    std::memcpy(b.data() + 8 * i, &v, 8);
                }
            });
        } else {
            zeros(p + "ffn.gate.bias", DType::kF32, {E});
        }
        fp8(p + "ffn.shared_experts.w1", I, d);
        fp8(p + "ffn.shared_experts.w3", I, d);
        fp8(p + "ffn.shared_experts.w2", d, I);
        const ExpertStreams w1 = expert_streams(I, d), w3 = expert_streams(I, d), w2 = expert_streams(d, I);
        for (int64_t e = 0; e < E; ++e) {
            const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
            expert_add(q + "w1", e, w1);
            expert_add(q + "w3", e, w3);
            expert_add(q + "w2", e, w2);
        }
    }
};

}  // namespace

std::string flash_config_json(int n_layers) {
    nlohmann::ordered_json j;
    std::vector<int> ratios;
    for (int l = 0; l < n_layers; ++l) ratios.push_back(l < 2 ? 0 : l == 2 ? 4 : (l % 2 ? 128 : 4));
    ratios.push_back(0);  // the MTP block
    j["architectures"] = {"DeepseekV4ForCausalLM"};
    j["model_type"] = "deepseek_v4";
    j["vocab_size"] = 129280;
    j["hidden_size"] = 4096;
    j["num_hidden_layers"] = n_layers;
    j["num_attention_heads"] = 64;
    j["num_key_value_heads"] = 1;
    j["head_dim"] = 512;
    j["qk_rope_head_dim"] = 64;
    j["q_lora_rank"] = 1024;
    j["o_lora_rank"] = 1024;
    j["o_groups"] = 8;
    j["sliding_window"] = 128;
    j["compress_ratios"] = ratios;
    j["compress_rope_theta"] = 160000.0;
    j["rope_theta"] = 10000.0;
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", 16},
                         {"original_max_position_embeddings", 65536},
                         {"beta_fast", 32},
                         {"beta_slow", 1}};
    j["max_position_embeddings"] = 1048576;
    j["index_n_heads"] = 64;
    j["index_head_dim"] = 128;
    j["index_topk"] = 512;
    j["hc_mult"] = 4;
    j["hc_sinkhorn_iters"] = 20;
    j["hc_eps"] = 1e-6;
    j["n_routed_experts"] = 256;
    j["n_shared_experts"] = 1;
    j["num_experts_per_tok"] = 6;
    j["moe_intermediate_size"] = 2048;
    j["scoring_func"] = "sqrtsoftplus";
    j["topk_method"] = "noaux_tc";
    j["norm_topk_prob"] = true;
    j["routed_scaling_factor"] = 1.5;
    j["num_hash_layers"] = std::min(3, n_layers);  // layers 0..2 hash-route (fewer when the model is shallower)
    j["swiglu_limit"] = 10.0;
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = 1e-6;
    j["num_nextn_predict_layers"] = 1;
    j["tie_word_embeddings"] = false;
    j["bos_token_id"] = 0;
    j["eos_token_id"] = 1;
    j["expert_dtype"] = "fp4";
    j["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"activation_scheme", "dynamic"},
                                {"scale_fmt", "ue8m0"},
                                {"weight_block_size", {128, 128}}};
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    j["torch_dtype"] = "bfloat16";
    j["initializer_range"] = 0.02;
    return j.dump(2) + "\n";
}

Status write_synthetic_checkpoint(const std::string& dir, const ModelConfig& cfg, const std::string& config_json,
                                  const SyntheticCheckpointOptions& opt) {
    DSV4_RETURN_IF_ERROR(cfg.validate());
    if (cfg.hidden_size % 32 || cfg.moe_intermediate_size % 32)
        return invalid_argument("MXFP4 experts need hidden_size and moe_intermediate_size multiples of 32");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return error(StatusCode::kInternal, "cannot create {}: {}", dir, ec.message());
    {
        std::ofstream c(fs::path(dir) / "config.json");
        c << config_json;
        if (!c) return error(StatusCode::kInternal, "cannot write {}/config.json", dir);
        // What the official repository ships beside it (spec §5: ids, recommended sampling).
        std::ofstream g(fs::path(dir) / "generation_config.json");
        g << "{\n  \"bos_token_id\": 0,\n  \"eos_token_id\": 1,\n  \"do_sample\": true,\n"
             "  \"temperature\": 1.0,\n  \"top_p\": 1.0\n}\n";
        if (!g) return error(StatusCode::kInternal, "cannot write {}/generation_config.json", dir);
    }
    Builder B{opt.seed, 0, {}};
    const int64_t d = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult;
    B.matrix_bf16("embed.weight", V, d);
    B.matrix_bf16("head.weight", V, d);
    B.norm("norm.weight", d);
    B.mhc("hc_head", n, n * d, 1);
    for (int l = 0; l < cfg.n_layers; ++l)
        B.block(cfg, "layers." + std::to_string(l) + ".", cfg.compress_ratio(l), cfg.layer_types[l] == AttnType::kCSA,
                cfg.mlp_types[l] == MoeRouting::kHash);
    if (opt.mtp) {
        B.block(cfg, "mtp.0.", 0, false, false);
        B.fp8("mtp.0.e_proj", d, d);
        B.fp8("mtp.0.h_proj", d, d);
        B.norm("mtp.0.enorm.weight", d);
        B.norm("mtp.0.hnorm.weight", d);
        B.norm("mtp.0.norm.weight", d);
        B.mhc("mtp.0.hc_head", n, n * d, 1);
    }
    // Shards in model order, each closed once it reaches shard_bytes.
    std::vector<std::vector<const GeneratedTensor*>> shards(1);
    uint64_t cur = 0, total = 0;
    for (const GeneratedTensor& t : B.out) {
        if (cur >= opt.shard_bytes) shards.emplace_back(), cur = 0;
        shards.back().push_back(&t);
        cur += t.bytes;
        total += t.bytes;
    }
    // Shards are written `files` at a time, each by threads / files workers: the kernel's copy of
    // buffered writes into one file runs on one thread at a time (the inode lock), and on a 2-core VM
    // it took more time than the generation (13.9 s of system time for 9.3 GB into tmpfs, 1.9 s of
    // user time), so by default every thread writes its own shard while there are shards enough.
    const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    const int files = std::clamp(opt.parallel_shards > 0 ? opt.parallel_shards : threads, 1, int(shards.size()));
    ShardWriteOptions wo;
    wo.threads = std::max(1, threads / files);
    wo.chunk_bytes = opt.chunk_bytes;
    auto file_name = [&](size_t s) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size()); };
    const auto t_all = std::chrono::steady_clock::now();
    std::atomic<size_t> next{0};
    std::mutex mu;
    Status failed = Status::ok();
    auto writer = [&] {
        for (size_t s; (s = next.fetch_add(1)) < shards.size();) {
            {
                std::lock_guard<std::mutex> lock(mu);
                if (!failed.is_ok()) return;
            }
            const auto t0 = std::chrono::steady_clock::now();
            const Status st = write_generated_shard((fs::path(dir) / file_name(s)).string(), shards[s], wo);
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            uint64_t b = 0;
            for (const GeneratedTensor* t : shards[s]) b += t->bytes;
            std::lock_guard<std::mutex> lock(mu);
            if (!st.is_ok()) {
                if (failed.is_ok()) failed = st;
                return;
            }
            if (opt.progress)
                std::fprintf(stderr, "[make-checkpoint] %s: %zu tensors, %.2f GB in %.2f s (%.2f GB/s, %d threads)\n",
                             file_name(s).c_str(), shards[s].size(), double(b) / 1e9, sec,
                             sec > 0 ? double(b) / 1e9 / sec : 0.0, wo.threads);
        }
    };
    {
        std::vector<std::thread> pool;
        for (int i = 1; i < files; ++i) pool.emplace_back(writer);
        writer();
        for (auto& th : pool) th.join();
    }
    DSV4_RETURN_IF_ERROR(failed);
    if (opt.progress) {
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count();
        std::fprintf(
            stderr, "[make-checkpoint] %.2f GB in %zu shards in %.2f s (%.2f GB/s; %d threads, %d shards at a time)\n",
            double(total) / 1e9, shards.size(), sec, sec > 0 ? double(total) / 1e9 / sec : 0.0, threads, files);
    }
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    nlohmann::ordered_json wm = nlohmann::ordered_json::object();
    for (size_t s = 0; s < shards.size(); ++s)
        for (const GeneratedTensor* t : shards[s]) wm[t->name] = file_name(s);
    index["weight_map"] = wm;
    std::ofstream idx(fs::path(dir) / "model.safetensors.index.json");
    idx << index.dump(2) << "\n";
    if (!idx) return error(StatusCode::kInternal, "cannot write {}/model.safetensors.index.json", dir);
    return Status::ok();
}

Status write_synthetic_flash_checkpoint(const std::string& dir, const SyntheticCheckpointOptions& opt) {
    if (opt.n_layers < 1) return invalid_argument("--layers must be at least 1, got {}", opt.n_layers);
    const std::string json = flash_config_json(opt.n_layers);
    DSV4_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfig::from_json_text(json));
    return write_synthetic_checkpoint(dir, cfg, json, opt);
}

}  // namespace dsv4
