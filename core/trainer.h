// One owner-shaped training run on one rank: the loop `mfsdp train` and the tests drive.
#pragma once

#include "core/data.h"
#include "core/model.h"
#include "core/planner.h"
#include "core/ranks.h"
#include "core/runtime.h"

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

// Where the parameters live (mfsdp train --placement):
//   owner        the owner-shaped plan (this project)
//   reconstruct  stock FSDP2 + Muon: every parameter in even row shards; Muon all-gathers each
//                matrix's update input in the step and orthogonalises it redundantly everywhere
//   alltoall     DistMuon / Dion: even row shards; the step's all-to-alls hand each rank whole
//                matrices of its assigned set, Newton–Schulz once, and the updates back
//   zero1        ZeRO-1 owner: full parameters everywhere, gradients reduced to owners, owners
//                update and broadcast (reference/zero1.h)
//   ddp          the DDP full-matrix oracle (oracle/oracle.h)
// The first three run on the owner runtime (train_owner); the last two hold full replicas and
// run in oracle/ and reference/ (train_placement in reference/placements.h runs any of them).
enum class Placement { owner, reconstruct, alltoall, zero1, ddp };
const char* to_string(Placement placement);
Placement placement_from_string(const std::string& name);  // throws naming the known ones
bool runs_on_owner_runtime(Placement placement);

// What a run resumed from (TrainResult::resumed).
struct ResumeInfo {
  std::string checkpoint;  // empty: started at step 0
  int64_t step = 0;
  int written_world_size = 0;
  bool same_layout = false;  // the fast path: every rank read only its own file
  int64_t bytes_read = 0, bytes_total = 0;  // by this rank; of every rank file
  std::vector<std::string> warnings;        // sampler settings that differ from the checkpoint's
  std::string sampler;                      // the sampler state the checkpoint recorded (JSON)
};

struct TrainConfig {
  TransformerConfig model = preset_config("tiny");
  Placement placement = Placement::owner;  // set with apply_placement
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
  std::string checkpoint;  // committed after this step, if any
  double checkpoint_s = 0;
};

struct TrainResult {
  ResumeInfo resumed;
  std::vector<std::string> checkpoints;  // committed by this run, in order
  std::vector<StepMetrics> steps;
  ParamMap final_params;  // full, gathered at the end (every rank)
  std::vector<ParamMap> params_per_step;  // with TrainConfig::record_params
  uint64_t plan_hash = 0;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The model's configuration as JSON (checkpoints record it).
nlohmann::json model_config_json(const TransformerConfig& model);

// Sets config.placement and what it implies for the plan and the runtime (reconstruct and
// alltoall: every parameter in even shards, and how Muon steps them).
void apply_placement(Placement placement, TrainConfig& config);

// Throws naming the first parameter group of config.runtime that matches no parameter of
// config.model (a usage error, found before any collective).
void check_groups(const TrainConfig& config);

// One placement's training step on one rank, behind the common loop (train_loop).
class Stepper {
 public:
  struct Result {
    double loss = 0;  // this rank's micro-batch loss
    double forward_s = 0, backward_s = 0, optimizer_s = 0;
    bool skipped = false;
    std::string non_finite_parameter;
  };
  virtual ~Stepper() = default;
  // One step on this rank's batch; `before_backward` runs between forward and backward.
  virtual Result step(const at::Tensor& tokens, const at::Tensor& targets, const std::function<void()>& before_backward) = 0;
  // Every parameter in full, as CPU copies (may communicate, in phase `other`).
  virtual ParamMap full_params() = 0;
  virtual int64_t resident_bytes() const = 0;
  virtual int64_t peak_gathered_bytes() const { return 0; }
  virtual uint64_t plan_hash() const { return 0; }
  // Checkpoints: writes one after `step` steps under `root` (collective; returns its directory),
  // or loads one and returns what it found. `sampler` is this rank's sampler state as JSON text.
  // Placements that cannot say so.
  virtual std::string save_checkpoint(const std::string& root, int64_t step, const TrainConfig& config,
                                      const std::string& sampler);
  virtual ResumeInfo load_checkpoint(const std::string& checkpoint, const TrainConfig& config);
};
using StepperFactory =
    std::function<std::unique_ptr<Stepper>(const TransformerModel& model, Communicator& comm, const ParamMap& init)>;

// The common loop: config.steps steps of the stepper `make` builds, each on this rank's batch of
// the corpus (on config.runtime.device), with per-step metrics (bytes per phase from the
// communicator, mean loss over ranks) passed to `on_step` as soon as they exist.
TrainResult train_loop(RankContext& ctx, const TrainConfig& config, const StepperFactory& make,
                       const std::function<void(const StepMetrics&)>& on_step = {});

// Runs config.steps owner-shaped steps on this rank (placements owner, reconstruct, alltoall). `on_step` (optional) sees every step's
// metrics as soon as they exist.
TrainResult train_owner(RankContext& ctx, const TrainConfig& config,
                        const std::function<void(const StepMetrics&)>& on_step = {});

}  // namespace mfsdp
