// Registry of decode-attention variants (see attn_variants.h).
#include "kernels/cuda/attention/attn_variants.h"

#include <cstdio>
#include <sstream>

namespace dsv4::cuda {

const std::vector<AttnVariant>& attn_variants() {
    static const std::vector<AttnVariant> v = {
        {"t32h8", 32, 8, 1, 2, 1024, 32},
        {"t64h4", 64, 4, 1, 2, 1024, 32},
        {"t16h8", 16, 8, 1, 4, 2048, 64},
        {"t32h8_nosplit", 32, 8, 1, 0, 1024, 1},
    };
    return v;
}

const AttnVariant* attn_variant_by_name(const std::string& name) {
    const auto& all = attn_variants();
    if (name.empty()) return &all[0];
    for (const auto& v : all)
        if (name == v.name) return &v;
    return nullptr;
}

std::string attn_variant_table(const AttnVariant& chosen) {
    std::ostringstream os;
    os << "decode attention variants (option attn_variant):\n"
       << "    name            block_t heads/cta stages target_mult cap_ctas max_splits\n";
    for (const auto& v : attn_variants()) {
        char line[160];
        std::snprintf(line, sizeof line, "  %c %-15s %7d %9d %6d %11d %8d %10d\n", &v == &chosen ? '*' : ' ', v.name,
                      v.block_t, v.heads_per_cta, v.stages, v.target_mult, v.cap_ctas, v.max_splits);
        os << line;
    }
    return os.str();
}

int attn_heads_per_cta(const AttnVariant& v, int H) {
    int h = v.heads_per_cta < H ? v.heads_per_cta : H;
    if (h < 1) h = 1;
    while (H % h != 0) --h;
    return h;
}

int attn_splits(const AttnVariant& v, int batch, int H, int n_sms) {
    if (batch <= 0) return 1;
    int64_t want = int64_t(v.target_mult) * n_sms;
    if (want > v.cap_ctas) want = v.cap_ctas;
    int64_t target = 1;
    while (target * 2 <= want) target *= 2;  // round down to a power of two
    const int64_t per_split = int64_t(batch) * (H / attn_heads_per_cta(v, H));
    int64_t s = target / per_split;
    if (s < 1) s = 1;
    if (s > v.max_splits) s = v.max_splits;
    return int(s);
}

}  // namespace dsv4::cuda
