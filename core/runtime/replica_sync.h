// HSDP's replica synchronisation, in one place (docs/hsdp.md). A mesh W = R x S runs owner sharding
// inside each replica group of S ranks (the plan is made for S) and keeps the R replica groups in
// step. After the shard group's reduction every rank holds its segment's partial sum of its own
// replica; this class turns those into the step's mean and keeps the replicas' masters equal:
//   none        one replica: the shard group's reduction already divided by W; nothing to do
//   replicated  every replica steps every shard: the R partial sums of each segment are combined on
//               every replica (an all-gather per unit; fast mode: one all-reduce) into the mean in
//               mesh order (mean_of_partial_sums: the oracle's order)
//   dedup       each shard is stepped by one replica (dedup_step_replicas: the stepping-replica
//               choice, balanced over replicas); its partial sums go to that replica alone (one
//               all-to-all per unit), and after the step its updated master is broadcast from there
//               to the other replicas (phase update_broadcast)
// Every call is collective over the replicate group, in the same order on every rank.
#pragma once

#include "core/dist/communicator.h"
#include "core/plan/ownership_plan.h"
#include "core/plan/planner.h"
#include "core/runtime/unit.h"

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace mfsdp {

enum class ReplicaSyncMode { none, replicated, dedup };

class ReplicaSync {
 public:
  // `replicate`: this rank's replicate group (null for one replica); its rank is this replica.
  ReplicaSync(const OwnershipPlan& plan, Communicator* replicate, StepMode step_mode, OptimizerKind optimizer,
              ReduceMode reduce);

  ReplicaSyncMode mode() const { return mode_; }
  int replicas() const { return replicate_ ? replicate_->world_size() : 1; }
  int replica() const { return replicate_ ? replicate_->rank() : 0; }
  Communicator* replicate() const { return replicate_; }
  // Whether the shard group's reduction divides by the world size itself (one replica only).
  bool shard_group_divides() const { return mode_ == ReplicaSyncMode::none; }
  // Whether this replica steps plan shard `shard` (every shard, but under dedup).
  bool steps(int shard) const { return step_replica_.empty() || step_replica_[shard] == replica(); }
  // Under dedup: per plan shard, the replica that steps it; else empty.
  const std::vector<int>& step_replicas() const { return step_replica_; }

  // After the shard group's reduction (every unit's reduction finished): the stepping replicas'
  // segment gradients hold the sum over the mesh divided once by `divisor` (W for the step's mean;
  // W K under deferred accumulation), or with divisor 0 the sum itself (per-micro-batch
  // accumulation divides after the last micro-batch). `shard_comm`'s phase is set alongside
  // (grad_reduce).
  void combine(std::vector<std::unique_ptr<Unit>>& units, Communicator& shard_comm, int64_t divisor);
  // Sums `flags` (one entry per rank of the whole mesh; or clipping's per-parameter norms) over the
  // replicate group, in place, counted in `phase`.
  void sum_over_replicas(at::Tensor& flags, Phase phase = Phase::grad_reduce);
  // Whether this replica's shard group contributes plan shard `shard` to global sums over the mesh
  // (clipping's norms): the stepping replica under dedup, replica 0 otherwise.
  bool counts(int shard) const { return mode_ == ReplicaSyncMode::dedup ? steps(shard) : replica() == 0; }
  // After the step, under dedup: each stepped master goes from its stepping replica to the others.
  void broadcast_updates(std::vector<std::unique_ptr<Unit>>& units);

 private:
  const OwnershipPlan& plan_;
  Communicator* replicate_;
  ReplicaSyncMode mode_;
  ReduceMode reduce_;
  std::vector<int> step_replica_;
};

}  // namespace mfsdp
