// Synthetic weights on the GPU (see synthetic_weights.h).
#include "runtime/synthetic_weights.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/ops/fast_path.h"
#include "kernels/cuda/synth/synth.h"
#include "model/ref_model.h"

namespace dsv4 {

namespace {
Status cu(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    return error(StatusCode::kInternal, "CUDA error in {}: {}", what, cudaGetErrorString(e));
}

// UE8M0 byte of 2^-round(log2(rms * sqrt(K))): codes of RMS `rms` times the scale have RMS
// ~1/sqrt(K), so a K-long dot product with unit-RMS inputs is ~unit RMS.
int scale_byte(double code_rms, int64_t K) {
    return 127 - int(std::lround(std::log2(code_rms * std::sqrt(double(std::max<int64_t>(K, 1))))));
}
constexpr double kE4m3Rms = 1.9;   // codes of synth::fill_e4m3 (|v| in [0.25, 3.75])
constexpr double kE2m1Rms = 2.93;  // uniform e2m1 codes

struct Gen {
    DeviceArena& arena;
    uint64_t seed;
    ProxyWeightBytes tally;
    uint64_t stream_id = 0;
    cudaStream_t st = nullptr;
    bool bf16_norms = false;

    uint64_t next() { return seed * 1000003ull + (++stream_id); }

    Result<void*> alloc(size_t bytes) { return arena.alloc(bytes); }

    Result<cuda::WeightDesc> fp8(int64_t N, int64_t K) {
        cuda::WeightDesc w{cuda::WFmt::kFp8E8M0, nullptr, nullptr, int32_t(N), int32_t(K)};
        const int64_t ns = ((N + 127) / 128) * ((K + 127) / 128);
        DSV4_ASSIGN_OR_RETURN(void* d, alloc(size_t(N * K)));
        DSV4_ASSIGN_OR_RETURN(void* s, alloc(size_t(ns)));
        DSV4_RETURN_IF_ERROR(cu(cuda::synth::fill_e4m3(d, N * K, next(), st), "fill_e4m3"));
        const int e = scale_byte(kE4m3Rms, K);
        DSV4_RETURN_IF_ERROR(cu(cuda::synth::fill_ue8m0(s, ns, next(), e - 1, e, st), "fill_ue8m0"));
        w.data = d;
        w.scale = s;
        tally.streamed += N * K + ns;
        tally.streamed_params += N * K;
        return w;
    }
    Result<cuda::WeightDesc> bf16(int64_t N, int64_t K, int64_t* category, bool counts_params = true) {
        cuda::WeightDesc w{cuda::WFmt::kBF16, nullptr, nullptr, int32_t(N), int32_t(K)};
        DSV4_ASSIGN_OR_RETURN(void* d, alloc(size_t(2 * N * K)));
        DSV4_RETURN_IF_ERROR(
            cu(cuda::synth::fill_bf16(d, N * K, next(), float(std::sqrt(3.0 / double(K))), st), "fill_bf16"));
        w.data = d;
        *category += 2 * N * K;
        if (counts_params) tally.streamed_params += N * K;
        return w;
    }
    // Experts [first, first + E) of [N, K] MXFP4, packed with a fixed stride; their bytes are the
    // slice of the all-expert fill (the seed stream advances the same for any slice).
    Result<cuda::WeightDesc> experts(int first, int E, int64_t N, int64_t K) {
        cuda::WeightDesc w{cuda::WFmt::kMxfp4, nullptr, nullptr, int32_t(N), int32_t(K)};
        const int64_t nd = N * (K / 2), ns = N * ((K + 31) / 32);
        DSV4_ASSIGN_OR_RETURN(void* d, alloc(size_t(E * nd)));
        DSV4_ASSIGN_OR_RETURN(void* s, alloc(size_t(E * ns)));
        DSV4_RETURN_IF_ERROR(cu(cuda::synth::fill_mxfp4(d, E * nd, next(), st, first * nd), "fill_mxfp4"));
        const int e = scale_byte(kE2m1Rms, K);
        DSV4_RETURN_IF_ERROR(cu(cuda::synth::fill_ue8m0(s, E * ns, next(), e - 1, e, st, first * ns), "fill_ue8m0"));
        w.data = d;
        w.scale = s;
        w.expert_stride = nd;
        w.scale_expert_stride = ns;
        tally.experts += E * (nd + ns);
        return w;
    }
    Result<const float*> vec(int64_t n, float lo, float hi) {
        DSV4_ASSIGN_OR_RETURN(void* d, alloc(size_t(4 * n)));
        DSV4_RETURN_IF_ERROR(cu(cuda::synth::fill_f32(static_cast<float*>(d), n, next(), lo, hi, st), "fill_f32"));
        tally.streamed += 4 * n;
        return static_cast<const float*>(d);
    }
    // An RMSNorm weight around 1 (BF16 in the checkpoint: rounded to it with bf16_norms).
    Result<const float*> norm(int64_t n) {
        DSV4_ASSIGN_OR_RETURN(const float* p, vec(n, 0.8f, 1.2f));
        if (bf16_norms)
            DSV4_RETURN_IF_ERROR(cu(cuda::synth::round_to_bf16(const_cast<float*>(p), n, st), "round_to_bf16"));
        return p;
    }
    Result<const float*> host_vec(const std::vector<float>& v) {
        DSV4_ASSIGN_OR_RETURN(void* d, arena.upload(v.data(), v.size() * sizeof(float)));
        tally.streamed += int64_t(4 * v.size());
        return static_cast<const float*>(d);
    }
    Result<DevMhc> mhc(int64_t rows, int64_t in, int64_t n_scale) {
        DevMhc m;
        const float a = float(std::sqrt(3.0 / double(in)));
        DSV4_ASSIGN_OR_RETURN(m.fn, vec(rows * in, -a, a));
        DSV4_ASSIGN_OR_RETURN(m.base, vec(rows, -0.5f, 0.5f));
        DSV4_ASSIGN_OR_RETURN(m.scale, vec(n_scale, 0.5f, 1.5f));
        return m;
    }
    Result<DevCompressor> compressor(int64_t r, int64_t kappa, int64_t c, int64_t d) {
        DevCompressor o;
        DSV4_ASSIGN_OR_RETURN(o.wkv, bf16(kappa * c, d, &tally.streamed));
        DSV4_ASSIGN_OR_RETURN(o.wgate, bf16(kappa * c, d, &tally.streamed));
        DSV4_ASSIGN_OR_RETURN(o.ape, vec(r * kappa * c, -0.1f, 0.1f));
        DSV4_ASSIGN_OR_RETURN(o.norm, norm(c));
        return o;
    }
};
}  // namespace

Result<DevWeights> make_synthetic_weights(const ModelConfig& cfg, const SyntheticWeightsOptions& opt,
                                          DeviceArena& arena, ProxyWeightBytes* bytes) {
    const int64_t d = cfg.hidden_size, V = cfg.vocab_size, H = cfg.n_heads, D = cfg.head_dim, qr = cfg.q_lora_rank;
    const int64_t G = cfg.o_groups, orank = cfg.o_lora_rank, E = cfg.n_routed_experts, I = cfg.moe_intermediate_size;
    const int64_t n = cfg.hc_mult, mix = cfg.hc_mix_dim(), IH = cfg.index_n_heads, ID = cfg.index_head_dim;
    const int k = cfg.n_experts_per_tok;
    const int hot = std::clamp(opt.routable(cfg), k, int(E));
    const int ex_first = opt.expert_count > 0 ? opt.expert_first : 0;
    const int ex_count = opt.expert_count > 0 ? opt.expert_count : int(E);
    if (ex_first < 0 || ex_first + ex_count > E)
        return invalid_argument("synthetic experts [{}, {}) outside [0, {})", ex_first, ex_first + ex_count, E);
    const size_t before = arena.bytes();
    Gen g{arena, opt.seed, {}};
    g.bf16_norms = opt.bf16_norms;
    DevWeights dw;
    int64_t embed_bytes = 0;
    DSV4_ASSIGN_OR_RETURN(dw.embed, g.bf16(V, d, &embed_bytes, false));
    g.tally.embed = embed_bytes;
    DSV4_ASSIGN_OR_RETURN(dw.head, g.bf16(V, d, &g.tally.streamed));
    DSV4_ASSIGN_OR_RETURN(dw.norm, g.norm(d));
    DSV4_ASSIGN_OR_RETURN(dw.hc_head, g.mhc(n, n * d, 1));
    DSV4_ASSIGN_OR_RETURN(const size_t rope_bytes, upload_rope_tables(cfg, arena, dw));
    g.tally.streamed += int64_t(rope_bytes);
    g.tally.expert_params_one = 3 * I * d;
    // One decoder block: compress ratio r, CSA, hash routing.
    auto block = [&](int r, bool csa, bool hash) -> Result<DevLayer> {
        DevLayer o;
        DSV4_ASSIGN_OR_RETURN(o.hc_attn, g.mhc(mix, n * d, 3));
        DSV4_ASSIGN_OR_RETURN(o.hc_ffn, g.mhc(mix, n * d, 3));
        DSV4_ASSIGN_OR_RETURN(o.attn_norm, g.norm(d));
        DSV4_ASSIGN_OR_RETURN(o.ffn_norm, g.norm(d));
        DSV4_ASSIGN_OR_RETURN(o.attn_sink, g.vec(H, -1.0f, 1.0f));
        DSV4_ASSIGN_OR_RETURN(o.q_norm, g.norm(qr));
        DSV4_ASSIGN_OR_RETURN(o.kv_norm, g.norm(D));
        DSV4_ASSIGN_OR_RETURN(o.wq_a, g.fp8(qr, d));
        DSV4_ASSIGN_OR_RETURN(o.wq_b, g.fp8(H * D, qr));
        DSV4_ASSIGN_OR_RETURN(o.wkv, g.fp8(D, d));
        DSV4_ASSIGN_OR_RETURN(o.wo_a, g.fp8(G * orank, (H / G) * D));
        DSV4_ASSIGN_OR_RETURN(o.wo_b, g.fp8(d, G * orank));
        if (r > 0) {
            DSV4_ASSIGN_OR_RETURN(o.comp, g.compressor(r, csa ? 2 : 1, D, d));
        }
        if (csa) {
            DSV4_ASSIGN_OR_RETURN(o.idx_comp, g.compressor(r, 2, ID, d));
            DSV4_ASSIGN_OR_RETURN(o.idx_wq_b, g.fp8(IH * ID, qr));
            DSV4_ASSIGN_OR_RETURN(o.idx_wproj, g.bf16(IH, d, &g.tally.streamed));
        }
        DSV4_ASSIGN_OR_RETURN(o.gate, g.bf16(E, d, &g.tally.streamed));
        if (hash) {
            DSV4_ASSIGN_OR_RETURN(void* t, arena.alloc(size_t(4 * V * k)));
            DSV4_RETURN_IF_ERROR(
                cu(cuda::synth::fill_tid2eid(static_cast<int32_t*>(t), V, k, hot, g.next(), g.st), "fill_tid2eid"));
            o.tid2eid = static_cast<const int32_t*>(t);
            g.tally.tables += 4 * V * k;
        } else {
            std::vector<float> bias(size_t(E), 0.0f);
            if (opt.skewed)
                for (int e = 0; e < hot; ++e) bias[size_t(e)] = opt.hot_bias;
            DSV4_ASSIGN_OR_RETURN(o.gate_bias, g.host_vec(bias));
        }
        DSV4_ASSIGN_OR_RETURN(o.sh_w1, g.fp8(I, d));
        DSV4_ASSIGN_OR_RETURN(o.sh_w3, g.fp8(I, d));
        DSV4_ASSIGN_OR_RETURN(o.sh_w2, g.fp8(d, I));
        DSV4_ASSIGN_OR_RETURN(o.ex_w1, g.experts(ex_first, ex_count, I, d));
        DSV4_ASSIGN_OR_RETURN(o.ex_w3, g.experts(ex_first, ex_count, I, d));
        DSV4_ASSIGN_OR_RETURN(o.ex_w2, g.experts(ex_first, ex_count, d, I));
        // The fast expert GEMV's code layout is applied by the runner (CudaRunner::apply_kernel_choices).
        return o;
    };
    for (int l = 0; l < cfg.n_layers; ++l) {
        DSV4_ASSIGN_OR_RETURN(DevLayer o, block(cfg.compress_ratio(l), cfg.layer_types[l] == AttnType::kCSA,
                                                cfg.mlp_types[l] == MoeRouting::kHash));
        dw.layers.push_back(o);
    }
    // MTP blocks after everything else (the seed streams of the main model's tensors do not move), kept
    // out of the byte tally (the decode step's bytes model): a draft step reads them, not the step.
    const ProxyWeightBytes main_tally = g.tally;
    const size_t before_mtp = arena.bytes();
    for (int m = 0; m < opt.mtp_blocks; ++m) {
        DevMtp o;
        DSV4_ASSIGN_OR_RETURN(o.block, block(0, false, false));
        DSV4_ASSIGN_OR_RETURN(o.e_proj, g.fp8(d, d));
        DSV4_ASSIGN_OR_RETURN(o.h_proj, g.fp8(d, d));
        DSV4_ASSIGN_OR_RETURN(o.enorm, g.norm(d));
        DSV4_ASSIGN_OR_RETURN(o.hnorm, g.norm(d));
        DSV4_ASSIGN_OR_RETURN(o.norm, g.norm(d));
        DSV4_ASSIGN_OR_RETURN(o.hc_head, g.mhc(n, n * d, 1));
        dw.mtp.push_back(o);
    }
    g.tally = main_tally;
    const double mtp_gb = double(arena.bytes() - before_mtp) / 1e9;
    DSV4_RETURN_IF_ERROR(cu(cudaDeviceSynchronize(), "synthetic weights"));
    dw.summary = fmt::format(
        "{:.1f} MiB of synthetic weights (seed {}, routing {}): streamed {:.3f} GB, routed experts {:.3f} GB "
        "({}, experts [{}, {})), embedding {:.3f} GB, tid2eid {:.3f} GB{}",
        double(arena.bytes() - before) / (1 << 20), opt.seed,
        opt.skewed ? fmt::format("skewed to {} experts", hot) : std::string("uniform"), double(g.tally.streamed) / 1e9,
        double(g.tally.experts) / 1e9, dw.layers.empty() ? "MXFP4" : cuda::wfmt_name(dw.layers[0].ex_w1.fmt), ex_first,
        ex_first + ex_count, double(g.tally.embed) / 1e9, double(g.tally.tables) / 1e9,
        opt.mtp_blocks > 0 ? fmt::format(", {} MTP block(s) {:.3f} GB", opt.mtp_blocks, mtp_gb) : std::string());
    if (bytes) *bytes = g.tally;
    return dw;
}

}  // namespace dsv4
