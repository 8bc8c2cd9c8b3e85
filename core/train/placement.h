// The placements and the one interface each implements: a placement runner is one rank's training
// step of that placement, behind the common loop (train_loop in trainer.h). Implementations:
//   owner, reconstruct, alltoall  core/train/owner_placement.h (reconstruct and alltoall with the
//                                 even-matrix steps of reference/reconstruct.h, reference/alltoall.h)
//   zero1                         reference/zero1.h
//   ddp                           oracle/ddp_oracle.h (+ checkpoint resume in harness/placements.cpp)
// harness/placements.h builds any of them by name.
#pragma once

#include "core/dist/communicator.h"
#include "core/io/load_report.h"
#include "core/runtime/param_map.h"
#include "core/runtime/reduction.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

class TensorOptimizer;
class TransformerModel;
struct TrainConfig;

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Where the parameters live (mfsdp train --placement):
//   owner        the owner-shaped plan (this project)
//   reconstruct  stock FSDP2 + Muon: every parameter in even row shards; Muon all-gathers each
//                matrix's update input in the step and orthogonalises it redundantly everywhere
//   alltoall     DistMuon / Dion: even row shards; the step's all-to-alls hand each rank whole
//                matrices of its assigned set, Newton–Schulz once, and the updates back
//   zero1        ZeRO-1 owner: full parameters everywhere, gradients reduced to owners, owners
//                update and broadcast (reference/zero1.h)
//   ddp          the DDP full-matrix oracle (oracle/ddp_oracle.h)
// The first three run on the owner runtime; the last two hold full replicas.
enum class Placement { owner, reconstruct, alltoall, zero1, ddp };
const char* to_string(Placement placement);
Placement placement_from_string(const std::string& name);  // throws naming the known ones
bool runs_on_owner_runtime(Placement placement);

// What a run resumed from (TrainResult::resumed): the loader's own record (core/io/load_report.h).
using ResumeInfo = LoadReport;

// What the training loop records in a checkpoint besides the runner's own state (JSON texts):
// this rank's data sampler, and the learning-rate schedule with the optimizer steps taken
// (lr_schedule_to_json; empty: none).
struct LoopState {
  std::string sampler, lr_schedule;
};

// One placement's training step on one rank, behind the common loop (train_loop), in the stages of
// the documented step (docs/architecture.md, "The step as stages"):
//   forward_backward  forward and backward of this rank's batch, and the reduction that leaves
//                     every gradient reduced where it is stepped (phases unshard, revive,
//                     grad_reduce)
//   update            the optimizer step, and whatever brings every copy of the parameters up to
//                     date (phases optimizer_step, update_broadcast)
// train_loop calls forward_backward once per micro-batch of the step (MicroBatch: index m of K;
// the reduction of the last one leaves the step's mean gradient, summed in the GradReduce mode's
// order, core/runtime/reduction.h), then set_lr_factor and update once. Clipping runs at the end
// of the last micro-batch's reduction.
class PlacementRunner {
 public:
  struct Gradients {
    double loss = 0;  // this rank's micro-batch loss
    double forward_s = 0, backward_s = 0;  // backward_s includes the reduction
  };
  struct Update {
    double optimizer_s = 0;
    bool skipped = false;              // a non-finite gradient under the skip policy: nothing updated
    std::string non_finite_parameter;  // set when a non-finite gradient was found
    std::optional<double> grad_norm;   // clipping: the step's total gradient norm before clipping
    bool non_finite_norm = false;      // the norm was not finite though every gradient was
  };
  virtual ~PlacementRunner() = default;
  // `before_backward` runs between forward and backward.
  virtual Gradients forward_backward(const at::Tensor& tokens, const at::Tensor& targets,
                                     const std::function<void()>& before_backward, const MicroBatch& micro_batch) = 0;
  virtual Update update() = 0;
  // The learning-rate schedule's factor λ(t) for the next update (core/optim/lr_schedule.h), on
  // every optimizer the runner steps with; no collective.
  virtual void set_lr_factor(double factor) = 0;
  // Every parameter in full, as CPU copies (may communicate, in phase `other`).
  virtual ParamMap full_params() = 0;
  // Every gradient in full as the update will use it (after the last micro-batch's reduction and
  // clipping; before update), as CPU copies (may communicate, in phase `other`). Placements that
  // cannot say so throw.
  virtual ParamMap full_grads();
  // Every optimizer state in full, as CPU copies: tensor entries as `name.entry`, counters as 0-d
  // float32 tensors `name.counter` (empty before the first update; may communicate, in phase
  // `other`). Placements that cannot say so throw.
  virtual ParamMap full_state();
  virtual int64_t resident_bytes() const = 0;
  virtual int64_t peak_gathered_bytes() const { return 0; }
  // Gradient accumulation's sums between micro-batches, the most at once (owner runtime; 0 elsewhere).
  virtual int64_t peak_accumulation_bytes() const { return 0; }
  virtual uint64_t plan_hash() const { return 0; }
  // QK-clip's rescale after an update (core/train/qk_clip.h): row r of parameter `name` times
  // row_scale[r] (a [rows] float32 tensor on the compute device) wherever this rank stores that
  // row; no collective. Placements that cannot say so.
  virtual void scale_rows(const std::string& name, const at::Tensor& row_scale);
  // Communicators the runner issues collectives through besides the world's (HSDP's shard and
  // replicate groups): train_loop resets them each step and adds their counters to the step's.
  virtual std::vector<Communicator*> communicators() { return {}; }
  // Checkpoints: writes one after `step` steps under `root` (collective; returns its directory),
  // or loads one and returns what it found. `loop` is what the loop records (LoopState).
  // Placements that cannot say so.
  virtual std::string save_checkpoint(const std::string& root, int64_t step, const TrainConfig& config,
                                      const LoopState& loop);
  virtual ResumeInfo load_checkpoint(const std::string& checkpoint, const TrainConfig& config);
};
// Adds `optimizer`'s state for parameter `name` to `out` as full_state() names it (nothing when
// it has not stepped).
void add_full_state(ParamMap& out, const std::string& name, const TensorOptimizer& optimizer);
// `held` holds rows [begin, begin + held.size(0)) of a parameter: each row times its entry of the
// parameter's row_scale, cast to held's dtype first (as MuonClip casts its scales), in place.
void scale_held_rows(const at::Tensor& held, const at::Tensor& row_scale, int64_t begin);

using PlacementRunnerFactory =
    std::function<std::unique_ptr<PlacementRunner>(const TransformerModel& model, Communicator& comm, const ParamMap& init)>;

}  // namespace mfsdp
