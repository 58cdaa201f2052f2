// Seeded synthetic data generated directly on the GPU, in the checkpoint's own formats (spec §4.2)
// and in the KV row formats of the page pool (spec §3.2): the Flash proxy benchmark's weights and
// pre-filled context (../shared/docs/perf-method.md). Every value is a pure function of
// (seed, element index), so two fills with one seed are bit-identical. Values are finite and
// non-zero in the bulk (zeros would run faster than real data). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::synth {

// f32 uniform in [lo, hi).
cudaError_t fill_f32(float* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t st);
// bf16 uniform in [-amp, amp).
cudaError_t fill_bf16(void* p, int64_t n, uint64_t seed, float amp, cudaStream_t st);
// e4m3 codes with random sign and mantissa and exponent field 5..8: |v| in [0.25, 3.75], never NaN.
cudaError_t fill_e4m3(void* p, int64_t n, uint64_t seed, cudaStream_t st);
// UE8M0 scale bytes uniform in [lo, hi] (clamped to [0, 254]: 255 is NaN). `first`: p[i] gets the
// value of element first + i of the seed's sequence (a slice of a larger fill: expert parallelism).
cudaError_t fill_ue8m0(void* p, int64_t n, uint64_t seed, int lo, int hi, cudaStream_t st, int64_t first = 0);
// Packed MXFP4 bytes (two e2m1 codes each, all 16 codes valid); `first` as fill_ue8m0.
cudaError_t fill_mxfp4(void* p, int64_t n_bytes, uint64_t seed, cudaStream_t st, int64_t first = 0);
// tid2eid [V, k] int32: per row k distinct experts from [0, hot) (hot <= E), uniform over rows.
cudaError_t fill_tid2eid(int32_t* p, int64_t V, int k, int hot, uint64_t seed, cudaStream_t st);
// Rounds p[0, n) in place to the nearest bf16 value (ties to even; core/dtype.h round_bf16), kept
// as f32: what a BF16 checkpoint tensor holds once widened to f32.
cudaError_t round_to_bf16(float* p, int64_t n, cudaStream_t st);

// ---- KV page fill ------------------------------------------------------------------------------
// How rows of one kind sit in a page: `count` rows of `dim` dims, the first at byte `byte_off`,
// `stride` bytes apart, stored as `kind`.
enum class KvFillKind : int32_t {
    kF32 = 0,        // dim f32, uniform [-1, 1)
    kBf16 = 1,       // dim bf16, uniform [-1, 1)
    kFp8Row584 = 2,  // reference FP8 row (kernels/cuda/attention/sparse_decode_args.h): dim-64 e4m3 codes,
                     // 64 bf16 RoPE dims, (dim-64)/64 UE8M0 scales in [124, 128], zero pad to `stride`
    kFp8Row132 = 3,  // indexer FP8 row: dim e4m3 codes + one f32 scale in [0.5, 2)
};
struct KvFillRegion {
    int64_t byte_off = 0;
    int64_t stride = 0;
    int32_t count = 0;
    int32_t dim = 0;
    KvFillKind kind = KvFillKind::kF32;
};
// Fills every region of every page: pages[i] (device array of n_pages ids) at base + id * page_bytes;
// regions: device array of n_regions. Rows of different pages/regions get different values.
cudaError_t fill_kv_pages(void* base, int64_t page_bytes, const int32_t* pages, int64_t n_pages,
                          const KvFillRegion* regions, int n_regions, uint64_t seed, cudaStream_t st);

}  // namespace dsv4::cuda::synth
