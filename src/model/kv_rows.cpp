#include "model/kv_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace dsv4 {

Result<KvRowFormat> parse_kv_row_format(const std::string& s) {
    if (s == "f32") return KvRowFormat::kF32;
    if (s == "bf16") return KvRowFormat::kBf16;
    if (s == "fp8") return KvRowFormat::kFp8;
    return invalid_argument("KV row format '{}' (expected f32, bf16 or fp8)", s);
}

const char* kv_row_format_name(KvRowFormat f) {
    switch (f) {
        case KvRowFormat::kF32:
            return "f32";
        case KvRowFormat::kBf16:
            return "bf16";
        case KvRowFormat::kFp8:
            return "fp8";
    }
    return "?";
}

KvRowSpec kv_main_row_spec(KvRowFormat f, int head_dim, int rope_dim) { return {f, head_dim, rope_dim}; }

KvRowSpec kv_index_row_spec(KvRowFormat f, int index_head_dim) {
    return {f == KvRowFormat::kFp8 ? KvRowFormat::kBf16 : f, index_head_dim, 0};
}

void encode_kv_row(const float* x, const KvRowSpec& s, uint8_t* out) {
    std::memset(out, 0, size_t(s.bytes()));
    if (s.fmt == KvRowFormat::kF32) {
        std::memcpy(out, x, sizeof(float) * size_t(s.dim));
        return;
    }
    auto put_bf16 = [&](int64_t byte, float v) {
        const uint16_t b = f32_to_bf16(v);
        std::memcpy(out + byte, &b, 2);
    };
    if (s.fmt == KvRowFormat::kBf16) {
        for (int i = 0; i < s.dim; ++i) put_bf16(2 * int64_t(i), x[i]);
        return;
    }
    const int n = s.nope();
    for (int b = 0; b < s.n_scales(); ++b) {
        const int i0 = 64 * b, i1 = std::min(n, i0 + 64);
        float amax = 1e-4f;
        for (int i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(x[i]));
        const uint8_t e = ue8m0_ceil(amax / 448.0f);
        out[s.scale_offset() + b] = e;
        const float scale = ue8m0_to_f32(e);
        for (int i = i0; i < i1; ++i) out[i] = f32_to_fp8e4m3(x[i] / scale);
    }
    for (int i = 0; i < s.rope_dim; ++i) put_bf16(n + 2 * int64_t(i), x[n + i]);
}

void decode_kv_row(const uint8_t* row, const KvRowSpec& s, float* x) {
    auto get_bf16 = [&](int64_t byte) {
        uint16_t b;
        std::memcpy(&b, row + byte, 2);
        return bf16_to_f32(b);
    };
    switch (s.fmt) {
        case KvRowFormat::kF32:
            std::memcpy(x, row, sizeof(float) * size_t(s.dim));
            return;
        case KvRowFormat::kBf16:
            for (int i = 0; i < s.dim; ++i) x[i] = get_bf16(2 * int64_t(i));
            return;
        case KvRowFormat::kFp8: {
            const int n = s.nope();
            for (int i = 0; i < n; ++i) x[i] = fp8e4m3_to_f32(row[i]) * ue8m0_to_f32(row[s.scale_offset() + i / 64]);
            for (int i = 0; i < s.rope_dim; ++i) x[n + i] = get_bf16(n + 2 * int64_t(i));
            return;
        }
    }
}

}  // namespace dsv4
