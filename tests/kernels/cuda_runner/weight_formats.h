// A host weight matrix in each of the formats cuda::WeightDesc reads, for op tests that run every
// format against the CPU reference.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/ops/ops.h"
#include "model/quant.h"

namespace dsv4 {

struct EncodedWeight {
    std::vector<uint8_t> data, scale;  // the device layout's bytes; scale empty for f32 / bf16
    std::vector<float> dequant;        // [N, K] the values a kernel must reproduce (rounded as stored)
};

// w [N, K] f32 as fmt: f32 as is, bf16 rounded to nearest even, FP8 e4m3 with UE8M0 block-128 scales
// or MXFP4 (model/quant.h).
inline EncodedWeight encode_weight(cuda::WFmt fmt, const std::vector<float>& w, int64_t N, int64_t K) {
    EncodedWeight e;
    e.dequant.resize(w.size());
    if (fmt == cuda::WFmt::kF32) {
        e.dequant = w;
        e.data.resize(w.size() * 4);
        std::memcpy(e.data.data(), w.data(), e.data.size());
    } else if (fmt == cuda::WFmt::kBF16) {
        std::vector<uint16_t> b(w.size());
        for (size_t i = 0; i < w.size(); ++i) b[i] = f32_to_bf16(w[i]), e.dequant[i] = bf16_to_f32(b[i]);
        e.data.resize(b.size() * 2);
        std::memcpy(e.data.data(), b.data(), e.data.size());
    } else if (fmt == cuda::WFmt::kFp8E8M0) {
        auto q = quantize_fp8_block(w.data(), N, K);
        dequantize_fp8_block(q.q.data(), q.scale_ue8m0.data(), N, K, e.dequant.data());
        e.data = q.q, e.scale = q.scale_ue8m0;
    } else {
        auto q = quantize_mxfp4(w.data(), N, K);
        dequantize_mxfp4(q.packed.data(), q.scales.data(), N, K, e.dequant.data());
        e.data = q.packed, e.scale = q.scales;
    }
    return e;
}

}  // namespace dsv4
