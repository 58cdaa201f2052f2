// One ModelRunner over N GPUs of one host: expert-parallel CudaRunners (cuda_runner.h,
// CudaRunnerOptions::ep_*), one per GPU, each driven by its own host thread with that GPU current,
// joined by an NCCL all-reduce group (dist/nccl_group.h). A step is fanned out to every rank with
// the same batch (attention replicated, experts split) and rank 0's result is returned; the other
// ranks compute no logits. Host-only header; CUDA builds only. Without NCCL in the build, N > 1
// fails with kUnimplemented.
//
// Failure model: every rank gets the same batch, so argument errors (plan) happen on every rank
// before any collective; a device fault on one rank can leave the others waiting in a collective
// (run under a timeout, as scripts/device-multi.sh does).
#pragma once

#include <functional>
#include <memory>

#include "runtime/cuda_bench_runner.h"

namespace dsv4 {

// Builds rank `rank`'s runner on the calling thread (its GPU is current); `opt` carries the
// expert-parallel fields already set.
using RankRunnerFactory = std::function<Result<std::unique_ptr<ModelRunner>>(int rank, const CudaRunnerOptions& opt)>;

// n_gpus ranks on devices 0 .. n_gpus-1. `base`: options of every rank (ep_* are overwritten;
// verbose only on rank 0). The factory must return CUDA runners (make_cuda_runner or
// make_cuda_runner_synthetic). n_gpus 1: the factory's runner alone, no threads, no NCCL.
// Errors: fewer devices than n_gpus, no NCCL, a rank's factory error, NCCL init errors.
Result<std::unique_ptr<CudaBenchRunner>> make_multi_gpu_runner(int n_gpus, const CudaRunnerOptions& base,
                                                               const RankRunnerFactory& factory);

// Device count visible to this process (0 without a usable driver).
int cuda_device_count();

}  // namespace dsv4
