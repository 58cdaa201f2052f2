#include "dist/ep_ref_moe.h"

namespace dsv4::dist {

RoutedMoeFn make_ep_routed_moe(const RefModel& model, Communicator& comm, const ExpertPartition& ep,
                               EpMoeStats* stats) {
    return [&model, &comm, ep, stats](int layer, const float* x, int64_t T, std::span<const int32_t> ids,
                                      std::span<const float> weights, float* out) -> Status {
        const int d = model.config().hidden_size;
        const int first = ep.first(comm.rank());
        auto run = [&](int local, const float* rows, const float* w, int64_t n, float* y) -> Status {
            // One row at a time: the same arithmetic as the single-rank loop in ref_moe.cpp.
            for (int64_t i = 0; i < n; ++i) model.routed_expert(layer, first + local, rows + i * d, w[i], y + i * d);
            return Status::ok();
        };
        return ep_routed_moe(comm, ep, d, T, model.config().n_experts_per_tok, ids, weights, x, run, out, stats);
    };
}

}  // namespace dsv4::dist
