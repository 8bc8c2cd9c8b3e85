// The owner-shaped ZeRO-3 runtime on one rank: units with segment-owner collectives and pinned
// owner buffers, driven from autograd, and a communication-free optimizer step.
//
// One training step, in the stages of docs/architecture.md ("The step as stages"):
//   for each unit u in forward order:
//     ParamMap p = rt.unshard(u);        // owners broadcast their segments; full views returned
//     x = model.unit_forward(u, x, p);
//     x = rt.after_forward(u, x);        // pins u (gathered memory released), hooks backward
//   loss.backward();                     // per unit, reverse order: revive, compute, reduce_to_owner;
//                                        // the engine's final callback runs finish_backward:
//                                        //   finish_reductions: owners hold the mean gradient
//                                        //   check_finite_gradients: one flag all-reduce
//   rt.step();                           // the update:
//                                        //   step_optimizers: owners update what they own, 0
//                                        //     collectives, 0 bytes (a baseline's even-matrix
//                                        //     step gathers)
//                                        //   ReplicaSync::broadcast_updates (HSDP dedup)
// Gradient accumulation (docs/accumulation.md): rt.begin_micro_batch({m, K}) before each
// micro-batch's forward; finish_backward of every micro-batch but the last leaves the step
// unfinished (per micro-batch: the owners add the micro-batch's sums; deferred: nothing was
// reduced, every rank added its gradients locally), and the last one leaves the owners holding
// the step's mean, the non-finite check done. step() refuses to run before that.
// Clipping (options.max_norm) ends the last micro-batch's finish_backward, after the non-finite
// check: clip_gradients takes every owner's mean gradient and scales them all before any
// optimizer reads them, in a phase of its own (grad_norm); the step stays communication-free.
// The schedule sets the step's learning rates before step_optimizers.
#pragma once

#include "core/dist/communicator.h"
#include "core/plan/ownership_plan.h"
#include "core/plan/planner.h"
#include "core/optim/optimizer_routing.h"
#include "core/runtime/even_matrix_step.h"
#include "core/runtime/param_map.h"
#include "core/runtime/reduction.h"
#include "core/runtime/replica_sync.h"
#include "core/runtime/unit.h"
#include "core/util/enum_names.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

enum class NonFinitePolicy {
  fail,  // step() throws naming the first parameter with a non-finite gradient
  skip,  // step() skips the update and reports it
};
constexpr NameTable<NonFinitePolicy, 2> kNonFinitePolicyNames{{{NonFinitePolicy::fail, "fail"}, {NonFinitePolicy::skip, "skip"}}};



// How many units' transfers travel as one group (Communicator::group).
enum class CommGroups {
  unit,   // each unit's unshard (revive) one group, and each unit's reduction one group
  model,  // the whole model's: at the step's first unshard every unit's segments as one group, kept
          // gathered until backward (no revive), and every unit's reduction as one group when
          // backward ends. Two collectives a step instead of three per unit (FSDP2 wrapping only the
          // root module); DDP's memory (every parameter and gradient in full at once). Same
          // arithmetic, so the same bits.
};
constexpr NameTable<CommGroups, 2> kCommGroupsNames{{{CommGroups::unit, "unit"}, {CommGroups::model, "model"}}};

// The runtime's options: the optimizers' (OptimizerOptions: kinds, hyperparameters, groups) and how
// the units move and reduce.
struct RuntimeOptions : OptimizerOptions {
  RuntimeOptions() = default;
  explicit RuntimeOptions(const OptimizerOptions& o) : OptimizerOptions(o) {}
  ReduceMode reduce = ReduceMode::deterministic;
  UnshardStrategy unshard = UnshardStrategy::broadcast;  // measured faster on Gloo (bench_unshard)
  bool reshard_after_forward = true;  // false: keep gathered memory until backward (no revive)
  CommGroups comm_groups = CommGroups::unit;  // model: implies reshard_after_forward false
  // Overlap communication with compute: issue unit u+1's unshard before unit u's forward runs,
  // and the revive of the unit before u (in forward order) before u's backward runs. At most two
  // units' gathered memory is resident at once instead of one. The same collectives in the same
  // order on every rank, so results are bitwise those without prefetch.
  bool prefetch = false;
  // Activation checkpointing, per transformer block (docs/recompute.md): each block's forward saves
  // only its input; backward recomputes it on the revived buffer (OwnerRuntime::recomputed_forward).
  bool activation_checkpointing = false;
  NonFinitePolicy non_finite = NonFinitePolicy::fail;
  // Global gradient-norm clipping (core/runtime/clipping.h): after the last micro-batch's
  // reduction, every gradient is scaled to a total 2-norm of at most max_norm (phase grad_norm).
  // 0: no clipping, and no norm computed.
  double max_norm = 0;
  // How micro-batches' gradients are added when a step has several (core/runtime/reduction.h).
  GradReduce grad_reduce = GradReduce::per_microbatch;
  // Compute and reduce dtypes over the plan's masters (core/plan/precision.h); the default
  // computes in the masters' float32.
  PrecisionPolicy precision;
  // HSDP: replica groups of the plan's world size (1: plain owner sharding) and the step mode.
  // The runtime is given the replicate-group communicator when replicas > 1.
  int replicas = 1;
  StepMode step_mode = StepMode::replicated;
  // How hidden matrices the plan keeps in even row shards are stepped under Muon (the baselines:
  // reference/reconstruct.h, reference/alltoall.h). Unset: such a plan is refused at the step.
  EvenMatrixStepFactory even_matrix_step;
  at::Device device = at::kCPU;
};

struct StepReport {
  bool skipped = false;
  std::string non_finite_parameter;  // set when a non-finite gradient was found
  // Clipping: the total gradient norm before clipping (every rank the same value); unset without.
  std::optional<double> grad_norm;
  bool non_finite_norm = false;  // every gradient finite, their norm not (it overflowed)
};

// The runtime's collectives (unshard, revive, reduce_to_owner, the non-finite flag, the
// even-matrix baselines' step) go through `comm` in the same order on every rank: every rank
// runs the same units in the same forward and backward order and issues the same calls for the
// same plan (whose hash the constructor compares). A rank that skips or reorders one leaves the
// others waiting; the communicator's timeout then names the collective.
class OwnerRuntime {
 public:
  // Every rank passes the same plan and the same full initial parameters; each keeps only what
  // its segments hold. Compares plan hashes across ranks first (clear error instead of a hang).
  // HSDP: `comm` is this rank's shard group (plan.world_size() ranks) and `replicate` the group of
  // the options.replicas ranks holding the same segments (its rank is this rank's replica).
  OwnerRuntime(const OwnershipPlan& plan, Communicator& comm, RuntimeOptions options, const ParamMap& full_init,
               Communicator* replicate = nullptr);
  ~OwnerRuntime();

  const OwnershipPlan& plan() const { return plan_; }
  Communicator& comm() { return comm_; }
  const RuntimeOptions& options() const { return options_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  Unit& unit(int u) { return *units_.at(u); }

  // Unshards unit `u` and returns its parameters as full tensors connected to autograd, with the
  // tied parameters it borrows from earlier units (the same views those units' unshard returned:
  // autograd sums every use's gradient before the lender's reduction).
  // The micro-batch whose forward comes next (index 0 of 1 when never called): in order, 0..K-1,
  // each after the previous one's backward; K > 1 needs float32 masters (the accumulation dtype).
  void begin_micro_batch(const MicroBatch& micro_batch);
  const MicroBatch& micro_batch() const { return micro_; }
  // A step has begun (its first forward ran) and its step() has not: gradients or sums of
  // micro-batches are held that no checkpoint records, so none may be written now.
  bool step_in_progress() const { return step_open_; }

  ParamMap unshard(int u);
  // Activation checkpointing (docs/recompute.md): unit u's forward `fn` (its parameters and input
  // to its output), run with nothing saved for backward but `input`. Unshards u itself; the caller
  // then calls after_forward as for any unit, which pins u. In backward, after u's revive, fn runs
  // again on the revived buffer (the same storage, so the same values), then its backward, and the
  // gradients go to u's reduction. Unshard calls and bytes equal those without recompute. Not for
  // a unit that lends or borrows tied parameters (their gradient is summed over units).
  using UnitFn = std::function<at::Tensor(const ParamMap& params, const at::Tensor& input)>;
  at::Tensor recomputed_forward(int u, const at::Tensor& input, UnitFn fn);
  // Pins (or keeps) unit `u` after its forward and hooks `output` so backward revives `u` first.
  at::Tensor after_forward(int u, const at::Tensor& output);
  // Waits for every reduction and checks gradients for non-finite values (one all-reduce of a
  // flag per rank, counted as gradient reduction). Runs as autograd's final callback; idempotent.
  void finish_backward();

  // The local optimizer step: matrix optimizer on owned matrices, AdamW on owned tails and even
  // slices. On the owner plan it issues no collective in phase optimizer_step (the counters prove
  // it). Under HSDP dedup it then broadcasts each stepped master to the other replicas (phase
  // update_broadcast); a baseline's even-matrix step gathers its matrices (phase optimizer_step).
  StepReport step();
  // The learning-rate schedule's factor λ(t) for the steps from here, on every optimizer this rank
  // steps with (TensorOptimizer::set_lr_factor), the even-matrix step's included. No collective.
  void set_lr_factor(double factor);

  // This rank's stored part of parameter `name` and its gradient (undefined if none stored).
  at::Tensor local_param(const std::string& name);
  at::Tensor local_grad(const std::string& name);
  // Every parameter's master in full on every rank, as CPU tensors (collectives in phase `other`).
  ParamMap gather_full_params();
  // Every parameter's gradient in full, as the step uses it (the mean over the step's micro-batches
  // and ranks, clipped when clipping is on): between the last micro-batch's backward and step().
  // Refused under HSDP dedup, where no group holds every reduced gradient.
  ParamMap gather_full_grads();

  // For checkpoints: the optimizer stepping plan shard `shard` here (null where this rank stores
  // none of it, or where the even-matrix step owns it), whether the even-matrix step steps it,
  // and that step (throws when the runtime was given none).
  TensorOptimizer* optimizer(int shard) { return optimizers_.at(shard).get(); }
  bool steps_even_matrix(int shard) const { return even_matrix_.at(shard); }
  EvenMatrixStep& even_matrix_step();

  int64_t resident_bytes() const;    // segments + segment gradients + optimizer state
  int64_t optimizer_state_bytes() const;
  int64_t gathered_bytes() const;    // transient bytes resident now
  int64_t peak_gathered_bytes() const { return peak_gathered_; }
  // Gradient accumulation's sums held between micro-batches (deferred: this rank's full gradients;
  // per micro-batch: the owners' segment sums), the most at once so far.
  int64_t peak_accumulation_bytes() const { return peak_accumulation_; }
  // Matrix-optimizer steps (one Newton-Schulz each under Muon) this rank took, all steps so far.
  int64_t matrix_steps() const { return matrix_steps_; }
  // HSDP: the replica stepping each plan shard (dedup), or empty (replicated, or no HSDP).
  const std::vector<int>& step_replicas() const { return replicas_.step_replicas(); }
  int replica() const { return replicas_.replica(); }


 private:
  friend struct OwnerRuntimeAutogradHooks;  // the autograd functions of owner_runtime.cpp
  // The stages of finish_backward and step (the header's comment).
  void finish_reductions();
  void check_finite_gradients();
  void clip_gradients();
  void step_optimizers();
  void reduce_unit(int u, const std::vector<at::Tensor>& full_grads);
  void issue_reduction(int u, std::vector<at::Tensor> full_grads);  // now, or held (CommGroups::model)
  void issue_held_reductions();                                     // the held ones as one group
  void revive_unit(int u);
  at::Tensor recompute_backward(int u, const at::Tensor& input, const at::Tensor& grad_output);
  ParamMap unit_params(int u, const std::vector<at::Tensor>& views) const;
  void queue_final_callback();
  void track_peak();
  ParamMap gather_full(std::vector<at::Tensor> (Unit::*gather)());  // every unit's tensors in full, by name

  const OwnershipPlan& plan_;
  Communicator& comm_;
  RuntimeOptions options_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<UnitFn> recompute_fns_;  // per unit: its forward, kept from forward to backward (recomputed_forward)
  std::vector<at::Tensor> anchors_;  // one leaf per unit: makes each unit's gather a graph node
  std::vector<std::unique_ptr<TensorOptimizer>> optimizers_;  // per plan shard; null where not stored here
  std::vector<bool> even_matrix_;            // per shard: stepped by even_step_ (a baseline)
  std::unique_ptr<EvenMatrixStep> even_step_;
  std::vector<int> reduce_order_;     // units in the order their reductions were issued
  // CommGroups::model: per unit, the gradients its reduction takes, held until backward ends.
  std::vector<std::optional<std::vector<at::Tensor>>> held_grads_;
  std::vector<int> forward_order_;    // units in the order after_forward pinned them (this step)
  bool callback_queued_ = false;
  int64_t peak_gathered_ = 0;
  int64_t peak_accumulation_ = 0;
  void track_accumulation();
  int64_t matrix_steps_ = 0;
  StepReport pending_report_;
  ReplicaSync replicas_;  // HSDP: how the replica groups stay in step (core/runtime/replica_sync.h)
  // Tied parameters (UnitLayout::borrowed): per unit, the last later unit that borrows from it
  // (-1: none; such a unit stays gathered from its forward to its backward), and per shard the
  // full view its unit's unshard returned, handed to the borrowers until the backward ends.
  std::vector<int> last_borrower_;
  std::vector<at::Tensor> lent_views_;
  // Gradient accumulation: the micro-batch running, whether its backward finished, and the sums
  // carried between micro-batches: deferred, per unit this rank's own full gradients (accumulation
  // dtype, the unit's parameter order); per micro-batch, per unit the owners' reduced sums.
  MicroBatch micro_;
  bool micro_finished_ = false;
  bool step_open_ = false;
  bool deferred() const { return options_.grad_reduce == GradReduce::deferred && micro_.count > 1; }
  std::vector<std::vector<at::Tensor>> local_sums_;
  std::vector<at::Tensor> reduced_sums_;
};

}  // namespace mfsdp
