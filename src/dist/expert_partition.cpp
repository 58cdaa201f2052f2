#include "dist/expert_partition.h"

namespace dsv4::dist {

Result<ExpertPartition> ExpertPartition::make(int n_experts, int n_ranks) {
    if (n_ranks < 1) return invalid_argument("expert parallel needs at least one rank, got {}", n_ranks);
    if (n_experts < 1)
        return invalid_argument("the model has {} routed experts; expert parallel needs at least one", n_experts);
    if (n_experts % n_ranks != 0)
        return invalid_argument(
            "{} ranks do not divide the model's {} routed experts: every rank must own the same number "
            "of experts (use a divisor of {}, e.g. 1, 2, 4, 8)",
            n_ranks, n_experts, n_experts);
    return ExpertPartition(n_experts, n_ranks);
}

}  // namespace dsv4::dist
