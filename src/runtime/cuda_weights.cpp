// Weight upload for the CUDA backend (see cuda_weights.h).
#include "runtime/cuda_weights.h"

#include <cuda_runtime.h>

#include <cstring>
#include <map>

#include "kernels/cuda/ops/fast_path.h"
#include "model/checkpoint.h"
#include "runtime/cuda_status.h"

namespace dsv4 {

namespace {
Status cuda_status(cudaError_t e, const char* what) { return cuda_error_status(e, what); }

// A matrix in host memory, in the format it will have on the device.
struct HostMat {
    cuda::WFmt fmt = cuda::WFmt::kF32;
    std::vector<uint8_t> data, scale;
};

Result<HostMat> fetch_matrix(const Checkpoint* ckpt, const std::string& name, int64_t N, int64_t K, const F32Vec& f32) {
    HostMat m;
    if (!ckpt) {
        if (int64_t(f32.size()) != N * K)
            return error(StatusCode::kInternal, "weight {}: {} values for [{}, {}]", name, f32.size(), N, K);
        m.data.resize(f32.size() * 4);
        std::memcpy(m.data.data(), f32.data(), m.data.size());
        return m;
    }
    DSV4_ASSIGN_OR_RETURN(TensorView t, ckpt->get(name));
    auto copy = [](const TensorView& v, std::vector<uint8_t>& out) { out.assign(v.data, v.data + v.nbytes); };
    const std::string base = name.size() > 7 && name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
    switch (t.dtype) {
        case DType::kF32:
        case DType::kBF16:
            if (t.numel() != N * K)
                return invalid_argument("{}: {} elements, expected [{}, {}]", name, t.numel(), N, K);
            m.fmt = t.dtype == DType::kF32 ? cuda::WFmt::kF32 : cuda::WFmt::kBF16;
            copy(t, m.data);
            return m;
        case DType::kF8E4M3: {
            if (t.numel() != N * K)
                return invalid_argument("{}: {} elements, expected [{}, {}]", name, t.numel(), N, K);
            const TensorView* sc = nullptr;
            TensorView found;
            for (const char* suffix : {".scale", ".weight_scale_inv", ".weight_scale"}) {
                auto s = ckpt->get(base + suffix);
                if (s.is_ok()) {
                    if (sc) return invalid_argument("{}: ambiguous FP8 block scales (B14)", name);
                    found = *s;
                    sc = &found;
                }
            }
            if (!sc) return invalid_argument("{}: FP8 weight without a block scale (B14)", name);
            const int64_t want = ((N + 127) / 128) * ((K + 127) / 128);
            if (sc->numel() != want)
                return invalid_argument("{}: scale has {} elements, expected {}", sc->name, sc->numel(), want);
            if (sc->dtype == DType::kF8E8M0)
                m.fmt = cuda::WFmt::kFp8E8M0;
            else if (sc->dtype == DType::kF32)
                m.fmt = cuda::WFmt::kFp8F32;
            else
                return invalid_argument("{}: scale dtype {} not F8_E8M0 or F32", sc->name, dtype_name(sc->dtype));
            copy(t, m.data);
            copy(*sc, m.scale);
            return m;
        }
        case DType::kI8: {
            if (t.numel() * 2 != N * K || K % 2 != 0)
                return invalid_argument("{}: packed MXFP4 of {} bytes for [{}, {}]", name, t.numel(), N, K);
            DSV4_ASSIGN_OR_RETURN(TensorView s, ckpt->get(base + ".scale"));
            if (s.dtype != DType::kF8E8M0 || s.numel() != N * ((K + 31) / 32))
                return invalid_argument("{}: MXFP4 scale must be F8_E8M0 [{}, {}]", s.name, N, (K + 31) / 32);
            m.fmt = cuda::WFmt::kMxfp4;
            copy(t, m.data);
            copy(s, m.scale);
            return m;
        }
        default: {
            // Other dtypes (F16 ...): the f32 values load_f32 produced.
            m.data.resize(f32.size() * 4);
            std::memcpy(m.data.data(), f32.data(), m.data.size());
            return m;
        }
    }
}

struct Uploader {
    const Checkpoint* ckpt;
    DeviceArena& arena;
    std::map<std::string, int> fmt_count;

    Result<cuda::WeightDesc> matrix(const std::string& name, int64_t N, int64_t K, const F32Vec& f32) {
        DSV4_ASSIGN_OR_RETURN(HostMat m, fetch_matrix(ckpt, name, N, K, f32));
        return put(m, N, K);
    }
    Result<cuda::WeightDesc> put(const HostMat& m, int64_t N, int64_t K) {
        cuda::WeightDesc w;
        w.fmt = m.fmt;
        w.N = int32_t(N);
        w.K = int32_t(K);
        DSV4_ASSIGN_OR_RETURN(w.data, arena.upload(m.data.data(), m.data.size()));
        if (!m.scale.empty()) {
            DSV4_ASSIGN_OR_RETURN(w.scale, arena.upload(m.scale.data(), m.scale.size()));
        }
        ++fmt_count[cuda::wfmt_name(m.fmt)];
        return w;
    }
    // Experts [first, first + E) of one projection packed with a fixed stride.
    Result<cuda::WeightDesc> experts(const std::string& prefix, const std::string& proj, int first, int E, int64_t N,
                                     int64_t K, const std::vector<ExpertWeights>& ew, F32Vec ExpertWeights::*field) {
        HostMat all;
        size_t stride = 0, sstride = 0;
        for (int e = first; e < first + E; ++e) {
            DSV4_ASSIGN_OR_RETURN(
                HostMat m, fetch_matrix(ckpt, prefix + std::to_string(e) + "." + proj + ".weight", N, K, ew[e].*field));
            if (e == first) {
                all.fmt = m.fmt;
                stride = m.data.size();
                sstride = m.scale.size();
            } else if (m.fmt != all.fmt || m.data.size() != stride || m.scale.size() != sstride) {
                return invalid_argument("{}{}.{}: experts of one layer must share a format", prefix, e, proj);
            }
            all.data.insert(all.data.end(), m.data.begin(), m.data.end());
            all.scale.insert(all.scale.end(), m.scale.begin(), m.scale.end());
        }
        DSV4_ASSIGN_OR_RETURN(cuda::WeightDesc w, put(all, N, K));
        w.expert_stride = int64_t(stride);
        w.scale_expert_stride = int64_t(sstride);
        return w;
    }
    Result<const float*> vec(const F32Vec& v) {
        DSV4_ASSIGN_OR_RETURN(void* p, arena.upload(v.data(), v.size() * sizeof(float)));
        return static_cast<const float*>(p);
    }
};

Result<DevMhc> upload_mhc(Uploader& up, const F32Vec& fn, const F32Vec& base, const F32Vec& scale) {
    DevMhc m;
    DSV4_ASSIGN_OR_RETURN(m.fn, up.vec(fn));
    DSV4_ASSIGN_OR_RETURN(m.base, up.vec(base));
    DSV4_ASSIGN_OR_RETURN(m.scale, up.vec(scale));
    return m;
}

Result<DevCompressor> upload_comp(Uploader& up, const std::string& p, const CompressorWeights& c, int64_t d) {
    DevCompressor o;
    const int64_t w = int64_t(c.kappa()) * c.dim;
    DSV4_ASSIGN_OR_RETURN(o.wkv, up.matrix(p + "wkv.weight", w, d, c.wkv));
    DSV4_ASSIGN_OR_RETURN(o.wgate, up.matrix(p + "wgate.weight", w, d, c.wgate));
    DSV4_ASSIGN_OR_RETURN(o.ape, up.vec(c.ape));
    DSV4_ASSIGN_OR_RETURN(o.norm, up.vec(c.norm));
    return o;
}
// One decoder block's weights under checkpoint prefix p ("layers.3." or "mtp.0."); the routed
// experts [ex_first, ex_first + ex_count).
Result<DevLayer> upload_layer(Uploader& up, DeviceArena& arena, const ModelConfig& cfg, const LayerWeights& L,
                              const std::string& p, int ex_first, int ex_count) {
    const int64_t d = cfg.hidden_size, H = cfg.n_heads, D = cfg.head_dim, qr = cfg.q_lora_rank;
    const int64_t G = cfg.o_groups, orank = cfg.o_lora_rank, E = cfg.n_routed_experts, I = cfg.moe_intermediate_size;
    DevLayer o;
    DSV4_ASSIGN_OR_RETURN(o.hc_attn, upload_mhc(up, L.hc_attn_fn, L.hc_attn_base, L.hc_attn_scale));
    DSV4_ASSIGN_OR_RETURN(o.hc_ffn, upload_mhc(up, L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale));
    DSV4_ASSIGN_OR_RETURN(o.attn_norm, up.vec(L.attn_norm));
    DSV4_ASSIGN_OR_RETURN(o.ffn_norm, up.vec(L.ffn_norm));
    DSV4_ASSIGN_OR_RETURN(o.attn_sink, up.vec(L.attn_sink));
    DSV4_ASSIGN_OR_RETURN(o.q_norm, up.vec(L.q_norm));
    DSV4_ASSIGN_OR_RETURN(o.kv_norm, up.vec(L.kv_norm));
    DSV4_ASSIGN_OR_RETURN(o.wq_a, up.matrix(p + "attn.wq_a.weight", qr, d, L.wq_a));
    DSV4_ASSIGN_OR_RETURN(o.wq_b, up.matrix(p + "attn.wq_b.weight", H * D, qr, L.wq_b));
    DSV4_ASSIGN_OR_RETURN(o.wkv, up.matrix(p + "attn.wkv.weight", D, d, L.wkv));
    DSV4_ASSIGN_OR_RETURN(o.wo_a, up.matrix(p + "attn.wo_a.weight", G * orank, (H / G) * D, L.wo_a));
    DSV4_ASSIGN_OR_RETURN(o.wo_b, up.matrix(p + "attn.wo_b.weight", d, G * orank, L.wo_b));
    if (L.has_compressor) {
        DSV4_ASSIGN_OR_RETURN(o.comp, upload_comp(up, p + "attn.compressor.", L.compressor, d));
    }
    if (L.has_indexer) {
        const int64_t IH = cfg.index_n_heads, ID = cfg.index_head_dim;
        DSV4_ASSIGN_OR_RETURN(o.idx_comp, upload_comp(up, p + "attn.indexer.compressor.", L.indexer.compressor, d));
        DSV4_ASSIGN_OR_RETURN(o.idx_wq_b, up.matrix(p + "attn.indexer.wq_b.weight", IH * ID, qr, L.indexer.wq_b));
        DSV4_ASSIGN_OR_RETURN(o.idx_wproj,
                              up.matrix(p + "attn.indexer.weights_proj.weight", IH, d, L.indexer.weights_proj));
    }
    DSV4_ASSIGN_OR_RETURN(o.gate, up.matrix(p + "ffn.gate.weight", E, d, L.gate));
    if (!L.gate_bias.empty()) {
        DSV4_ASSIGN_OR_RETURN(o.gate_bias, up.vec(L.gate_bias));
    }
    if (!L.tid2eid.empty()) {
        DSV4_ASSIGN_OR_RETURN(void* t, arena.upload(L.tid2eid.data(), L.tid2eid.size() * sizeof(int32_t)));
        o.tid2eid = static_cast<const int32_t*>(t);
    }
    DSV4_ASSIGN_OR_RETURN(o.sh_w1, up.matrix(p + "ffn.shared_experts.w1.weight", I, d, L.shared.w1));
    DSV4_ASSIGN_OR_RETURN(o.sh_w3, up.matrix(p + "ffn.shared_experts.w3.weight", I, d, L.shared.w3));
    DSV4_ASSIGN_OR_RETURN(o.sh_w2, up.matrix(p + "ffn.shared_experts.w2.weight", d, I, L.shared.w2));
    const std::string ep = p + "ffn.experts.";
    DSV4_ASSIGN_OR_RETURN(o.ex_w1, up.experts(ep, "w1", ex_first, ex_count, I, d, L.experts, &ExpertWeights::w1));
    DSV4_ASSIGN_OR_RETURN(o.ex_w3, up.experts(ep, "w3", ex_first, ex_count, I, d, L.experts, &ExpertWeights::w3));
    DSV4_ASSIGN_OR_RETURN(o.ex_w2, up.experts(ep, "w2", ex_first, ex_count, d, I, L.experts, &ExpertWeights::w2));
    // The fast expert GEMV's code layout is applied by the runner (CudaRunner::apply_kernel_choices).
    return o;
}
}  // namespace

DeviceArena::~DeviceArena() {
    for (void* p : ptrs_) cudaFree(p);
}

Result<void*> DeviceArena::alloc(size_t bytes) {
    DSV4_ASSIGN_OR_RETURN(void* p, cuda_malloc(bytes, "a device allocation"));
    ptrs_.push_back(p);
    bytes_ += bytes;
    return p;
}

Result<void*> DeviceArena::upload(const void* host, size_t bytes) {
    DSV4_ASSIGN_OR_RETURN(void* p, alloc(bytes));
    if (bytes) DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), "upload"));
    return p;
}

Result<size_t> upload_rope_tables(const ModelConfig& cfg, DeviceArena& arena, DevWeights& dw) {
    const auto rm = ref::make_rope_table(cfg.rope_theta, cfg.rope_dim, false, 1, 1, 1, 1);
    const auto rc = ref::make_rope_table(cfg.compress_rope_theta, cfg.rope_dim, cfg.yarn.enabled, cfg.yarn.factor,
                                         cfg.yarn.original_max_position, cfg.yarn.beta_fast, cfg.yarn.beta_slow);
    DSV4_ASSIGN_OR_RETURN(void* m, arena.upload(rm.inv_freq.data(), rm.inv_freq.size() * sizeof(float)));
    DSV4_ASSIGN_OR_RETURN(void* c, arena.upload(rc.inv_freq.data(), rc.inv_freq.size() * sizeof(float)));
    dw.rope_main = static_cast<const float*>(m);
    dw.rope_compress = static_cast<const float*>(c);
    return (rm.inv_freq.size() + rc.inv_freq.size()) * sizeof(float);
}

Result<DevWeights> upload_weights(const RefModel& model, const Checkpoint* ckpt, DeviceArena& arena, int expert_first,
                                  int expert_count, int mtp_blocks) {
    const ModelConfig& cfg = model.config();
    const ModelWeights& W = model.weights();
    Uploader up{ckpt, arena, {}};
    const int64_t d = cfg.hidden_size, V = cfg.vocab_size, E = cfg.n_routed_experts;
    const int ex_first = expert_count > 0 ? expert_first : 0;
    const int ex_count = expert_count > 0 ? expert_count : int(E);
    if (ex_first < 0 || ex_first + ex_count > E)
        return invalid_argument("experts [{}, {}) outside [0, {})", ex_first, ex_first + ex_count, E);
    DevWeights dw;
    DSV4_ASSIGN_OR_RETURN(dw.embed, up.matrix("embed.weight", V, d, W.embed));
    const bool own_head = !ckpt || ckpt->has("head.weight") || !cfg.tie_word_embeddings;
    DSV4_ASSIGN_OR_RETURN(dw.head, up.matrix(own_head ? "head.weight" : "embed.weight", V, d, W.head));
    DSV4_ASSIGN_OR_RETURN(dw.norm, up.vec(W.norm));
    DSV4_ASSIGN_OR_RETURN(dw.hc_head, upload_mhc(up, W.hc_head_fn, W.hc_head_base, W.hc_head_scale));
    DSV4_RETURN_IF_ERROR(upload_rope_tables(cfg, arena, dw).status());
    for (int l = 0; l < cfg.n_layers; ++l) {
        DSV4_ASSIGN_OR_RETURN(DevLayer o, upload_layer(up, arena, cfg, W.layers[l], "layers." + std::to_string(l) + ".",
                                                       ex_first, ex_count));
        dw.layers.push_back(o);
    }
    // The MTP blocks (spec §2.11): a decoder block each plus their input projections, norms and head mixing.
    if (mtp_blocks > int(W.mtp.size()))
        return error(StatusCode::kFailedPrecondition, "{} MTP block(s) asked, the model holds {} (mtp.* tensors)",
                     mtp_blocks, W.mtp.size());
    for (size_t m = 0; m < size_t(std::max(mtp_blocks, 0)); ++m) {
        const MtpWeights& M = W.mtp[m];
        const std::string p = "mtp." + std::to_string(m) + ".";
        DevMtp o;
        DSV4_ASSIGN_OR_RETURN(o.block, upload_layer(up, arena, cfg, M.block, p, ex_first, ex_count));
        DSV4_ASSIGN_OR_RETURN(o.e_proj, up.matrix(p + "e_proj.weight", d, d, M.e_proj));
        DSV4_ASSIGN_OR_RETURN(o.h_proj, up.matrix(p + "h_proj.weight", d, d, M.h_proj));
        DSV4_ASSIGN_OR_RETURN(o.enorm, up.vec(M.enorm));
        DSV4_ASSIGN_OR_RETURN(o.hnorm, up.vec(M.hnorm));
        DSV4_ASSIGN_OR_RETURN(o.norm, up.vec(M.norm));
        DSV4_ASSIGN_OR_RETURN(o.hc_head, upload_mhc(up, M.hc_head_fn, M.hc_head_base, M.hc_head_scale));
        dw.mtp.push_back(o);
    }
    dw.summary = fmt::format("{:.1f} MiB on the device;", double(arena.bytes()) / (1 << 20));
    for (const auto& [f, n] : up.fmt_count) dw.summary += fmt::format(" {} x{}", f, n);
    return dw;
}

}  // namespace dsv4
