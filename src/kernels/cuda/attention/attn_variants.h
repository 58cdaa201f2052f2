// Decode-attention variants: the tunables of the split-KV kernel (attn_decode_simt.cu) as a printable
// struct, registered by name and chosen by RuntimeOptions::attn_variant. Host-only.
//
// TARGET_CTAS heuristic: target = min(cap_ctas, pow2_floor(target_mult * n_sms)); splits =
// clamp(target / (batch * head_blocks), 1, max_splits). Fixed per batch bucket at graph capture.
#pragma once

#include <string>
#include <vector>

namespace dsv4::cuda {

struct AttnVariant {
    const char* name = "t32h8";
    int block_t = 32;       // rows staged in shared memory per tile
    int heads_per_cta = 8;  // one warp per head (clamped to H and to a divisor of H)
    int stages = 1;         // smem pipeline stages (1: load, sync, compute)
    int target_mult = 2;    // target CTAs = target_mult * SMs, rounded down to a power of two
    int cap_ctas = 1024;
    int max_splits = 32;
};

const std::vector<AttnVariant>& attn_variants();
// The CUDA-core variant called `name`; null when no variant has that name ("" gives the default, the first).
const AttnVariant* attn_variant_by_name(const std::string& name);
std::string attn_variant_table(const AttnVariant& chosen);
// Heads per CTA actually used for H heads.
int attn_heads_per_cta(const AttnVariant& v, int H);
int attn_splits(const AttnVariant& v, int batch, int H, int n_sms);

}  // namespace dsv4::cuda
