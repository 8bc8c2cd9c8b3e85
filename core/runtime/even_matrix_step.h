// How the hidden matrices that a plan keeps in even row shards are stepped under Muon: the part of
// the step that makes the baselines baselines (reference/reconstruct.h: FSDP2 + Muon;
// reference/alltoall.h: DistMuon). An owner plan has no such matrices, and the owner runtime never
// needs one of these. Implementations communicate (phase optimizer_step); every rank calls step()
// with the same shards in the same order.
#pragma once

#include "core/plan/optimizer_config.h"

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace mfsdp {

class OwnerRuntime;

class EvenMatrixStep {
 public:
  virtual ~EvenMatrixStep() = default;
  virtual const char* name() const = 0;
  // Steps plan shards `shards` (ascending plan indices, the same on every rank) of `rt`.
  virtual void step(OwnerRuntime& rt, const std::vector<int>& shards) = 0;

  // This rank's rows of shard `shard`'s Muon momentum (undefined before its first step), for
  // checkpoints; and the bytes of all of it.
  at::Tensor& momentum(int shard) { return momentum_[shard]; }
  int64_t state_bytes() const;

 protected:
  // Muon's momentum update on this rank's rows of `shard` (momentum and Nesterov from the
  // runtime's Muon options); returns this rank's rows of the Newton–Schulz input, undefined where
  // this rank stores none.
  at::Tensor update_input(OwnerRuntime& rt, int shard);
  // The Muon options of `shard` with its parameter group applied (lr, weight decay), cached.
  const MuonOptions& muon_for(OwnerRuntime& rt, int shard);

 private:
  std::map<int, at::Tensor> momentum_;
  std::map<int, MuonOptions> muon_;
};

using EvenMatrixStepFactory = std::function<std::unique_ptr<EvenMatrixStep>()>;

}  // namespace mfsdp
