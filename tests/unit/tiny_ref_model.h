// Shared by the CPU-reference unit tests: the built-in tiny model with random weights (one instance
// per test binary: building it draws ~33 M normals), its token ids, and a logits comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/philox.h"
#include "model/ref_model.h"

namespace dsv4::testing_tiny {

// tiny_model_config() (one MTP block) with weights of seed 7.
inline const RefModel& tiny_ref_model() {
    static const RefModel m(tiny_model_config(), ModelWeights::random(tiny_model_config(), 7));
    return m;
}

// The tiny model cut to one sliding-window layer, without an MTP block.
inline ModelConfig tiny_config_without_mtp() {
    ModelConfig c = tiny_model_config();
    c.num_nextn_predict_layers = 0;
    c.n_layers = 1;
    c.compress_ratios.resize(1);
    c.layer_types.resize(1);
    c.mlp_types.resize(1);
    return c;
}

// n token ids in [0, vocab - 1), Philox stream `seed`.
inline std::vector<int32_t> random_token_ids(int n, uint64_t seed) {
    const int64_t vocab = tiny_model_config().vocab_size;
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[size_t(i)] = int32_t(philox_uniform(seed, 0, uint64_t(i)) * float(vocab - 1));
    return ids;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
    return m;
}

}  // namespace dsv4::testing_tiny
