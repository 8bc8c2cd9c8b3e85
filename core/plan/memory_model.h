// Per-rank memory, optimizer work and unshard traffic of a plan, and the same memory model for
// the placements the MatrixFSDP paper (README.md#the-paper) compares against, so one table shows all four.
#pragma once

#include "core/plan/ownership_plan.h"
#include "core/plan/optimizer_cost.h"
#include "core/plan/planner.h"
#include "core/plan/precision.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp {

struct MemoryModelOptions {
  OptimizerKind optimizer = OptimizerKind::muon;  // matrix optimizer; everything else AdamW
  OptimizerCostConfig cost;
  int prefetch = 1;  // units gathered at once (the current one plus prefetched ones)
  // Model-wide groups (RuntimeOptions::comm_groups = model): every unit gathered from the first
  // forward to its backward, and every unit's full gradients held until backward ends (in the
  // compute dtype, as autograd makes them), both at once.
  bool whole_model_gathered = false;
  // Masters, their gradients and the optimizer state are in the plan's dtype; unshard moves and
  // the gathered buffer holds the param dtype's copies (with this rank's own segment when it casts).
  PrecisionPolicy precision;
  // HSDP: the plan (made for S ranks) in `replicas` groups; usage then lists all R x S ranks
  // (global rank replica * S + s). Under dedup a rank holds state and does work only for the
  // shards its replica steps (dedup_step_replicas); under replicated every replica does all.
  int replicas = 1;
  StepMode step_mode = StepMode::replicated;
  // Gradient accumulation over grad_accum > 1 micro-batches (docs/accumulation.md), held between a
  // step's micro-batches: per micro-batch, every owner's running sum of its reduced gradients (its
  // gradient segments again, in float32); deferred, every rank's own gradients of every parameter
  // in full, in float32, until the one reduction after the last micro-batch.
  int grad_accum = 1;
  bool deferred = false;
};

// One rank of an owner-shaped plan. Optimizer state is kept in the parameter dtype (as
// torch.optim does); AdamW state covers real rows only, not padding.
struct RankUsage {
  int rank = 0;
  int owned_matrices = 0;
  int owned_tails = 0;
  int64_t param_bytes = 0;  // this rank's master segments, alignment and even-shard padding included
  int64_t grad_bytes = 0;   // same shape and dtype as the segments (the owners' master gradients)
  int64_t state_bytes = 0;  // matrix-optimizer state of owned matrices, AdamW state of the rest
  int64_t resident_bytes = 0;      // params + grads + state: what stays between steps
  double optimizer_cost = 0;       // multiply-adds per step (see optimizer_cost.h)
  int64_t unshard_recv_bytes = 0;  // bytes received to unshard every unit once (one forward), param dtype
  // prefetch x largest gathered buffer, param dtype: (unit - own segment, or the whole unit when
  // the policy casts) + full copies of its even parameters
  int64_t transient_bytes = 0;
  int64_t accum_bytes = 0;         // gradient accumulation's sums between micro-batches (0 when K = 1)
  int64_t peak_bytes = 0;          // resident + transient + accumulation sums
};

// Memory of one placement: owner (this plan), zero3 (even shards of everything, FSDP2; matrix
// optimizers reconstruct the largest gradient and momentum at the step), zero1 (full parameters
// and gradients everywhere, optimizer state on owners as in this plan), ddp (everything full).
// Under a casting policy the replicas' peak adds the full compute copy.
struct PlacementMemory {
  std::string placement;
  int64_t max_resident_bytes = 0;
  int64_t mean_resident_bytes = 0;
  int64_t max_peak_bytes = 0;
};

struct PlanUsage {
  std::vector<RankUsage> ranks;
  double bytes_imbalance = 1;  // max / mean resident bytes
  double cost_imbalance = 1;   // max / mean optimizer cost
  int64_t total_param_bytes = 0;
  std::vector<PlacementMemory> placements;  // owner, zero3, zero1, ddp
};

PlanUsage plan_usage(const OwnershipPlan& plan, const MemoryModelOptions& options);

nlohmann::json to_json(const PlanUsage& usage);

}  // namespace mfsdp
