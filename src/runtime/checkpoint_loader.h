// Streams a validated LoadPlan (model/load_plan.h) from the memory-mapped checkpoint shards to one
// GPU: every tensor keeps its checkpoint format (FP8 + scales, MXFP4 + scales, BF16, F32); small
// vectors are widened to f32 and tid2eid narrowed to int32 while being staged. Host memory is
// bounded: tensor bytes go from the mapping (page cache, not anonymous memory) into a ring of two
// pinned staging buffers, one being filled while the other's host-to-device copy runs. Pieces are
// copied in (shard, offset) order so each shard is read sequentially. Load-time repacks (the
// pair-rotated MXFP4 expert layout) run on the GPU afterwards, in CudaRunner::apply_kernel_choices
// as for every weight source.
// Host-only header; CUDA builds only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/config.h"
#include "model/load_plan.h"
#include "runtime/cuda_weights.h"

namespace dsv4 {

struct CheckpointLoadOptions {
    size_t staging_bytes = size_t(64) << 20;  // per pinned staging buffer (two are allocated)
    bool progress = true;                     // a line per shard on stderr and the final summary
    // With progress on a terminal (isatty(stderr)): one line redrawn in place (bytes, GB/s, ETA)
    // instead of the per-shard lines (load_progress.h). kAuto: whether stderr is a terminal.
    enum class Bar { kAuto, kOn, kOff } bar = Bar::kAuto;
    // After the load, the pinned host-to-device copy rate of the staging buffers is measured with
    // this many rounds of copies of both buffers (4 rounds of 2 x 64 MiB: 512 MiB, ~10 ms at 50 GB/s)
    // into a scratch device buffer, so every load reports its rate beside the copy rate the link
    // gives it (CheckpointLoadStats::h2d_gbps; only when progress is printed or stats are asked
    // for; with --gpus N rank 0 prints it, possibly while other ranks still load). 0: not measured.
    int h2d_probe_rounds = 4;
};

struct CheckpointLoadStats {
    double seconds = 0;           // wall time of the copy phase (allocation + copies + repacks)
    uint64_t bytes_read = 0;      // checkpoint bytes read from the shards
    uint64_t device_bytes = 0;    // bytes allocated on the device for the weights
    uint64_t peak_rss_anon = 0;   // max RssAnon (/proc/self/status) sampled during the load, bytes
    uint64_t pinned_bytes = 0;    // pinned host memory held by the staging ring, bytes
    int shards = 0;               // shard files read from
    double h2d_gbps = 0;          // measured pinned host-to-device copy rate, GB/s (0: not measured)
    std::string summary() const;  // one line: GB, seconds, GB/s, peak RssAnon, pinned, pinned H2D GB/s
};

// RssAnon of this process in bytes (0 where /proc/self/status has no such line).
uint64_t rss_anon_bytes();

// Allocates every planned tensor in `arena` (after checking the device has room: ResourceExhausted
// naming the bytes needed and free otherwise, before any allocation) and copies them. Errors from
// CUDA are Internal; on error the caller drops the arena (nothing stays allocated).
Result<DevWeights> load_checkpoint_weights(const ModelConfig& cfg, const LoadPlan& plan, DeviceArena& arena,
                                           const CheckpointLoadOptions& opt = {}, CheckpointLoadStats* stats = nullptr);

}  // namespace dsv4
