// One owner-shaped training run on one rank: the loop `mfsdp train` and the tests drive.
#pragma once

#include "core/data.h"
#include "core/model.h"
#include "core/planner.h"
#include "core/ranks.h"
#include "core/runtime.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

// Where the parameters live. owner: the owner-shaped plan. reconstruct: the stock FSDP2 + Muon
// baseline (every parameter in even row shards; Muon all-gathers each matrix's update input in
// the step). The ZeRO-1 and all-to-all baselines are not built yet.
enum class Placement { owner, reconstruct };
const char* to_string(Placement placement);
Placement placement_from_string(const std::string& name);  // throws naming the known ones
void apply_placement(Placement placement, PlannerOptions& planner);

struct TrainConfig {
  TransformerConfig model = preset_config("tiny");
  PlannerOptions planner;
  RuntimeOptions runtime;
  int steps = 20;
  int64_t batch = 4;  // per rank
  int64_t seq = 32;
  uint64_t seed = 0;
  std::string data;  // corpus path; empty = the default corpus
  // Gather the full parameters after every step into TrainResult::params_per_step (collectives in
  // phase `other`, after the step's counters were read): for differential tests and verify.
  bool record_params = false;
  // Fault injection for tests: this rank SIGKILLs itself in the backward pass of this step.
  std::optional<std::pair<int, int>> kill_rank_at_step;
};

struct StepMetrics {
  int step = 0;
  double loss = 0;        // mean over ranks of each rank's micro-batch loss
  double local_loss = 0;  // this rank's
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  std::array<PhaseCounters, kNumPhases> bytes{};  // this rank, this step
  int64_t resident_bytes = 0;
  int64_t peak_gathered_bytes = 0;
  bool skipped = false;
  std::string non_finite_parameter;
};

struct TrainResult {
  std::vector<StepMetrics> steps;
  ParamMap final_params;  // full, gathered at the end (every rank)
  std::vector<ParamMap> params_per_step;  // with TrainConfig::record_params
  uint64_t plan_hash = 0;
};

// Runs config.steps owner-shaped steps on this rank. `on_step` (optional) sees every step's
// metrics as soon as they exist.
TrainResult train_owner(RankContext& ctx, const TrainConfig& config,
                        const std::function<void(const StepMetrics&)>& on_step = {});

}  // namespace mfsdp
