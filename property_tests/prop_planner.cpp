// Properties of the planner over generated models (random unit counts, shapes including 1 x n and
// n x 1, empty tails, optional embedding/head) and W in 1..64. The layout checks here are written
// independently of OwnershipPlan's own validation.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/plan/planner.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <set>

namespace mfsdp {
namespace {

rc::Gen<std::vector<int64_t>> matrix_shape() {
  return rc::gen::oneOf(
      rc::gen::map(rc::gen::inRange<int64_t>(1, 40), [](int64_t n) { return std::vector<int64_t>{1, n}; }),
      rc::gen::map(rc::gen::inRange<int64_t>(1, 40), [](int64_t n) { return std::vector<int64_t>{n, 1}; }),
      rc::gen::map(rc::gen::pair(rc::gen::inRange<int64_t>(1, 33), rc::gen::inRange<int64_t>(1, 33)),
                   [](std::pair<int64_t, int64_t> mn) { return std::vector<int64_t>{mn.first, mn.second}; }));
}

rc::Gen<ModelSpec> model_spec() {
  return rc::gen::exec([] {
    ModelSpec spec;
    spec.name = "generated";
    const c10::ScalarType dtype = *rc::gen::element(c10::kFloat, c10::kBFloat16, c10::kDouble);
    if (*rc::gen::arbitrary<bool>()) {
      spec.params.push_back({"embed.weight", {*rc::gen::inRange<int64_t>(1, 50), *rc::gen::inRange<int64_t>(1, 9)},
                             dtype, "embed", ParamKind::embedding, {}});
    }
    const int units = *rc::gen::inRange(1, 7);
    for (int u = 0; u < units; ++u) {
      const std::string unit = "blocks." + std::to_string(u);
      const int matrices = *rc::gen::inRange(0, 6);
      const int tails = *rc::gen::inRange(matrices == 0 ? 1 : 0, 4);  // tails may be empty
      for (int m = 0; m < matrices; ++m) {
        spec.params.push_back({unit + ".w" + std::to_string(m), *matrix_shape(), dtype, unit, ParamKind::hidden_matrix, {}});
      }
      for (int e = *rc::gen::inRange(0, 3); e > 0; --e) {  // expert tensors [E, out, in]
        const std::vector<int64_t> m = *matrix_shape();
        spec.params.push_back({unit + ".experts" + std::to_string(e), {*rc::gen::inRange<int64_t>(1, 20), m[0], m[1]}, dtype,
                               unit, ParamKind::expert_matrix, {}});
      }
      for (int t = 0; t < tails; ++t) {
        spec.params.push_back({unit + ".norm" + std::to_string(t), {*rc::gen::inRange<int64_t>(1, 30)}, dtype, unit,
                               ParamKind::other, {}});
      }
    }
    if (*rc::gen::arbitrary<bool>()) {
      spec.params.push_back({"head.weight", {*rc::gen::inRange<int64_t>(1, 50), *rc::gen::inRange<int64_t>(1, 9)},
                             dtype, "head", ParamKind::head, {}});
    }
    return spec;
  });
}

rc::Gen<PlannerOptions> planner_options() {
  return rc::gen::exec([] {
    PlannerOptions o;
    o.planner = *rc::gen::element(PlannerKind::round_robin, PlannerKind::greedy_bytes, PlannerKind::greedy_cost,
                                  PlannerKind::balanced);
    o.tail_policy = *rc::gen::element(TailPolicy::even, TailPolicy::owner);
    o.optimizer = *rc::gen::element(OptimizerKind::muon, OptimizerKind::adamw, OptimizerKind::shampoo, OptimizerKind::soap);
    o.expert_ranges = *rc::gen::inRange(0, 9);
    return o;
  });
}

// Every element of every parameter is stored exactly once; owned parameters whole on their owner;
// slices inside their rank's segment; segments tile the unit buffer in rank order.
void check_layout(const ModelSpec& spec, const OwnershipPlan& plan) {
  const int W = plan.world_size();
  RC_ASSERT(plan.shards().size() == spec.params.size());
  std::vector<std::vector<int>> claimed;
  for (const UnitLayout& u : plan.units()) {
    claimed.emplace_back(u.numel, 0);
    int64_t next = 0;
    RC_ASSERT(static_cast<int>(u.segments.size()) == W);
    for (const Segment& s : u.segments) {
      RC_ASSERT(s.offset == next);
      next += s.numel;
    }
    RC_ASSERT(next == u.numel);
  }
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const ParamSpec& p = spec.params[i];
    const MatrixShard& s = plan.shard(p.name);
    RC_ASSERT(s.shape == p.shape);
    const int64_t rows = p.shape[0], row_numel = p.numel() / rows;
    std::vector<int> row_copies(rows, 0);
    for (const ShardSlice& sl : s.slices) {
      const Segment& seg = plan.units()[s.unit].segments[sl.rank];
      const int64_t end = sl.offset + sl.padded_rows * row_numel;
      RC_ASSERT(sl.offset >= seg.offset);
      RC_ASSERT(end <= seg.offset + seg.numel);
      for (int64_t e = sl.offset; e < end; ++e) ++claimed[s.unit][e];
      for (int64_t r = sl.row_begin; r < sl.row_begin + sl.rows; ++r) ++row_copies[r];
    }
    RC_ASSERT(std::all_of(row_copies.begin(), row_copies.end(), [](int c) { return c == 1; }));
    if (s.owned()) {
      RC_ASSERT(s.slices.size() == 1u);
      RC_ASSERT(s.slices[0].rank == s.owner);
      RC_ASSERT(s.slices[0].rows == rows);
    } else if (s.role == Role::expert_range) {  // contiguous whole-expert ranges, at most one per rank
      RC_ASSERT(static_cast<int>(s.slices.size()) <= std::min<int64_t>(W, rows));
      std::set<int> ranks;
      for (const ShardSlice& sl : s.slices) RC_ASSERT(ranks.insert(sl.rank).second && sl.rows == sl.padded_rows);
    } else {
      RC_ASSERT(static_cast<int>(s.slices.size()) == W);
    }
  }
  for (const auto& unit : claimed) {
    RC_ASSERT(std::all_of(unit.begin(), unit.end(), [](int c) { return c <= 1; }));
  }
}

RC_GTEST_PROP(PlannerProperties, EveryPlannerCoversEachElementOnceWithASingleOwner, ()) {
  const ModelSpec spec = *model_spec();
  const int W = *rc::gen::inRange(1, 65);
  const PlannerOptions o = *planner_options();
  check_layout(spec, make_plan(spec, W, o));
}

RC_GTEST_PROP(PlannerProperties, SameInputGivesTheSamePlanAndHash, ()) {
  const ModelSpec spec = *model_spec();
  const int W = *rc::gen::inRange(1, 65);
  const PlannerOptions o = *planner_options();
  OwnershipPlan a = make_plan(spec, W, o), b = make_plan(spec, W, o);
  RC_ASSERT(a.canonical_text() == b.canonical_text());
  RC_ASSERT(a.hash() == b.hash());
}

// List scheduling's bound on its own objective: max load <= mean load + largest item.
RC_GTEST_PROP(PlannerProperties, GreedyPlannersMeetTheLptBound, ()) {
  const ModelSpec spec = *model_spec();
  const int W = *rc::gen::inRange(1, 65);
  PlannerOptions o = *planner_options();
  for (bool by_cost : {false, true}) {
    o.planner = by_cost ? PlannerKind::greedy_cost : PlannerKind::greedy_bytes;
    const auto items = plan_items(spec, o);
    const auto owner = assign_owners(items, W, o);
    std::vector<double> load(W, 0.0);
    double total = 0, largest = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const double w = by_cost ? items[i].cost : items[i].bytes;
      load[owner[i]] += w;
      total += w;
      largest = std::max(largest, w);
    }
    const double max_load = *std::max_element(load.begin(), load.end());
    RC_ASSERT(max_load <= total / W + largest + 1e-9 * (1 + total));
  }
}

RC_GTEST_PROP(PlannerProperties, ExplicitAssignmentsAreFollowedOrRejected, ()) {
  const ModelSpec spec = *model_spec();
  const int W = *rc::gen::inRange(1, 9);
  PlannerOptions o = *planner_options();
  o.planner = PlannerKind::explicit_assignment;
  const auto items = plan_items(spec, o);
  // Includes "everything on one rank" and ranks that own nothing.
  const bool all_on_one = *rc::gen::arbitrary<bool>();
  const int one = *rc::gen::inRange(0, W);
  for (const auto& item : items) o.explicit_owners[item.key] = all_on_one ? one : *rc::gen::inRange(0, W);
  OwnershipPlan plan = make_plan(spec, W, o);
  check_layout(spec, plan);
  for (const auto& item : items) {
    for (int p : item.params) RC_ASSERT(plan.shard(spec.params[p].name).owner == o.explicit_owners[item.key]);
  }
  if (!items.empty()) {
    const std::string& victim = (*rc::gen::elementOf(items)).key;
    PlannerOptions bad = o;
    bad.explicit_owners[victim] = *rc::gen::element(-1, W, W + 5);
    try {
      make_plan(spec, W, bad);
      RC_FAIL("an out-of-range owner was accepted");
    } catch (const c10::Error& e) {
      RC_ASSERT(std::string(e.what_without_backtrace()).find("'" + victim + "'") != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace mfsdp
