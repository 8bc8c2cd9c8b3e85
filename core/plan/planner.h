// The global owner planner: a pure function (model spec, W, options) -> OwnershipPlan.
// Needs no process group. Every strategy works across all units of the model at once.
#pragma once

#include "core/plan/ownership_plan.h"
#include "core/plan/model_spec.h"
#include "core/plan/optimizer_cost.h"
#include "core/util/enum_names.h"

#include <map>
#include <string>
#include <vector>

namespace mfsdp {

// Placement override for parameters whose name matches `pattern` (a glob: * ? [..]).
struct PlacementRule {
  std::string pattern;
  Role role;
};

struct PlannerOptions {
  PlannerKind planner = PlannerKind::balanced;
  TailPolicy tail_policy = TailPolicy::even;
  OptimizerKind optimizer = OptimizerKind::muon;  // the matrix optimizer (tails always use AdamW)
  OptimizerCostConfig cost;
  std::vector<PlacementRule> rules;  // first match wins; otherwise the default policy by kind
  // PlannerKind::explicit_assignment: owner rank per owned parameter name, and per unit tail
  // under TailPolicy::owner as "<unit>/tail". Every owned item must be listed.
  std::map<std::string, int> explicit_owners;
  // Expert tensors (Role::expert_range): how many contiguous ranges each is cut into, at most
  // min(experts, W); 0 for that maximum (one range per rank while experts last).
  int expert_ranges = 0;
};

// Default policy: hidden matrices owned (matrix optimizer); embeddings and heads even row shards
// (AdamW); everything else the tail (even shards or the tail owner, per tail policy).
Role role_of(const ParamSpec& param, const PlannerOptions& options);

// One unit of planning work: an owned matrix, or a unit's whole tail under TailPolicy::owner.
struct PlanItem {
  std::string key;          // the parameter name, or "<unit>/tail"
  int unit = 0;
  std::vector<int> params;  // indices into the spec
  double bytes = 0;         // resident bytes on its owner: parameters + gradients + optimizer state
  double cost = 0;          // optimizer multiply-adds per step
};
std::vector<PlanItem> plan_items(const ModelSpec& spec, const PlannerOptions& options);

// The owner of each item (same order as `items`). Ties break by item key, then lowest rank.
std::vector<int> assign_owners(const std::vector<PlanItem>& items, int world_size, const PlannerOptions& options);

// One expert range of a 3-D expert tensor: experts [first_expert, first_expert + experts) on `rank`.
struct ExpertRange {
  int rank = 0;
  int64_t first_expert = 0;
  int64_t experts = 0;
};
// The ranges of expert tensor `param`, placed after every plan item has its owner (make_plan calls
// it tensor by tensor in spec order, with every planner): the E experts cut into
// n = min(E, W, options.expert_ranges or W) contiguous ranges, the first E % n one expert longer;
// range k goes to rank (o + k) % W for the rotation o that leaves the largest per-rank optimizer
// cost smallest, then the largest resident bytes, then the lowest o. Adds the ranges' cost and bytes
// to the loads.
std::vector<ExpertRange> expert_ranges(const ParamSpec& param, int world_size, const PlannerOptions& options,
                                       std::vector<double>& cost_load, std::vector<double>& bytes_load);

OwnershipPlan make_plan(const ModelSpec& spec, int world_size, const PlannerOptions& options);

// HSDP (docs/hsdp.md): how the R replicas of a matrix are stepped.
enum class StepMode {
  replicated,  // every replica's owner steps it (R x the work and the state; no step traffic)
  dedup,       // one replica's owner steps it (dedup_step_replicas) and broadcasts the fp32
               // master to the others (phase update_broadcast); its state exists once
};
constexpr NameTable<StepMode, 2> kStepModeNames{{{StepMode::replicated, "replicated"}, {StepMode::dedup, "dedup"}}};
inline const char* to_string(StepMode mode) { return name_in(kStepModeNames, mode); }

// HSDP, step mode dedup (docs/hsdp.md): the replica (0..replicas-1) whose ranks step each shard of
// `plan` (made for the S ranks of one replica group), chosen to balance optimizer cost over all
// R x S ranks: shards by decreasing cost (ties by index), each to the replica whose ranks holding it
// carry the least cost so far (ties to the lower replica). Owned shards load their owner's rank
// of that replica; even shards load every rank of it by its slice. Deterministic.
std::vector<int> dedup_step_replicas(const OwnershipPlan& plan, int replicas, OptimizerKind optimizer,
                                     const OptimizerCostConfig& cost);

}  // namespace mfsdp
