// The owner-shaped ZeRO-3 runtime on one rank: units with segment-owner collectives and pinned
// owner buffers, driven from autograd, and a communication-free optimizer step.
//
// One training step:
//   for each unit u in forward order:
//     ParamMap p = rt.unshard(u);        // owners broadcast their segments; full views returned
//     x = model.unit_forward(u, x, p);
//     x = rt.after_forward(u, x);        // pins u (gathered memory released), hooks backward
//   loss.backward();                     // per unit, reverse order: revive, compute, reduce_to_owner;
//                                        // the engine's final callback waits for every reduction
//   rt.step();                           // owners update what they own: 0 collectives, 0 bytes
#pragma once

#include "core/communicator.h"
#include "core/layout.h"
#include "core/model.h"
#include "core/optim.h"
#include "core/unit.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

enum class NonFinitePolicy {
  fail,  // step() throws naming the first parameter with a non-finite gradient
  skip,  // step() skips the update and reports it
};

// How Muon steps a hidden matrix kept in even row shards (the baselines; owner plans own them):
enum class EvenMatrixStep {
  allgather,  // stock FSDP2 + Muon: all-gather the full update input on every rank, Newton–Schulz
              // redundantly everywhere, keep the local rows
  alltoall,   // DistMuon / Dion style: matrices assigned round-robin; per round of W matrices one
              // all-to-all gives each rank its matrix whole, Newton–Schulz once, one all-to-all
              // sends every rank its rows of the updates
};
const char* to_string(EvenMatrixStep step);

// A parameter group as torch.optim users know them: parameters whose name matches `pattern` (a
// glob: * ? [..]) use these hyperparameters instead of their optimizer's. The first matching group
// wins; a group that matches no parameter is an error.
struct ParamGroup {
  std::string pattern;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};
// Parses "PATTERN:lr=X:wd=Y" (lr and wd optional, in any order); throws naming the bad part.
ParamGroup param_group_from_string(const std::string& spec);

struct RuntimeOptions {
  ReduceMode reduce = ReduceMode::deterministic;
  UnshardStrategy unshard = UnshardStrategy::broadcast;  // measured faster on Gloo (bench_unshard)
  bool reshard_after_forward = true;  // false: keep gathered memory until backward (no revive)
  // Overlap communication with compute: issue unit u+1's unshard before unit u's forward runs,
  // and the revive of the unit before u (in forward order) before u's backward runs. At most two
  // units' gathered memory is resident at once instead of one. The same collectives in the same
  // order on every rank, so results are bitwise those without prefetch.
  bool prefetch = false;
  NonFinitePolicy non_finite = NonFinitePolicy::fail;
  OptimizerKind optimizer = OptimizerKind::muon;  // for owned matrices; everything else AdamW
  EvenMatrixStep even_matrix_step = EvenMatrixStep::allgather;
  MuonOptions muon;
  AdamWOptions adamw;
  ShampooOptions shampoo;
  SoapOptions soap;
  std::vector<ParamGroup> groups;
  at::Device device = at::kCPU;
};

struct StepReport {
  bool skipped = false;
  std::string non_finite_parameter;  // set when a non-finite gradient was found
};

// The options parameter `name` steps with: `options` with its first matching group applied to
// every optimizer's lr and weight decay.
RuntimeOptions options_for(const RuntimeOptions& options, const std::string& name);
// Throws naming the first group that matches none of `names`.
void check_groups(const RuntimeOptions& options, const std::vector<std::string>& names);

// The optimizer of parameter `name` (one whole tensor): the matrix optimizer for a hidden matrix,
// AdamW for everything else (1-D tails, embeddings, the head, even slices); groups applied.
std::unique_ptr<TensorOptimizer> make_optimizer(const RuntimeOptions& options, const std::string& name,
                                                bool hidden_matrix, const std::vector<int64_t>& shape);

class OwnerRuntime {
 public:
  // Every rank passes the same plan and the same full initial parameters; each keeps only what
  // its segments hold. Compares plan hashes across ranks first (clear error instead of a hang).
  OwnerRuntime(const OwnershipPlan& plan, Communicator& comm, RuntimeOptions options, const ParamMap& full_init);
  ~OwnerRuntime();

  const OwnershipPlan& plan() const { return plan_; }
  Communicator& comm() { return comm_; }
  const RuntimeOptions& options() const { return options_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  Unit& unit(int u) { return *units_.at(u); }

  // Unshards unit `u` and returns its parameters as full tensors connected to autograd.
  ParamMap unshard(int u);
  // Pins (or keeps) unit `u` after its forward and hooks `output` so backward revives `u` first.
  at::Tensor after_forward(int u, const at::Tensor& output);
  // Waits for every reduction and checks gradients for non-finite values (one all-reduce of a
  // flag per rank, counted as gradient reduction). Runs as autograd's final callback; idempotent.
  void finish_backward();

  // The local optimizer step: matrix optimizer on owned matrices, AdamW on owned tails and even
  // slices. Issues no collective (the communicator's optimizer_step counters prove it).
  StepReport step();

  // This rank's stored part of parameter `name` and its gradient (undefined if none stored).
  at::Tensor local_param(const std::string& name);
  at::Tensor local_grad(const std::string& name);
  // Every parameter in full on every rank, as CPU tensors (collectives in phase `other`).
  ParamMap gather_full_params();

  // For checkpoints: the optimizer stepping plan shard `shard` here (null where this rank stores
  // none of it, or where the even-matrix Muon step owns it), and for those even-sharded hidden
  // matrices (reconstruct, alltoall) whether they are, and this rank's rows of their momentum.
  TensorOptimizer* optimizer(int shard) { return optimizers_.at(shard).get(); }
  bool steps_even_matrix(int shard) const { return reconstruct_.at(shard); }
  at::Tensor& even_momentum(int shard) { return reconstruct_buf_.at(shard); }

  int64_t resident_bytes() const;    // segments + segment gradients + optimizer state
  int64_t optimizer_state_bytes() const;
  int64_t gathered_bytes() const;    // transient bytes resident now
  int64_t peak_gathered_bytes() const { return peak_gathered_; }

  // Internal, for the autograd functions.
  void reduce_unit(int u, const std::vector<at::Tensor>& full_grads);
  void revive_unit(int u);
  void queue_final_callback();

 private:
  void track_peak();
  void reconstruct_muon_step(int shard);
  void alltoall_muon_step(const std::vector<int>& shards);
  at::Tensor muon_update_input(int shard);  // row-sharded momentum update; this rank's rows of the NS input

  const OwnershipPlan& plan_;
  Communicator& comm_;
  RuntimeOptions options_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<at::Tensor> anchors_;  // one leaf per unit: makes each unit's gather a graph node
  std::vector<std::unique_ptr<TensorOptimizer>> optimizers_;  // per plan shard; null where not stored here
  std::vector<bool> reconstruct_;             // per shard: stepped by the reconstruction baseline
  std::vector<at::Tensor> reconstruct_buf_;   // its row-sharded momentum
  std::vector<MuonOptions> reconstruct_muon_; // its Muon options, parameter groups applied
  std::vector<int> reduce_order_;     // units in the order their reductions were issued
  std::vector<int> forward_order_;    // units in the order after_forward pinned them (this step)
  bool callback_queued_ = false;
  int64_t peak_gathered_ = 0;
  StepReport pending_report_;
};

}  // namespace mfsdp
