// load_checkpoint_weights (see checkpoint_loader.h).
#include "runtime/checkpoint_loader.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <unordered_map>

#include "core/dtype.h"
#include "runtime/load_progress.h"

namespace dsv4 {

namespace {

Status cu(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    return error(StatusCode::kInternal, "CUDA error in {}: {}", what, cudaGetErrorString(e));
}

// How a piece's bytes are staged: unchanged, or converted element by element.
enum class Conv { kRaw, kBf16ToF32, kF16ToF32, kI64ToI32 };

size_t src_elem(Conv c) { return c == Conv::kRaw ? 1 : c == Conv::kI64ToI32 ? 8 : 2; }
size_t dst_elem(Conv c) { return c == Conv::kRaw ? 1 : 4; }

struct Copy {
    const uint8_t* src = nullptr;
    size_t src_bytes = 0;
    uint8_t* dst = nullptr;
    Conv conv = Conv::kRaw;
    const std::string* file = nullptr;
};

void convert(Conv c, const uint8_t* src, size_t n_elems, uint8_t* dst) {
    switch (c) {
        case Conv::kRaw:
            std::memcpy(dst, src, n_elems);
            return;
        case Conv::kBf16ToF32:
        case Conv::kF16ToF32:
            for (size_t i = 0; i < n_elems; ++i) {
                uint16_t v;
                std::memcpy(&v, src + 2 * i, 2);
                const float f = c == Conv::kBf16ToF32 ? bf16_to_f32(v) : f16_to_f32(v);
                std::memcpy(dst + 4 * i, &f, 4);
            }
            return;
        case Conv::kI64ToI32:
            for (size_t i = 0; i < n_elems; ++i) {
                int64_t v;
                std::memcpy(&v, src + 8 * i, 8);
                const int32_t o = int32_t(v);  // range checked by the plan (tid2eid in [0, E))
                std::memcpy(dst + 4 * i, &o, 4);
            }
            return;
    }
}

Conv float_conv(DType t) {
    return t == DType::kBF16 ? Conv::kBf16ToF32 : t == DType::kF16 ? Conv::kF16ToF32 : Conv::kRaw;
}

cuda::WFmt wfmt(PlanFormat f) {
    switch (f) {
        case PlanFormat::kF32:
        case PlanFormat::kF16:
            return cuda::WFmt::kF32;
        case PlanFormat::kBF16:
            return cuda::WFmt::kBF16;
        case PlanFormat::kFp8E8M0:
            return cuda::WFmt::kFp8E8M0;
        case PlanFormat::kFp8F32:
            return cuda::WFmt::kFp8F32;
        case PlanFormat::kMxfp4:
            return cuda::WFmt::kMxfp4;
    }
    return cuda::WFmt::kF32;
}

// The pinned staging ring: two buffers, each reused once its previous H2D copy has completed.
class StagingRing {
public:
    ~StagingRing() {
        for (int i = 0; i < 2; ++i) {
            if (done_[i]) cudaEventDestroy(done_[i]);
            if (buf_[i]) cudaFreeHost(buf_[i]);
        }
        if (stream_) cudaStreamDestroy(stream_);
    }
    Status init(size_t bytes) {
        bytes_ = bytes;
        DSV4_RETURN_IF_ERROR(cu(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "staging stream"));
        for (int i = 0; i < 2; ++i) {
            DSV4_RETURN_IF_ERROR(cu(cudaHostAlloc(reinterpret_cast<void**>(&buf_[i]), bytes, cudaHostAllocDefault),
                                    "pinned staging buffer"));
            DSV4_RETURN_IF_ERROR(cu(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming), "staging event"));
            DSV4_RETURN_IF_ERROR(cu(cudaEventRecord(done_[i], stream_), "staging event"));
        }
        return Status::ok();
    }
    size_t capacity() const { return bytes_; }
    size_t pinned_bytes() const { return 2 * bytes_; }
    // Stages `n_elems` elements of `c` from src and queues their copy to dst.
    Status put(Conv c, const uint8_t* src, size_t n_elems, uint8_t* dst) {
        DSV4_RETURN_IF_ERROR(cu(cudaEventSynchronize(done_[cur_]), "staging wait"));
        convert(c, src, n_elems,
                buf_[cur_]);  // the file read: page faults on the mapping land here
        const size_t n = n_elems * dst_elem(c);
        DSV4_RETURN_IF_ERROR(cu(cudaMemcpyAsync(dst, buf_[cur_], n, cudaMemcpyHostToDevice, stream_), "weight copy"));
        DSV4_RETURN_IF_ERROR(cu(cudaEventRecord(done_[cur_], stream_), "staging event"));
        cur_ ^= 1;
        return Status::ok();
    }
    Status drain() { return cu(cudaStreamSynchronize(stream_), "weight copies"); }
    // The pinned host-to-device copy rate of the staging buffers, in GB/s: `rounds` copies of each
    // full buffer into a scratch device buffer (allocated here and freed), timed with events on
    // the staging stream after the ring has drained. 0 when the scratch buffer cannot be allocated.
    Result<double> measure_h2d(int rounds) {
        DSV4_RETURN_IF_ERROR(drain());
        void* scratch = nullptr;
        if (cudaMalloc(&scratch, bytes_) != cudaSuccess) {
            (void)cudaGetLastError();  // not enough room left: report no rate, not an error
            return 0.0;
        }
        cudaEvent_t e0 = nullptr, e1 = nullptr;
        Status s = cu(cudaEventCreate(&e0), "event");
        if (s.is_ok()) s = cu(cudaEventCreate(&e1), "event");
        // One untimed copy per buffer first (first-touch costs), then the timed rounds.
        for (int i = 0; s.is_ok() && i < 2; ++i)
            s = cu(cudaMemcpyAsync(scratch, buf_[i], bytes_, cudaMemcpyHostToDevice, stream_), "h2d probe");
        if (s.is_ok()) s = cu(cudaEventRecord(e0, stream_), "event");
        for (int r = 0; s.is_ok() && r < 2 * rounds; ++r)
            s = cu(cudaMemcpyAsync(scratch, buf_[r & 1], bytes_, cudaMemcpyHostToDevice, stream_), "h2d probe");
        if (s.is_ok()) s = cu(cudaEventRecord(e1, stream_), "event");
        if (s.is_ok()) s = cu(cudaEventSynchronize(e1), "event");
        float ms = 0;
        if (s.is_ok()) s = cu(cudaEventElapsedTime(&ms, e0, e1), "event");
        if (e0) cudaEventDestroy(e0);
        if (e1) cudaEventDestroy(e1);
        cudaFree(scratch);
        DSV4_RETURN_IF_ERROR(s);
        return ms > 0 ? double(2 * rounds) * double(bytes_) / 1e9 / (double(ms) / 1e3) : 0.0;
    }

private:
    size_t bytes_ = 0;
    uint8_t* buf_[2] = {};
    cudaEvent_t done_[2] = {};
    cudaStream_t stream_ = nullptr;
    int cur_ = 0;
};

}  // namespace

uint64_t rss_anon_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("RssAnon:", 0) == 0) return uint64_t(std::strtoull(line.c_str() + 8, nullptr, 10)) * 1024;
    return 0;
}

std::string CheckpointLoadStats::summary() const {
    const double gb = double(bytes_read) / 1e9;
    const double rate = seconds > 0 ? gb / seconds : 0.0;
    return fmt::format(
        "loaded {:.2f} GB from {} shard(s) in {:.2f} s ({:.2f} GB/s); {:.2f} GB on the device; "
        "peak RssAnon {:.0f} MiB, pinned staging {:.0f} MiB; pinned H2D {}",
        gb, shards, seconds, rate, double(device_bytes) / 1e9, double(peak_rss_anon) / (1 << 20),
        double(pinned_bytes) / (1 << 20),
        h2d_gbps > 0 ? fmt::format("{:.2f} GB/s (load at {:.0f}% of it)", h2d_gbps, 100.0 * rate / h2d_gbps)
                     : std::string("not measured"));
}

Result<DevWeights> load_checkpoint_weights(const ModelConfig& cfg, const LoadPlan& plan, DeviceArena& arena,
                                           const CheckpointLoadOptions& opt, CheckpointLoadStats* stats_out) {
    const auto t0 = std::chrono::steady_clock::now();
    CheckpointLoadStats st;
    st.peak_rss_anon = rss_anon_bytes();
    size_t free_b = 0, total_b = 0;
    DSV4_RETURN_IF_ERROR(cu(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
    const uint64_t margin = uint64_t(1) << 30;  // KV pool and workspaces come after; keep room to say so early
    if (plan.device_bytes + margin > free_b)
        return error(StatusCode::kResourceExhausted,
                     "the weights need {:.1f} GiB of device memory (experts [{}, {}) of {}), "
                     "{:.1f} GiB are free: "
                     "spread the routed experts over more GPUs (--gpus N; `dsv4 plan` gives the "
                     "memory per count)",
                     double(plan.device_bytes) / (1 << 30), plan.expert_first, plan.expert_first + plan.expert_count,
                     cfg.n_routed_experts, double(free_b) / (1 << 30));

    // Device allocations first, then the copies in shard order.
    std::unordered_map<std::string, cuda::WeightDesc> mats;
    std::unordered_map<std::string, const void*> vecs;
    std::vector<Copy> copies;
    std::map<std::string, int> fmt_count;
    std::unordered_map<std::string, cuda::WeightDesc> groups;  // expert_group -> packed desc
    for (const PlanTensor& t : plan.tensors) {
        if (t.kind != PlanKind::kMatrix) {
            DSV4_ASSIGN_OR_RETURN(void* p, arena.alloc(size_t(t.weight.numel()) * 4));
            const Conv c = t.kind == PlanKind::kTid2eid ? (t.weight.dtype == DType::kI64 ? Conv::kI64ToI32 : Conv::kRaw)
                                                        : float_conv(t.weight.dtype);
            copies.push_back({t.weight.data, t.weight.nbytes, static_cast<uint8_t*>(p), c, &t.weight.file});
            vecs[t.name] = p;
            continue;
        }
        const Conv c = t.fmt == PlanFormat::kF16 ? Conv::kF16ToF32 : Conv::kRaw;
        const size_t dbytes = t.weight.nbytes / src_elem(c) * dst_elem(c);
        uint8_t *data = nullptr, *scale = nullptr;
        if (t.expert_local >= 0) {
            auto it = groups.find(t.expert_group);
            if (it == groups.end()) {
                cuda::WeightDesc w;
                w.fmt = wfmt(t.fmt);
                w.N = int32_t(t.shape[0]);
                w.K = int32_t(t.shape[1]);
                w.expert_stride = int64_t(dbytes);
                w.scale_expert_stride = int64_t(t.scale.nbytes);
                DSV4_ASSIGN_OR_RETURN(w.data, arena.alloc(dbytes * size_t(plan.expert_count)));
                if (t.scale.nbytes) {
                    DSV4_ASSIGN_OR_RETURN(w.scale, arena.alloc(t.scale.nbytes * size_t(plan.expert_count)));
                }
                it = groups.emplace(t.expert_group, w).first;
                ++fmt_count[cuda::wfmt_name(w.fmt)];
            }
            data = static_cast<uint8_t*>(const_cast<void*>(it->second.data)) + size_t(t.expert_local) * dbytes;
            if (t.scale.nbytes)
                scale = static_cast<uint8_t*>(const_cast<void*>(it->second.scale)) +
                        size_t(t.expert_local) * t.scale.nbytes;
        } else {
            cuda::WeightDesc w;
            w.fmt = wfmt(t.fmt);
            w.N = int32_t(t.shape[0]);
            w.K = int32_t(t.shape[1]);
            DSV4_ASSIGN_OR_RETURN(w.data, arena.alloc(dbytes));
            if (t.scale.nbytes) {
                DSV4_ASSIGN_OR_RETURN(w.scale, arena.alloc(t.scale.nbytes));
            }
            data = static_cast<uint8_t*>(const_cast<void*>(w.data));
            scale = static_cast<uint8_t*>(const_cast<void*>(w.scale));
            mats[t.name] = w;
            ++fmt_count[cuda::wfmt_name(w.fmt)];
        }
        copies.push_back({t.weight.data, t.weight.nbytes, data, c, &t.weight.file});
        if (t.scale.nbytes) copies.push_back({t.scale.data, t.scale.nbytes, scale, Conv::kRaw, &t.scale.file});
    }
    // Shard by shard, each in offset order: sequential reads of every file.
    std::stable_sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) {
        if (*a.file != *b.file) return *a.file < *b.file;
        return a.src < b.src;
    });
    std::map<std::string, uint64_t> shard_bytes;
    uint64_t total_bytes = 0;
    for (const Copy& c : copies) {
        shard_bytes[*c.file] += c.src_bytes;
        total_bytes += c.src_bytes;
    }
    const bool bar = opt.progress && (opt.bar == CheckpointLoadOptions::Bar::kOn ||
                                      (opt.bar == CheckpointLoadOptions::Bar::kAuto && isatty(STDERR_FILENO)));
    LoadProgress progress(total_bytes, bar);

    StagingRing ring;
    DSV4_RETURN_IF_ERROR(ring.init(opt.staging_bytes));
    st.pinned_bytes = ring.pinned_bytes();
    const std::string* cur_file = nullptr;
    auto shard_t0 = std::chrono::steady_clock::now();
    uint64_t shard_done = 0, since_sample = 0;
    auto finish_shard = [&]() -> Status {
        if (!cur_file) return Status::ok();
        DSV4_RETURN_IF_ERROR(ring.drain());
        st.peak_rss_anon = std::max(st.peak_rss_anon, rss_anon_bytes());
        ++st.shards;
        if (opt.progress && !bar) {
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - shard_t0).count();
            std::fprintf(stderr, "[load] shard %d/%zu %s: %.2f GB in %.2f s (%.2f GB/s)\n", st.shards,
                         shard_bytes.size(), cur_file->c_str(), double(shard_done) / 1e9, s,
                         s > 0 ? double(shard_done) / 1e9 / s : 0.0);
        }
        return Status::ok();
    };
    for (const Copy& c : copies) {
        if (!cur_file || *cur_file != *c.file) {
            DSV4_RETURN_IF_ERROR(finish_shard());
            cur_file = c.file;
            shard_t0 = std::chrono::steady_clock::now();
            shard_done = 0;
        }
        const size_t se = src_elem(c.conv), de = dst_elem(c.conv);
        const size_t n_elems = c.src_bytes / se, per_piece = ring.capacity() / de;
        for (size_t i = 0; i < n_elems; i += per_piece) {
            const size_t n = std::min(per_piece, n_elems - i);
            DSV4_RETURN_IF_ERROR(ring.put(c.conv, c.src + i * se, n, c.dst + i * de));
        }
        shard_done += c.src_bytes;
        st.bytes_read += c.src_bytes;
        progress.update(st.bytes_read);
        since_sample += c.src_bytes;
        if (since_sample >= (uint64_t(1) << 30)) {
            since_sample = 0;
            st.peak_rss_anon = std::max(st.peak_rss_anon, rss_anon_bytes());
        }
    }
    DSV4_RETURN_IF_ERROR(finish_shard());
    progress.finish();

    // Assemble the DevWeights from the copies' destinations.
    auto mat = [&](const std::string& n) -> Result<cuda::WeightDesc> {
        auto it = mats.find(n);
        if (it == mats.end()) return error(StatusCode::kInternal, "load plan has no matrix '{}'", n);
        return it->second;
    };
    auto vec = [&](const std::string& n) -> Result<const float*> {
        auto it = vecs.find(n);
        if (it == vecs.end()) return error(StatusCode::kInternal, "load plan has no vector '{}'", n);
        return static_cast<const float*>(it->second);
    };
    auto mhc = [&](const std::string& p) -> Result<DevMhc> {
        DevMhc m;
        DSV4_ASSIGN_OR_RETURN(m.fn, vec(p + "_fn"));
        DSV4_ASSIGN_OR_RETURN(m.base, vec(p + "_base"));
        DSV4_ASSIGN_OR_RETURN(m.scale, vec(p + "_scale"));
        return m;
    };
    auto comp = [&](const std::string& p) -> Result<DevCompressor> {
        DevCompressor c;
        DSV4_ASSIGN_OR_RETURN(c.wkv, mat(p + "wkv.weight"));
        DSV4_ASSIGN_OR_RETURN(c.wgate, mat(p + "wgate.weight"));
        DSV4_ASSIGN_OR_RETURN(c.ape, vec(p + "ape"));
        DSV4_ASSIGN_OR_RETURN(c.norm, vec(p + "norm.weight"));
        return c;
    };
    DevWeights dw;
    DSV4_ASSIGN_OR_RETURN(dw.embed, mat("embed.weight"));
    DSV4_ASSIGN_OR_RETURN(dw.head, mat(plan.head_tied ? "embed.weight" : "head.weight"));
    DSV4_ASSIGN_OR_RETURN(dw.norm, vec("norm.weight"));
    DSV4_ASSIGN_OR_RETURN(dw.hc_head, mhc("hc_head"));
    DSV4_RETURN_IF_ERROR(upload_rope_tables(cfg, arena, dw).status());
    // One decoder block under prefix p: compress ratio r, CSA, hash routing (as the plan's Planner::block).
    auto block = [&](const std::string& p, int r, bool csa, bool hash) -> Result<DevLayer> {
        DevLayer o;
        DSV4_ASSIGN_OR_RETURN(o.hc_attn, mhc(p + "hc_attn"));
        DSV4_ASSIGN_OR_RETURN(o.hc_ffn, mhc(p + "hc_ffn"));
        DSV4_ASSIGN_OR_RETURN(o.attn_norm, vec(p + "attn_norm.weight"));
        DSV4_ASSIGN_OR_RETURN(o.ffn_norm, vec(p + "ffn_norm.weight"));
        DSV4_ASSIGN_OR_RETURN(o.attn_sink, vec(p + "attn.attn_sink"));
        DSV4_ASSIGN_OR_RETURN(o.q_norm, vec(p + "attn.q_norm.weight"));
        DSV4_ASSIGN_OR_RETURN(o.kv_norm, vec(p + "attn.kv_norm.weight"));
        DSV4_ASSIGN_OR_RETURN(o.wq_a, mat(p + "attn.wq_a.weight"));
        DSV4_ASSIGN_OR_RETURN(o.wq_b, mat(p + "attn.wq_b.weight"));
        DSV4_ASSIGN_OR_RETURN(o.wkv, mat(p + "attn.wkv.weight"));
        DSV4_ASSIGN_OR_RETURN(o.wo_a, mat(p + "attn.wo_a.weight"));
        DSV4_ASSIGN_OR_RETURN(o.wo_b, mat(p + "attn.wo_b.weight"));
        if (r > 0) {
            DSV4_ASSIGN_OR_RETURN(o.comp, comp(p + "attn.compressor."));
        }
        if (csa) {
            DSV4_ASSIGN_OR_RETURN(o.idx_comp, comp(p + "attn.indexer.compressor."));
            DSV4_ASSIGN_OR_RETURN(o.idx_wq_b, mat(p + "attn.indexer.wq_b.weight"));
            DSV4_ASSIGN_OR_RETURN(o.idx_wproj, mat(p + "attn.indexer.weights_proj.weight"));
        }
        DSV4_ASSIGN_OR_RETURN(o.gate, mat(p + "ffn.gate.weight"));
        if (hash) {
            auto it = vecs.find(p + "ffn.gate.tid2eid");
            if (it == vecs.end()) return error(StatusCode::kInternal, "load plan has no tid2eid for {}", p);
            o.tid2eid = static_cast<const int32_t*>(it->second);
        } else {
            DSV4_ASSIGN_OR_RETURN(o.gate_bias, vec(p + "ffn.gate.bias"));
        }
        DSV4_ASSIGN_OR_RETURN(o.sh_w1, mat(p + "ffn.shared_experts.w1.weight"));
        DSV4_ASSIGN_OR_RETURN(o.sh_w3, mat(p + "ffn.shared_experts.w3.weight"));
        DSV4_ASSIGN_OR_RETURN(o.sh_w2, mat(p + "ffn.shared_experts.w2.weight"));
        for (auto [dst, proj] : {std::pair{&o.ex_w1, "w1"}, std::pair{&o.ex_w3, "w3"}, std::pair{&o.ex_w2, "w2"}}) {
            auto it = groups.find(p + "ffn.experts." + proj);
            if (it == groups.end()) return error(StatusCode::kInternal, "load plan has no experts {} in {}", proj, p);
            *dst = it->second;
        }
        // The fast expert GEMV layout is applied by the runner (CudaRunner::apply_kernel_choices).
        return o;
    };
    for (int l = 0; l < cfg.n_layers; ++l) {
        DSV4_ASSIGN_OR_RETURN(DevLayer o,
                              block("layers." + std::to_string(l) + ".", cfg.compress_ratio(l),
                                    cfg.layer_types[l] == AttnType::kCSA, cfg.mlp_types[l] == MoeRouting::kHash));
        dw.layers.push_back(o);
    }
    for (int m = 0; m < plan.mtp_blocks; ++m) {
        const std::string p = "mtp." + std::to_string(m) + ".";
        DevMtp o;
        DSV4_ASSIGN_OR_RETURN(o.block, block(p, 0, false, false));
        DSV4_ASSIGN_OR_RETURN(o.e_proj, mat(p + "e_proj.weight"));
        DSV4_ASSIGN_OR_RETURN(o.h_proj, mat(p + "h_proj.weight"));
        DSV4_ASSIGN_OR_RETURN(o.enorm, vec(p + "enorm.weight"));
        DSV4_ASSIGN_OR_RETURN(o.hnorm, vec(p + "hnorm.weight"));
        DSV4_ASSIGN_OR_RETURN(o.norm, vec(p + "norm.weight"));
        DSV4_ASSIGN_OR_RETURN(o.hc_head, mhc(p + "hc_head"));
        dw.mtp.push_back(o);
    }
    DSV4_RETURN_IF_ERROR(cu(cudaDeviceSynchronize(), "weight load"));
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.device_bytes = arena.bytes();
    st.peak_rss_anon = std::max(st.peak_rss_anon, rss_anon_bytes());
    if (opt.h2d_probe_rounds > 0 && (opt.progress || stats_out)) {  // only when someone sees it
        DSV4_ASSIGN_OR_RETURN(st.h2d_gbps, ring.measure_h2d(opt.h2d_probe_rounds));
    }
    dw.summary = fmt::format("{:.1f} MiB on the device;", double(arena.bytes()) / (1 << 20));
    for (const auto& [f, n] : fmt_count) dw.summary += fmt::format(" {} x{}", f, n);
    if (!plan.skipped.empty())
        dw.summary += fmt::format("; {} checkpoint tensors skipped ({}: {})", plan.skipped.size(), plan.skipped[0].name,
                                  plan.skipped[0].reason);
    if (opt.progress) std::fprintf(stderr, "[load] %s\n", st.summary().c_str());
    if (stats_out) *stats_out = st;
    return dw;
}

}  // namespace dsv4
