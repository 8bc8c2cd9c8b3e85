// How the hidden matrices that a plan keeps in even row shards are stepped under Muon: the part of
// the step that makes the baselines baselines (reference/reconstruct.h: FSDP2 + Muon;
// reference/alltoall.h: DistMuon). An owner plan has no such matrices, and the owner runtime never
// needs one of these. Implementations communicate (phase optimizer_step); every rank calls step()
// with the same shards in the same order.
#pragma once

#include "core/dist/communicator.h"
#include "core/plan/optimizer_config.h"
#include "core/plan/ownership_plan.h"
#include "core/runtime/unit.h"

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace mfsdp {

// What an even-matrix step sees of the runtime: the plan, the shard group it communicates over,
// the optimizer options, and this rank's rows of each plan shard. Nothing else of the runtime.
class EvenMatrixView {
 public:
  EvenMatrixView(const OwnershipPlan& plan, Communicator& comm, const OptimizerOptions& options,
                 const std::vector<std::unique_ptr<Unit>>& units)
      : plan_(plan), comm_(comm), options_(options), units_(units) {}
  const OwnershipPlan& plan() const { return plan_; }
  Communicator& comm() const { return comm_; }
  const OptimizerOptions& options() const { return options_; }
  // This rank's rows of plan shard `shard` and their gradient (undefined where it stores none).
  at::Tensor local_param(int shard) const { return unit_of(shard).local_param(shard); }
  at::Tensor local_grad(int shard) const { return unit_of(shard).local_grad(shard); }
  // The options (dtype, device) of the segment holding plan shard `shard` on this rank.
  at::TensorOptions segment_options(int shard) const { return unit_of(shard).segment().options(); }

 private:
  Unit& unit_of(int shard) const { return *units_.at(plan_.shards().at(shard).unit); }
  const OwnershipPlan& plan_;
  Communicator& comm_;
  const OptimizerOptions& options_;
  const std::vector<std::unique_ptr<Unit>>& units_;
};

class EvenMatrixStep {
 public:
  virtual ~EvenMatrixStep() = default;
  virtual const char* name() const = 0;
  // Steps plan shards `shards` (ascending plan indices, the same on every rank).
  virtual void step(const EvenMatrixView& rt, const std::vector<int>& shards) = 0;

  // This rank's rows of shard `shard`'s Muon momentum (undefined before its first step), for
  // checkpoints; and the bytes of all of it.
  at::Tensor& momentum(int shard) { return momentum_[shard]; }
  int64_t state_bytes() const;
  // The learning-rate schedule's factor λ(t) for the steps from here (TensorOptimizer::set_lr_factor).
  void set_lr_factor(double factor) { lr_factor_ = factor; }

 protected:
  // Muon's momentum update on this rank's rows of `shard` (momentum and Nesterov from the
  // runtime's Muon options); returns this rank's rows of the Newton–Schulz input, undefined where
  // this rank stores none.
  at::Tensor update_input(const EvenMatrixView& rt, int shard);
  // The Muon options of `shard` with its parameter group applied (lr, weight decay), cached.
  const MuonOptions& muon_for(const EvenMatrixView& rt, int shard);

 private:
  std::map<int, at::Tensor> momentum_;
  std::map<int, std::pair<MuonOptions, MuonOptions>> muon_;  // the group's, and with the schedule's lr
  double lr_factor_ = 1;
};

using EvenMatrixStepFactory = std::function<std::unique_ptr<EvenMatrixStep>()>;

}  // namespace mfsdp
