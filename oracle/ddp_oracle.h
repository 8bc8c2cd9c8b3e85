// The DDP full-matrix oracle: the ground truth the owner-shaped runtime must bit-match
// (docs/architecture.md, determinism). Every rank holds the whole model, runs forward and backward on its own
// micro-batch (the same one the runtime's rank gets), averages gradients with the runtime's own
// rank-order routine (core/runtime/reduction.h) after an all-gather, and runs the full-matrix
// optimizer (Muon, Shampoo, SOAP or AdamW on hidden matrices, AdamW elsewhere) on every rank. It
// depends on the model, the optimizers, the reduction and the communicator only; resuming it from
// a checkpoint lives in harness/placements.cpp.
#pragma once

#include "core/dist/communicator.h"
#include "core/optim/optimizer_routing.h"
#include "core/plan/precision.h"
#include "core/train/model.h"
#include "core/train/placement.h"
#include "core/train/replica.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

// How the oracle's step adds and scales gradients, the runtime's settings:
//   precision    float32 masters, computed on the policy's copies, as the runtime does; the
//                reduction is the runtime's (float32 accumulation in rank order)
//   replicas     average in HSDP's mesh order (reduction.h: mean_in_mesh_order) for a runtime run
//                on `replicas` groups of W / replicas ranks; 1 is the rank order
//   grad_reduce  the order micro-batches' gradients are added in when a step has several
//                (core/runtime/reduction.h)
//   max_norm     global gradient-norm clipping of the mean gradients (core/runtime/clipping.h),
//                on the full gradients every rank holds: no collective; 0 is none
struct OracleStep {
  PrecisionPolicy precision;
  int replicas = 1;
  GradReduce grad_reduce = GradReduce::per_microbatch;
  double max_norm = 0;
};

class DdpOracle : public PlacementRunner {
 public:
  DdpOracle(const TransformerModel& model, Communicator& comm, const OptimizerOptions& options, const ParamMap& init,
            OracleStep step = {});

  // Forward and backward of this rank's micro-batch; the gradients averaged over ranks (phase
  // grad_reduce, timed as backward) after the last micro-batch, added in the mode's order, then
  // clipped (max_norm).
  Gradients forward_backward(const at::Tensor& tokens, const at::Tensor& targets,
                             const std::function<void()>& before_backward, const MicroBatch& micro_batch) override;
  // Every rank updates every parameter; a non-finite clipping norm skips the update (reported).
  Update update() override;
  void set_lr_factor(double factor) override;  // every parameter's optimizer
  void scale_rows(const std::string& name, const at::Tensor& row_scale) override;  // every rank, in full
  ParamMap full_params() override;
  ParamMap full_grads() override;
  ParamMap full_state() override;  // every rank's own optimizers: no collective
  int64_t resident_bytes() const override;  // parameters + gradients + optimizer state, all full

  const ParamMap& params() const { return params_; }
  const std::vector<std::string>& names() const { return order_; }  // model order: the collective order
  TensorOptimizer& optimizer(const std::string& name) { return *optimizers_.at(name); }
  const TensorOptimizer& optimizer(const std::string& name) const { return *optimizers_.at(name); }
  const ParamMap& reduced_grads() const { return grads_; }

 private:
  const TransformerModel& model_;
  Communicator& comm_;
  OracleStep step_;
  ReplicaAccumulation accumulation_;
  std::optional<double> grad_norm_;  // the last step's total norm before clipping (max_norm > 0)
  ParamMap params_, grads_;
  std::vector<std::string> order_;  // parameter names in model order: the collective order
  std::unordered_map<std::string, std::unique_ptr<TensorOptimizer>> optimizers_;
};

}  // namespace mfsdp
