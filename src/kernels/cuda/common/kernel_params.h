// Printable kernel variant parameters shared by the decode ops (attention, MoE, GEMV), and the
// variant selection rule of design.md: forced by name (RuntimeOptions), else the op's heuristic, else the
// first legal variant. Host-only; no CUDA types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::cuda {

struct KernelParams {
    int block_t = 0;  // rows (attention KV rows / GEMV tokens) per tile
    int block_h = 0;  // attention heads per CTA; GEMV weight rows per warp
    int warps = 0;    // warps per CTA
    int stages = 0;   // pipeline depth (cp.async stages / register prefetch chunks)
    int split = 0;    // 0 = chosen at launch (split-KV); >0 = fixed

    std::string to_string() const {
        return "{block_t=" + std::to_string(block_t) + ", block_h=" + std::to_string(block_h) +
               ", warps=" + std::to_string(warps) + ", stages=" + std::to_string(stages) +
               ", split=" + std::to_string(split) + "}";
    }
};

// Canonical variant name: "<op>.bt<T>_bh<H>_w<W>_s<S>.sm90".
inline std::string variant_name(std::string_view op, const KernelParams& p) {
    return std::string(op) + ".bt" + std::to_string(p.block_t) + "_bh" + std::to_string(p.block_h) + "_w" +
           std::to_string(p.warps) + "_s" + std::to_string(p.stages) + ".sm90";
}

// Index of the variant whose canonical name is `name` among `count` (name_at(i)), -1 when "" or unknown.
template <typename NameAt>
int variant_by_name(std::string_view name, int count, NameAt name_at) {
    if (name.empty()) return -1;
    for (int i = 0; i < count; ++i)
        if (name_at(i) == name) return i;
    return -1;
}

// A tuning file's per-shape choice for one op (runtime/tuning_file.h), resolved by the runner to a
// registry index: calls of `tokens` tokens in [tokens_lo, tokens_hi] and, for the routed experts,
// ceil(tokens x top-k / experts) mean rows per expert in [rows_lo, rows_hi] take `variant`.
struct ShapeVariant {
    int64_t tokens_lo = 0, tokens_hi = INT64_MAX;
    int64_t rows_lo = 0, rows_hi = INT64_MAX;
    int variant = -1;
};

// The variant of the first entry holding the call, -1 when none (or `rules` is null): the op's
// forced variant or heuristic then applies.
inline int shape_variant(const std::vector<ShapeVariant>* rules, int64_t tokens, int64_t rows = 0) {
    if (!rules) return -1;
    for (const ShapeVariant& r : *rules)
        if (tokens >= r.tokens_lo && tokens <= r.tokens_hi && rows >= r.rows_lo && rows <= r.rows_hi) return r.variant;
    return -1;
}

}  // namespace dsv4::cuda
