// One training run on one rank: the configuration, the per-step metrics, and the loop every
// placement runs behind (train_loop).
#pragma once

#include "core/train/data.h"
#include "core/train/placement.h"
#include "core/train/model.h"
#include "core/plan/planner.h"
#include "core/dist/ranks.h"
#include "core/optim/lr_schedule.h"
#include "core/runtime/owner_runtime.h"

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

struct StepMetrics;

// The most micro-batches a step may have (--grad-accum).
constexpr int kMaxGradAccum = 4096;

struct TrainConfig {
  TransformerConfig model = preset_config("tiny");
  Placement placement = Placement::owner;  // set with apply_placement (harness/placements.h)
  PlannerOptions planner;
  RuntimeOptions runtime{training_defaults()};
  int steps = 20;
  int64_t batch = 4;  // per rank and micro-batch
  int64_t seq = 32;
  // Gradient accumulation: K micro-batches per step (docs/accumulation.md). Micro-batch m of step
  // t on rank r is rows m*batch .. (m+1)*batch of the sampler's batch(seed, t, r, K*batch), so K
  // micro-batches of b rows see the tokens of one batch of K*b. The order their gradients are
  // added in is runtime.grad_reduce.
  int grad_accum = 1;
  // The learning-rate schedule (docs/schedules.md): every optimizer's lr is its base times
  // λ(t), t the optimizer steps taken. An unset decay length is resolved once, from the steps of
  // the run that starts the schedule, and then kept in its checkpoints.
  LrSchedule lr_schedule;
  // QK-clip (core/train/qk_clip.h): after every update, the q and k rows of each head whose largest
  // attention logit went above tau are scaled down to it. 0: off, and no logit recorded.
  double qk_clip_tau = 0;
  uint64_t seed = 0;
  std::string data;  // corpus path; empty = the default corpus
  // Gather the full parameters before the first step and after every step into
  // TrainResult::initial_params and params_per_step (collectives in phase `other`, after the step's
  // counters were read): for differential tests and verify.
  bool record_params = false;
  // The full state, for trajectory dumps (mfsdp train --dump-trajectory): called on every rank with
  // every parameter in full before the first step (`metrics` null: the initial or resumed state)
  // and after every step; with full_grads, also with that step's gradients as its update used them
  // (gathered after the reduction and clipping, before the update: phase `other` traffic counted
  // in the step's counters). With full_state, also with the optimizer state after the step, in
  // full (PlacementRunner::full_state: `name.entry` tensors, counters as 0-d float32 tensors; empty
  // before the first step of a fresh run). Gathers are collectives: every rank gets the call.
  std::function<void(int64_t step, const StepMetrics* metrics, const ParamMap& params, const ParamMap* grads,
                     const ParamMap* state)>
      on_full_state;
  bool full_grads = false;
  bool full_state = false;
  // Fault injection for tests: this rank SIGKILLs itself in the backward pass of this step, or
  // in the checkpoint of this step after writing its rank file (before the commit).
  std::optional<std::pair<int, int>> kill_rank_at_step;
  std::optional<std::pair<int, int>> kill_rank_in_checkpoint;

  // Checkpoints (docs/checkpoints.md): every `checkpoint_every` steps and after the last step,
  // into checkpoint_dir/step_N (latest names the newest). Owner-runtime placements write them.
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  // Start from this checkpoint (a step directory, or a checkpoint directory's latest) instead of
  // step 0, on any world size, planner or tail policy; `steps` stays the total step count.
  std::string resume_from;
  std::function<void(const ResumeInfo&)> on_resume;  // told what was loaded, before the first step
  // checkpoint_dir holds checkpoints this run does not continue from (another run's): refused
  // unless this is set, and then they are removed before the first step (said via on_notice).
  bool overwrite_checkpoints = false;
  // Set by train_loop, not by callers: resuming from an earlier step of checkpoint_dir than its
  // `latest` (a rollback), so the checkpoints written from there may move `latest` backwards.
  bool checkpoint_rollback = false;
  // Set by train_loop on rank 0, not by callers: throws when checkpoint_dir is no longer the
  // directory this run locked (checked before every commit).
  std::function<void()> check_checkpoint_lock;
  std::function<void(const std::string&)> on_notice;  // rank 0: what the loop did to checkpoint_dir
};


struct StepMetrics {
  int step = 0;
  double loss = 0;        // mean over ranks of each rank's loss (in double, rank order)
  double local_loss = 0;  // this rank's: the mean of its micro-batches' losses (in double, in order)
  double forward_s = 0, backward_s = 0, optimizer_s = 0;  // summed over micro-batches
  // The same of the slowest rank (each the largest over ranks): what the step waits for.
  double max_forward_s = 0, max_backward_s = 0, max_optimizer_s = 0;
  std::array<PhaseCounters, kNumPhases> bytes{};  // this rank, this step, as the Communicator counted them
  // The same step as the backend recorded it (every collective, also any that bypassed the
  // Communicator): per phase, calls must equal bytes[p].calls.
  std::array<BackendCounters, kNumPhases> backend{};
  int64_t resident_bytes = 0;
  int64_t peak_gathered_bytes = 0;
  int64_t peak_accumulation_bytes = 0;  // gradient accumulation's sums (PlacementRunner::peak_accumulation_bytes)
  bool skipped = false;
  std::string non_finite_parameter;
  // Clipping (TrainConfig::runtime.max_norm): the step's total gradient norm before clipping, the
  // same on every rank; non_finite_norm: it was not finite though every gradient was.
  std::optional<double> grad_norm;
  bool non_finite_norm = false;
  // QK-clip (TrainConfig::qk_clip_tau > 0): the largest attention logit of the step over every
  // head, block and rank (+inf when one was not finite), and the query heads it rescaled (0 when
  // the step was skipped, or its clip left out under the skip policy).
  std::optional<double> qk_max_logit;
  int64_t qk_clipped_heads = 0;
  bool lr_scheduled = false;  // the run has a schedule (scheduled(TrainConfig::lr_schedule))
  double lr_factor = 1;  // the schedule's λ(t) this step's update used
  int64_t optimizer_steps = 0;  // t after this step: the optimizer steps taken so far (skipped steps take none)
  std::string checkpoint;  // committed after this step, if any
  double checkpoint_s = 0;
};

struct TrainResult {
  ResumeInfo resumed;
  std::vector<std::string> checkpoints;  // committed by this run, in order
  std::vector<StepMetrics> steps;
  ParamMap final_params;  // full, gathered at the end (every rank)
  std::vector<ParamMap> params_per_step;  // with TrainConfig::record_params
  ParamMap initial_params;  // with TrainConfig::record_params: before the first step (or as resumed)
  uint64_t plan_hash = 0;
};


// The model's configuration as JSON (checkpoints record it).
nlohmann::json model_config_json(const TransformerConfig& model);

// Throws naming the first parameter group of config.runtime that matches no parameter of
// config.model (a usage error, found before any collective).
void check_groups(const TrainConfig& config);

// The run's optimizer kind: the one the runtime steps with and the one the plan is balanced for
// are one fact, stated here (train_loop refuses a configuration where they differ).
void set_optimizer(TrainConfig& config, OptimizerKind kind);

// The common loop: config.steps steps of the placement runner `make` builds, each on this rank's batch of
// the corpus (on config.runtime.device), with per-step metrics (bytes per phase from the
// communicator, mean loss over ranks) passed to `on_step` as soon as they exist.
TrainResult train_loop(RankContext& ctx, const TrainConfig& config, const PlacementRunnerFactory& make,
                       const std::function<void(const StepMetrics&)>& on_step = {});

}  // namespace mfsdp
