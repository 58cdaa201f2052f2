#include "kernels/ref/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dsv4::ref {

void sink_attention(const float* q, const float* const* rows, int64_t n_rows, const float* sink, int H, int D,
                    float scale, float* out) {
    std::vector<float> z(static_cast<size_t>(n_rows));
    for (int h = 0; h < H; ++h) {
        const float* qh = q + int64_t(h) * D;
        float mx = sink[h];  // including the sink in the max is mathematically identical
        for (int64_t s = 0; s < n_rows; ++s) {
            double dot = 0.0;
            for (int i = 0; i < D; ++i) dot += double(qh[i]) * rows[s][i];
            z[s] = float(dot) * scale;
            mx = std::max(mx, z[s]);
        }
        float* oh = out + int64_t(h) * D;
        if (mx == -INFINITY) {  // no rows and a -inf sink: define the output as zeros
            std::fill(oh, oh + D, 0.0f);
            continue;
        }
        double den = std::exp(double(sink[h]) - mx);
        std::vector<double> acc(size_t(D), 0.0);
        for (int64_t s = 0; s < n_rows; ++s) {
            const double p = std::exp(double(z[s]) - mx);
            den += p;
            for (int i = 0; i < D; ++i) acc[i] += p * rows[s][i];
        }
        for (int i = 0; i < D; ++i) oh[i] = float(acc[i] / den);
    }
}

}  // namespace dsv4::ref
