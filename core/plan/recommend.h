// The --recommend sweep of `mfsdp plan`: the largest shard group (world size) up to which the
// balanced planner keeps both imbalances (resident bytes, optimizer cost) within a bound. Past it
// there are too few matrices per rank for whole-matrix owners to balance.
#pragma once

#include "core/plan/memory_model.h"
#include "core/plan/planner.h"

#include <nlohmann/json_fwd.hpp>

#include <vector>

namespace mfsdp {

struct RecommendRow {
  int world_size = 0;
  double bytes_imbalance = 0, cost_imbalance = 0;
  bool within_bound = false;
};

struct Recommendation {
  PlannerKind planner = PlannerKind::balanced;
  double bound = 1.10;
  int largest_world_size = 0;  // every swept W up to it is within the bound (0: none)
  std::vector<RecommendRow> sweep;
};

// The world sizes swept: powers of two and three times powers of two, up to max_world_size.
std::vector<int> recommend_sweep_sizes(int max_world_size);

// Plans `spec` at every swept W up to min(max_world_size, 4 x owned matrices) with `options`
// (an explicit assignment becomes the balanced planner).
Recommendation recommend_world_size(const ModelSpec& spec, PlannerOptions options, const MemoryModelOptions& memory,
                                    double bound, int max_world_size);

nlohmann::ordered_json to_json(const Recommendation& r);

// HSDP for `world_size` ranks: the fewest replica groups R (a divisor of world_size) whose shard
// group S = world_size / R is at most `largest_shard_group`; 0 when none is (largest_shard_group 0).
int recommend_replicas(int world_size, int largest_shard_group);

}  // namespace mfsdp
