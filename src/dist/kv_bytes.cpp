#include "dist/kv_bytes.h"

namespace dsv4::dist {

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

Result<KvRowFormat> parse_kv_row_format(const std::string& s) {
    if (s == "f32") return KvRowFormat::kF32;
    if (s == "bf16") return KvRowFormat::kBf16;
    if (s == "fp8") return KvRowFormat::kFp8;
    return invalid_argument("unknown KV row format '{}' (use f32, bf16 or fp8)", s);
}

namespace {
int64_t row_bytes(KvRowFormat f, int64_t dim, int64_t rope_dim, bool indexer) {
    switch (f) {
        case KvRowFormat::kF32:
            return 4 * dim;
        case KvRowFormat::kBf16:
            return 2 * dim;
        case KvRowFormat::kFp8:
            if (indexer) return dim + 4;
            // e4m3 nope dims + bf16 rope dims + one UE8M0 scale per 64 nope dims, padded to even.
            {
                const int64_t nope = dim - rope_dim;
                const int64_t b = nope + 2 * rope_dim + (nope + 63) / 64;
                return (b + 1) / 2 * 2;
            }
    }
    return 0;
}
}  // namespace

KvBytes kv_bytes(const ModelConfig& c, KvRowFormat f) {
    KvBytes k;
    k.main_row = row_bytes(f, c.head_dim, c.rope_dim, false);
    k.index_row = row_bytes(f, c.index_head_dim, c.rope_dim, true);
    k.window = int64_t(c.n_layers) * c.sliding_window * k.main_row;
    for (int l = 0; l < c.n_layers; ++l) {
        const int r = c.compress_ratios[l];
        if (r == 0) continue;
        const bool csa = c.layer_types[l] == AttnType::kCSA;
        const int64_t kappa = csa ? 2 : 1;
        // kv + gate, kappa*c wide, kappa*r slots, f32 (spec §3.1).
        k.compressor_state += 2 * (kappa * c.head_dim) * (kappa * r) * 4;
        k.per_token += double(k.main_row) / r;
        if (csa) {
            k.compressor_state += 2 * (kappa * c.index_head_dim) * (kappa * r) * 4;
            k.per_token += double(k.index_row) / r;
        }
    }
    return k;
}

int64_t KvBytes::for_tokens(const ModelConfig& c, int64_t tokens) const {
    int64_t b = fixed();
    for (int l = 0; l < c.n_layers; ++l) {
        const int r = c.compress_ratios[l];
        if (r == 0) continue;
        const int64_t rows = tokens / r;
        b += rows * main_row;
        if (c.layer_types[l] == AttnType::kCSA) b += rows * index_row;
    }
    return b;
}

}  // namespace dsv4::dist
