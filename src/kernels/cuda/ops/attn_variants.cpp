// Registry of decode-attention variants (see attn_variants.h).
#include "kernels/cuda/ops/attn_variants.h"

#include "kernels/cuda/attention/sparse_decode.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
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

const AttnVariant& attn_variant_from_env() {
    const char* e = std::getenv("DSV4_ATTN_VARIANT");
    const auto& all = attn_variants();
    if (e && *e) {
        for (const auto& v : all)
            if (std::strcmp(v.name, e) == 0) return v;
        // The same variable picks the sparse_decode (tensor-core) variant: such a name is not an error.
        for (int i = 0; i < sparse_decode_variant_count(); ++i)
            if (sparse_decode_variant_name(i) == e) return all[0];
        std::fprintf(stderr, "dsv4: unknown DSV4_ATTN_VARIANT '%s', using '%s'\n", e, all[0].name);
    }
    return all[0];
}

std::string attn_variant_table(const AttnVariant& chosen) {
    std::ostringstream os;
    os << "decode attention variants (DSV4_ATTN_VARIANT):\n"
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
