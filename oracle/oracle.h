// The DDP full-matrix oracle: the ground truth the owner-shaped runtime must bit-match
// (DESIGN.md §4). Every rank holds the whole model, runs forward and backward on its own
// micro-batch (the same one the runtime's rank gets), averages gradients with the runtime's own
// rank-order routine (core/reduction.h) after an all-gather, and runs the full-matrix optimizer
// (Muon or AdamW on hidden matrices, AdamW elsewhere) on every rank.
#pragma once

#include "core/communicator.h"
#include "core/trainer.h"

#include <memory>
#include <string>
#include <vector>

namespace mfsdp {

// The part DDP and ZeRO-1 share: on a full replica, clear the gradients, run forward (timed into
// r.forward_s, loss into r.loss), `before_backward`, then backward. Returns when backward started.
std::chrono::steady_clock::time_point replica_forward_backward(const TransformerModel& model, ParamMap& params,
                                                               const at::Tensor& tokens, const at::Tensor& targets,
                                                               const std::function<void()>& before_backward,
                                                               Stepper::Result& r);
// CPU copies of every tensor of `params` (detached).
ParamMap cpu_copies(const ParamMap& params);

class DdpOracle : public Stepper {
 public:
  DdpOracle(const TransformerModel& model, Communicator& comm, const RuntimeOptions& options, const ParamMap& init);

  // One step on this rank's batch. Gradients are averaged over ranks (phase grad_reduce, timed
  // as backward), then every rank updates every parameter.
  Result step(const at::Tensor& tokens, const at::Tensor& targets, const std::function<void()>& before_backward) override;
  ParamMap full_params() override;
  int64_t resident_bytes() const override;  // parameters + gradients + optimizer state, all full
  // Every rank reads the whole consolidated state (parameters and optimizer state) of a checkpoint
  // written by any owner-runtime placement at any world size.
  ResumeInfo load_checkpoint(const std::string& checkpoint, const TrainConfig& config) override;

  const ParamMap& params() const { return params_; }
  const TensorOptimizer& optimizer(const std::string& name) const { return *optimizers_.at(name); }
  const ParamMap& reduced_grads() const { return grads_; }

 private:
  const TransformerModel& model_;
  Communicator& comm_;
  ParamMap params_, grads_;
  std::vector<std::string> order_;  // parameter names in model order: the collective order
  std::unordered_map<std::string, std::unique_ptr<TensorOptimizer>> optimizers_;
};

// What one rank saw over a run: its local loss per step and the full parameters after each step.
struct Trajectory {
  std::vector<double> local_losses;
  std::vector<ParamMap> params;
  std::array<PhaseCounters, kNumPhases> last_step_bytes{};  // this rank, the last step
};

// The losses and recorded parameters of a run made with config.record_params.
Trajectory to_trajectory(TrainResult result);

// config.steps oracle steps (placement ddp) as a trajectory; `on_step` as in train_loop.
TrainResult train_ddp(RankContext& ctx, const TrainConfig& config,
                      const std::function<void(const StepMetrics&)>& on_step = {});
Trajectory run_oracle(RankContext& ctx, const TrainConfig& config);
Trajectory run_owner_recorded(RankContext& ctx, const TrainConfig& config);

struct Comparison {
  bool bitwise_equal = true;
  double max_abs_diff = 0;
  uint64_t max_ulp = 0;
  int first_bad_step = -1;  // 1-based
  std::string first_bad;    // "loss" or a parameter name
  std::string detail;
};

// Compares every loss and every parameter after every step, bit for bit.
Comparison compare(const Trajectory& control, const Trajectory& experiment);

}  // namespace mfsdp
