// Model weights on the GPU (CUDA backend). Matrices keep their checkpoint format (BF16, F32,
// FP8 e4m3 + block scales, MXFP4 + group scales) and are described by cuda::WeightDesc; routed
// experts of a layer are packed into one array per projection (fixed stride). Vectors (norms,
// mHC parameters, sinks, ape, router bias) are f32. Without a checkpoint (the built-in tiny model)
// matrices are uploaded as f32 from ModelWeights. Host-only header; the device memory is owned by
// a DeviceArena and freed with it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/ops/ops.h"
#include "model/ref_model.h"

namespace dsv4 {

class Checkpoint;

// Owns device allocations; frees them on destruction.
class DeviceArena {
public:
    DeviceArena() = default;
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;
    ~DeviceArena();
    // Errors: kResourceExhausted naming the bytes asked and the bytes free (runtime/cuda_status.h,
    // cuda_malloc); callers add what the memory was for (Status::with_context).
    Result<void*> alloc(size_t bytes);
    Result<void*> upload(const void* host, size_t bytes);
    template <class T>
    Result<T*> alloc_n(size_t n) {
        DSV4_ASSIGN_OR_RETURN(void* p, alloc(sizeof(T) * (n ? n : 1)));
        return static_cast<T*>(p);
    }
    size_t bytes() const { return bytes_; }

private:
    std::vector<void*> ptrs_;
    size_t bytes_ = 0;
};

struct DevCompressor {
    cuda::WeightDesc wkv, wgate;  // [kappa*c, d]
    const float* ape = nullptr;   // [r, kappa*c]
    const float* norm = nullptr;  // [c]
};

struct DevMhc {
    const float* fn = nullptr;
    const float* base = nullptr;
    const float* scale = nullptr;
};

struct DevLayer {
    DevMhc hc_attn, hc_ffn;
    const float *attn_norm = nullptr, *ffn_norm = nullptr, *attn_sink = nullptr;
    const float *q_norm = nullptr, *kv_norm = nullptr;
    cuda::WeightDesc wq_a, wq_b, wkv, wo_a, wo_b;
    DevCompressor comp, idx_comp;
    cuda::WeightDesc idx_wq_b, idx_wproj;
    cuda::WeightDesc gate;
    const float* gate_bias = nullptr;
    const int32_t* tid2eid = nullptr;
    cuda::WeightDesc sh_w1, sh_w3, sh_w2;
    cuda::WeightDesc ex_w1, ex_w3, ex_w2;  // E experts, expert_stride set
};

// An MTP block (spec §2.11): X = e_proj enorm(E[next]) + h_proj hnorm(streams), one decoder block (ratio 0,
// learned routing), then its own hc_head and norm before the shared head.
struct DevMtp {
    DevLayer block;
    cuda::WeightDesc e_proj, h_proj;  // [d, d]
    const float *enorm = nullptr, *hnorm = nullptr, *norm = nullptr;
    DevMhc hc_head;
};

struct DevWeights {
    cuda::WeightDesc embed, head;
    const float* norm = nullptr;
    DevMhc hc_head;
    const float* rope_main = nullptr;      // [rope_dim/2]
    const float* rope_compress = nullptr;  // [rope_dim/2]
    std::vector<DevLayer> layers;
    std::vector<DevMtp> mtp;  // the model's MTP blocks (uploads from a RefModel that holds them)
    std::string summary;      // formats used, bytes
};

// The two RoPE inverse-frequency tables of `cfg` (main: rope_theta; compressed rows: compress_rope_theta
// with YaRN), derived from the config alone, uploaded into dw.rope_main / dw.rope_compress. Returns the
// bytes uploaded. Errors: device allocation or copy failures.
Result<size_t> upload_rope_tables(const ModelConfig& cfg, DeviceArena& arena, DevWeights& dw);

// Uploads the model. `ckpt` may be null (f32 from model.weights()). Expert parallelism: only the
// routed experts [expert_first, expert_first + expert_count) are uploaded (packed from local index
// 0); expert_count 0 uploads all. mtp_blocks: the model's first MTP blocks to upload too (DevWeights::mtp).
// Errors: a range outside [0, E), more MTP blocks than the model holds.
Result<DevWeights> upload_weights(const RefModel& model, const Checkpoint* ckpt, DeviceArena& arena,
                                  int expert_first = 0, int expert_count = 0, int mtp_blocks = 0);

}  // namespace dsv4
