// Expert parallelism for the CPU reference model (issue 8): a RoutedMoeFn (ref_model.h) that
// runs the routed experts of every MoE layer through ep_routed_moe, this rank computing only the
// experts it owns (RefModel::routed_expert). With N ranks as threads and an in-process
// communicator this simulates an N-GPU expert-parallel group, each rank running its own
// sequences (data-parallel attention).
#pragma once

#include "dist/communicator.h"
#include "dist/ep_moe.h"
#include "dist/expert_partition.h"
#include "model/ref_model.h"

namespace dsv4::dist {

// The returned function refers to model, comm and stats (optional), which must outlive it.
RoutedMoeFn make_ep_routed_moe(const RefModel& model, Communicator& comm, const ExpertPartition& ep,
                               EpMoeStats* stats = nullptr);

}  // namespace dsv4::dist
