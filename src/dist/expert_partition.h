// ExpertPartition: which routed experts each rank owns under expert parallelism (issue 8).
// Experts are split into N contiguous blocks of E/N, rank r owning [r*E/N, (r+1)*E/N): the
// owner of an expert is one division, a rank's experts are one slice of every layer's expert
// list, and a checkpoint shard can be read by a contiguous name range. Every MoE layer uses the
// same partition (the routing tables differ per layer, the ownership does not).
#pragma once

#include <cstdint>

#include "core/status.h"

namespace dsv4::dist {

class ExpertPartition {
public:
    // n_experts: routed experts per layer (E, 256 for Flash); n_ranks: N. Errors: N < 1,
    // E < 1, or E not divisible by N (blocks must be equal so every rank holds the same bytes).
    static Result<ExpertPartition> make(int n_experts, int n_ranks);

    int n_experts() const { return n_experts_; }
    int n_ranks() const { return n_ranks_; }
    int n_local() const { return n_experts_ / n_ranks_; }   // experts per rank
    int first(int rank) const { return rank * n_local(); }  // first global expert id of a rank
    int owner(int expert) const { return expert / n_local(); }
    int local_index(int expert) const { return expert % n_local(); }
    bool owns(int rank, int expert) const { return owner(expert) == rank; }
    // The rank that runs layer `layer`'s shared expert in the expert-parallel CUDA runner: the
    // ranks take turns layer by layer (layer % N), so none carries it in every layer.
    int shared_expert_rank(int layer) const { return layer % n_ranks_; }

private:
    ExpertPartition(int e, int n) : n_experts_(e), n_ranks_(n) {}
    int n_experts_ = 0;
    int n_ranks_ = 1;
};

}  // namespace dsv4::dist
