#include "core/plan/recommend.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace mfsdp {

std::vector<int> recommend_sweep_sizes(int max_w) {
  std::vector<int> ws;
  for (int p = 1; p <= max_w; p *= 2) {
    ws.push_back(p);
    if (3 * p / 2 > p && 3 * p / 2 <= max_w && p >= 2) ws.push_back(3 * p / 2);
    if (p > max_w / 2) break;  // p * 2 would overflow past max_w
  }
  std::sort(ws.begin(), ws.end());
  ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
  return ws;
}

Recommendation recommend_world_size(const ModelSpec& spec, PlannerOptions options, const MemoryModelOptions& memory,
                                    double bound, int max_world_size) {
  if (options.planner == PlannerKind::explicit_assignment) options.planner = PlannerKind::balanced;
  int owned = 0;  // roles do not depend on W: count them in a one-rank plan (an expert tensor: its experts)
  const OwnershipPlan one_rank = make_plan(spec, 1, options);  // named: a range over a temporary's member dangles
  for (const MatrixShard& s : one_rank.shards())
    owned += s.role == Role::owned_matrix ? 1 : s.role == Role::expert_range ? static_cast<int>(s.shape[0]) : 0;
  Recommendation r;
  r.planner = options.planner;
  r.bound = bound;
  // The answer is the largest W up to which every swept size balances: past the first size that
  // does not, a larger one may balance again by arithmetic accident, but is not a safe choice.
  bool broken = false;
  for (int w : recommend_sweep_sizes(std::min(max_world_size, std::max(1, 4 * owned)))) {
    const PlanUsage u = plan_usage(make_plan(spec, w, options), memory);
    const bool ok = u.bytes_imbalance <= bound && u.cost_imbalance <= bound;
    broken = broken || !ok;
    if (!broken) r.largest_world_size = w;
    r.sweep.push_back({w, u.bytes_imbalance, u.cost_imbalance, ok});
  }
  return r;
}

nlohmann::ordered_json to_json(const Recommendation& r) {
  auto rows = nlohmann::ordered_json::array();
  for (const RecommendRow& row : r.sweep)
    rows.push_back({{"world_size", row.world_size}, {"bytes_imbalance", row.bytes_imbalance},
                    {"cost_imbalance", row.cost_imbalance}, {"within_bound", row.within_bound}});
  return {{"planner", to_string(r.planner)}, {"bound", r.bound}, {"largest_world_size", r.largest_world_size},
          {"sweep", rows}};
}

int recommend_replicas(int world_size, int largest_shard_group) {
  if (largest_shard_group <= 0) return 0;
  for (int r = 1; r <= world_size; ++r)
    if (world_size % r == 0 && world_size / r <= largest_shard_group) return r;
  return 0;
}

}  // namespace mfsdp
