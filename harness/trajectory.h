// The comparison harness: runs recorded as trajectories (every loss, every parameter after every
// step) and a bit-for-bit comparison of two of them, control against experiment.
#pragma once

#include "core/train/trainer.h"

#include <array>
#include <functional>
#include <string>
#include <vector>

namespace mfsdp {

// What one rank saw over a run: its local loss per step and the full parameters after each step.
struct Trajectory {
  std::vector<double> local_losses;
  std::vector<double> grad_norms;  // clipping: each step's total norm before clipping; else empty
  // QK-clip: each step's largest attention logit and the query heads it rescaled; else empty.
  std::vector<double> qk_max_logits;
  std::vector<int64_t> qk_clipped_heads;
  std::vector<ParamMap> params;
  ParamMap initial_params;  // before the first recorded step (empty if not recorded)
  std::array<PhaseCounters, kNumPhases> last_step_bytes{};  // this rank, the last step
};

// A run cut in two, end to end: `tail`'s steps appended to `to` (every per-step record).
void append(Trajectory& to, const Trajectory& tail);
// The steps after the first `n` (every per-step record; the last step's bytes stay).
Trajectory drop_steps(Trajectory t, size_t n);

// The losses and recorded parameters of a run made with config.record_params.
Trajectory to_trajectory(TrainResult result);

// config.placement run for config.steps steps with its parameters recorded after every step.
Trajectory run_recorded(RankContext& ctx, const TrainConfig& config);
// The same run of the DDP oracle (placement ddp): the control of every comparison.
Trajectory run_oracle(RankContext& ctx, const TrainConfig& config);

struct Comparison;

// `config` under the oracle and under config.placement on `world_size` thread ranks, each rank running
// both with its parameters recorded: each rank's first difference ("rank R: step S, WHAT (DETAIL)"),
// none when every rank's two runs are bitwise equal. `also`, when given, sees each rank's two results
// and adds what it returns (non-empty) to the list.
std::vector<std::string> oracle_differences(
    const TrainConfig& config, int world_size,
    const std::function<std::string(int rank, const TrainResult& oracle, const TrainResult& mine)>& also = {});

struct Comparison {
  bool bitwise_equal = true;
  double max_abs_diff = 0;
  uint64_t max_ulp = 0;
  int first_bad_step = -1;  // 1-based
  std::string first_bad;    // "loss", "grad norm" or a parameter name
  std::string detail;
  // Every parameter that differs at the first step where any does: "name: N of M differ, max
  // |a-b| X, update ratio [lo, hi]", the ratio being the experiment's update over the control's
  // (p_after - p_before, elementwise where the control's update is non-zero) when both runs start
  // that step from equal parameters. A ratio of 1 +- 3e-4 across every element says the step's
  // size differed, not its gradient (docs/testing.md, "The stop-44 red light").
  std::string step_report;
};

// Compares every loss, every clipping norm, every QK-clip statistic and clipped-head count, and every
// parameter after every step, bit for bit.
Comparison compare(const Trajectory& control, const Trajectory& experiment);

// Fast mode (native reduce, any summation order) is not bitwise; it is held to a tolerance model
// per matrix optimizer (the reasons are in trajectory.cpp): the largest |weight difference| after
// any step and the largest relative difference of any step's local loss, over runs of up to
// kFastToleranceSteps steps of the tiny model at the training defaults.
constexpr int kFastToleranceSteps = 10;
struct FastTolerance {
  double max_param_abs;
  double max_loss_rel;
};
// `reduce_dtype` bf16: the native sum runs in bf16 on the wire (bf16 compute), measured at W = 3
// and 5 up to 1.4e-2 in parameters (AdamW's and Muon's normalised updates flip near-zero
// gradients) and 5.5e-4 relative in the loss (SOAP 1.7e-2); the bounds leave ~3x.
FastTolerance fast_tolerance(OptimizerKind matrix_optimizer, c10::ScalarType reduce_dtype = c10::kFloat);

struct FastDeviation {
  double max_param_abs = 0;
  double max_loss_rel = 0;
  bool within(const FastTolerance& t) const { return max_param_abs <= t.max_param_abs && max_loss_rel <= t.max_loss_rel; }
};
// Over the first `max_steps` steps (all when fewer).
FastDeviation fast_deviation(const Trajectory& control, const Trajectory& experiment, int max_steps = kFastToleranceSteps);

}  // namespace mfsdp
