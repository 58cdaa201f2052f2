#include "kernels/cuda/attention/sparse_decode_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/attention/sparse_decode.h"
#include "kernels/ref/fp64.h"

namespace dsv4::cuda {

namespace {

constexpr int kD = 512;
constexpr int kPoolRows = 3000;

// A device buffer freed on every path out of the check.
struct Dev {
    void* p = nullptr;
    ~Dev() { cudaFree(p); }
    Status alloc_copy(const void* host, size_t bytes) {
        if (cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess)
            return error(StatusCode::kInternal, "sparse_decode check: cudaMalloc of {} bytes: {}", bytes,
                         cudaGetErrorString(e));
        if (host && bytes)
            if (cudaError_t e = cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice); e != cudaSuccess)
                return error(StatusCode::kInternal, "sparse_decode check: upload: {}", cudaGetErrorString(e));
        return Status::ok();
    }
};

std::vector<float> randn_bf16(std::mt19937& g, size_t n, float sd) {
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = round_bf16(d(g));
    return v;
}

}  // namespace

double SparseDecodeCheck::error() const {
    if (nan_mismatch > 0) return std::numeric_limits<double>::infinity();
    return std::max(rel_l2 / kRelL2Bound, max_abs / kMaxAbsBound);
}

Result<SparseDecodeCheck> check_sparse_decode(KvFormat format, int n_heads, int batch, int rows, int variant,
                                              int target_ctas, uint32_t seed, int checked) {
    if (batch < 1 || rows < 0 || n_heads < 1 || checked < 1)
        return invalid_argument("sparse_decode check: batch {} rows {} heads {} checked {}", batch, rows, n_heads,
                                checked);
    if (variant >= 0 && !sparse_decode_variant_legal(variant, format, n_heads))
        return invalid_argument("sparse_decode check: variant {} is illegal for {} heads", variant, n_heads);
    std::mt19937 g(seed);
    // The pool: decoded values (what attention sees) and the device image.
    const size_t row_bytes = format == KvFormat::kBf16 ? kD * 2 : kKvFp8RowBytes;
    std::vector<uint8_t> image(row_bytes * kPoolRows, 0);
    std::vector<std::vector<float>> pool(kPoolRows);
    for (int r = 0; r < kPoolRows; ++r) {
        std::vector<float> v = randn_bf16(g, kD, 1.0f);
        uint8_t* dst = image.data() + row_bytes * size_t(r);
        if (format == KvFormat::kBf16) {
            for (int i = 0; i < kD; ++i) {
                const uint16_t b = f32_to_bf16(v[size_t(i)]);
                std::memcpy(dst + 2 * i, &b, 2);
            }
        } else {
            for (int blk = 0; blk < 7; ++blk) {
                float amax = 0;
                for (int i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(v[size_t(blk * 64 + i)]));
                const uint8_t s = ue8m0_ceil(amax > 0 ? amax / 448.0f : 1.0f);
                dst[576 + blk] = s;
                const float sc = ue8m0_to_f32(s);
                for (int i = 0; i < 64; ++i) {
                    float& x = v[size_t(blk * 64 + i)];
                    const uint8_t c = f32_to_fp8e4m3(x / sc);
                    dst[blk * 64 + i] = c;
                    x = fp8e4m3_to_f32(c) * sc;
                }
            }
            for (int i = 448; i < kD; ++i) {
                const uint16_t b = f32_to_bf16(v[size_t(i)]);
                std::memcpy(dst + 448 + 2 * (i - 448), &b, 2);
            }
        }
        pool[size_t(r)] = std::move(v);
    }
    // Row lists: `rows` scattered (possibly repeated) pool rows per sequence.
    const int64_t elems = format == KvFormat::kBf16 ? kD : kKvFp8RowBytes;
    std::uniform_int_distribution<int> pick(0, kPoolRows - 1);
    std::vector<std::vector<int>> lists(static_cast<size_t>(batch));
    std::vector<int64_t> offs;
    std::vector<int32_t> start{0};
    for (int b = 0; b < batch; ++b) {
        for (int i = 0; i < rows; ++i) {
            const int r = pick(g);
            lists[size_t(b)].push_back(r);
            offs.push_back(int64_t(r) * elems);
        }
        start.push_back(int32_t(offs.size()));
    }
    const std::vector<float> q = randn_bf16(g, size_t(batch) * n_heads * kD, 2.0f);
    const std::vector<float> sink = randn_bf16(g, size_t(n_heads), 1.0f);
    std::vector<uint16_t> q16(q.size());
    for (size_t i = 0; i < q.size(); ++i) q16[i] = f32_to_bf16(q[i]);

    SparseDecodeArgs a;
    a.format = format;
    a.batch = batch;
    a.n_heads = n_heads;
    a.max_rows = rows;
    a.scale = 1.0f / std::sqrt(float(kD));
    a.target_ctas = target_ctas;
    a.variant = variant;
    SparseDecodeCheck out;
    out.splits = sparse_decode_splits_for(a);
    const size_t out_elems = size_t(batch) * n_heads * kD;
    Dev d_pool, d_q, d_offs, d_start, d_sink, d_out, d_ws;
    DSV4_RETURN_IF_ERROR(d_pool.alloc_copy(image.data(), image.size()));
    DSV4_RETURN_IF_ERROR(d_q.alloc_copy(q16.data(), q16.size() * 2));
    DSV4_RETURN_IF_ERROR(d_offs.alloc_copy(offs.data(), offs.size() * sizeof(int64_t)));
    DSV4_RETURN_IF_ERROR(d_start.alloc_copy(start.data(), start.size() * sizeof(int32_t)));
    DSV4_RETURN_IF_ERROR(d_sink.alloc_copy(sink.data(), sink.size() * sizeof(float)));
    DSV4_RETURN_IF_ERROR(d_out.alloc_copy(nullptr, out_elems * 2));
    DSV4_RETURN_IF_ERROR(
        d_ws.alloc_copy(nullptr, sparse_decode_workspace_floats(batch, n_heads, out.splits) * sizeof(float)));
    // Poisoned (NaN bf16 / f32): every output element must be written by the kernel.
    if (cudaMemset(d_out.p, 0xff, out_elems * 2) != cudaSuccess ||
        cudaMemset(d_ws.p, 0xff, sparse_decode_workspace_floats(batch, n_heads, out.splits) * sizeof(float)) !=
            cudaSuccess)
        return error(StatusCode::kInternal, "sparse_decode check: memset: {}", cudaGetErrorString(cudaGetLastError()));
    a.q = d_q.p;
    a.kv_pool = d_pool.p;
    a.row_offsets = static_cast<const int64_t*>(d_offs.p);
    a.row_start = static_cast<const int32_t*>(d_start.p);
    a.sink = static_cast<const float*>(d_sink.p);
    a.out = d_out.p;
    a.workspace = static_cast<float*>(d_ws.p);
    DSV4_RETURN_IF_ERROR(sparse_decode_launch(a, nullptr));
    std::vector<uint16_t> got(out_elems);
    if (cudaError_t e = cudaMemcpy(got.data(), d_out.p, out_elems * 2, cudaMemcpyDeviceToHost); e != cudaSuccess)
        return error(StatusCode::kInternal, "sparse_decode check: {}", cudaGetErrorString(e));

    // fp64 reference for the checked sequences (ref::sink_attention_f64).
    std::vector<int> seqs;
    const int n_check = std::min(checked, batch);
    for (int i = 0; i < n_check; ++i) seqs.push_back(n_check == 1 ? 0 : int(int64_t(i) * (batch - 1) / (n_check - 1)));
    seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
    double num = 0, den = 0;
    std::vector<double> o(kD);
    for (int b : seqs) {
        std::vector<const float*> rows_b;
        for (int r : lists[size_t(b)]) rows_b.push_back(pool[size_t(r)].data());
        for (int h = 0; h < n_heads; ++h) {
            const float* qh = q.data() + (size_t(b) * n_heads + size_t(h)) * kD;
            ref::sink_attention_f64(qh, kD, rows_b.data(), int64_t(rows_b.size()), sink[size_t(h)], a.scale, o.data());
            const uint16_t* gh = got.data() + (size_t(b) * n_heads + size_t(h)) * kD;
            for (int i = 0; i < kD; ++i) {
                const double ref = o[size_t(i)];
                const double x = bf16_to_f32(gh[i]);
                if (std::isnan(x) != std::isnan(ref)) {
                    ++out.nan_mismatch;
                    continue;
                }
                const double e = x - ref;
                num += e * e;
                den += ref * ref;
                out.max_abs = std::max(out.max_abs, std::fabs(e));
            }
        }
    }
    out.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    return out;
}

}  // namespace dsv4::cuda
