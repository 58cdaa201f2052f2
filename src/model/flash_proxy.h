// The DeepSeek-V4-Flash proxy (../shared/docs/perf-method.md): the real Flash per-layer shapes
// (spec §1.1) with a configurable number and order of layers, plus the bytes-moved model of one
// decode step that the proxy benchmark reports against. CPU-only (no CUDA), unit-tested.
//
// Weight formats follow the checkpoint (spec §4.1, §4.2), with vectors widened to f32 as the
// CUDA runner holds them: FP8 e4m3 block-128 + UE8M0 scales (attention, shared expert, indexer
// wq_b), MXFP4 + UE8M0 1x32 scales (routed experts), BF16 (embedding, LM head, router,
// compressors, indexer weights_proj), f32 vectors (norms, mHC, sinks, ape, router bias), int32
// tid2eid (hash layers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace dsv4 {

struct FlashProxySpec {
    int n_layers = 20;
    // Empty: default_proxy_layer_types(n_layers). Else exactly n_layers entries.
    std::vector<AttnType> layer_types;
    int hash_layers = 3;  // the first hash_layers layers route by tid2eid (clamped to n_layers)
};

// Flash's schedule shape at any depth: layers 0 and 1 sliding-only, then CSA and HCA alternating
// starting with CSA (20 layers: 2 sliding + 9 CSA + 9 HCA). n_layers <= 2: all sliding.
std::vector<AttnType> default_proxy_layer_types(int n_layers);

// "sliding,csa,hca,..." (also "swa", "s", "c", "h"; case-insensitive). Errors name the bad item.
Result<std::vector<AttnType>> parse_layer_types(std::string_view list);

// The Flash config (spec §1.1 values) with the proxy's layer list. Validated.
Result<ModelConfig> flash_proxy_config(const FlashProxySpec& spec);

// Bytes of one matrix in a checkpoint format.
int64_t fp8_block_bytes(int64_t N, int64_t K);  // e4m3 + UE8M0 [ceil(N/128), ceil(K/128)]
int64_t mxfp4_bytes(int64_t N, int64_t K);      // packed e2m1 [N, K/2] + UE8M0 [N, ceil(K/32)]
inline int64_t bf16_bytes(int64_t N, int64_t K) { return 2 * N * K; }

// Weight bytes of the proxy in the formats above, by how a decode step touches them.
struct ProxyWeightBytes {
    int64_t streamed = 0;           // read whole every step: attention, shared experts, routers, compressors,
                                    // indexer, mHC, norms, LM head
    int64_t experts = 0;            // routed experts of all layers (read in proportion to the experts used)
    int64_t embed = 0;              // embedding table (one row per token read)
    int64_t tables = 0;             // tid2eid of the hash layers (one row per token read)
    int64_t streamed_params = 0;    // matrix elements in `streamed` (FLOP count: 2 per element per token)
    int64_t expert_params_one = 0;  // matrix elements of one routed expert (w1 + w3 + w2)
    int64_t total() const { return streamed + experts + embed + tables; }
};
ProxyWeightBytes proxy_weight_bytes(const ModelConfig& cfg);

// Stored bytes of the KV rows a decode step reads, per active row format.
struct KvRowBytes {
    std::string name;       // "f32", "bf16", "fp8"
    int64_t ring_row = 0;   // window ring row (head_dim latent)
    int64_t main_row = 0;   // compressed main row
    int64_t index_row = 0;  // indexer key row
};
// "f32": everything f32 (the CUDA runner's exact mode); "bf16": ring, compressed and indexer rows
// bf16 (the runner's bf16 switch); "fp8": the reference layout, 584-byte main and ring rows and
// 132-byte indexer rows (128 e4m3 + f32 scale), as perf-method.md counts them (the runner keeps
// indexer rows bf16, 256 B: the model is the roofline's, a lower bound on what dsv4 reads).
Result<KvRowBytes> kv_row_bytes(const ModelConfig& cfg, std::string_view format);

// Expected fraction of a layer's routed experts that a step of B tokens touches when each token
// picks k of `hot` equally likely experts out of E (uniform routing: hot = E):
// (hot / E) * (1 - (1 - k/hot)^B).
double expert_fraction(int B, int E, int k, int hot);

// The bytes-moved model of one decode step at batch B, context L (tokens before the one decoded).
struct StepBytesModel {
    double dense = 0;    // streamed weights + B embedding rows + B tid2eid rows
    double experts = 0;  // experts x expert_fraction
    double kv = 0;       // B x kv_per_seq
    double kv_per_seq = 0;
    double expert_frac = 0;
    double flops = 0;  // 2 x matrix elements x tokens (dense + k experts) + attention + indexer
    double total() const { return dense + experts + kv; }
};
// KV per sequence and layer: min(L+1, W) ring rows; CSA: min(topk, n) main rows + n indexer rows
// with n = (L+1)/4 completed windows; HCA: (L+1)/128 main rows. Compressor state traffic
// (a few rows per step) is left out.
StepBytesModel step_bytes_model(const ModelConfig& cfg, const ProxyWeightBytes& w, const KvRowBytes& rows, int B,
                                int64_t L, int hot_experts);
// One line per term, for the benchmark's printout.
std::string describe_bytes_model(const ModelConfig& cfg, const ProxyWeightBytes& w, const KvRowBytes& rows,
                                 int hot_experts);

}  // namespace dsv4
