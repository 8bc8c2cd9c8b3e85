// Differential suite: the owner-shaped runtime (experiment) against the DDP full-matrix oracle
// (control), step by step, compared with memcmp equality: every parameter after every step and
// every rank's loss, over 20 steps. For each world size and optimizer the oracle runs once and
// every planner and tail policy must reproduce it exactly: the same trajectory out of every planner
// at a given W (planner invariance), and out of the reconstruction and ZeRO-1 baselines.
#include "core/plan/planner.h"
#include "core/dist/ranks.h"
#include "core/train/model.h"
#include "harness/trajectory.h"
#include "harness/placements.h"
#include "testing/fixtures.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/full.h>
#include <gtest/gtest.h>

#include <cmath>

#include <mutex>
#include <optional>
#include <random>

namespace mfsdp {
namespace {

constexpr int kSteps = 20;

// The precision axis: float32 throughout, or bf16 compute copies of float32 masters with float32
// gradient reduction (core/plan/precision.h).
enum class Precision { fp32, bf16 };
PrecisionPolicy policy(Precision p) {
  PrecisionPolicy policy;
  if (p == Precision::bf16) policy.param_dtype = c10::kBFloat16;
  return policy;
}

TrainConfig base_config(OptimizerKind optimizer, Precision precision = Precision::fp32) {
  // A narrower tiny model keeps 12 x 11 twenty-step runs inside the CI budget; roots and
  // eigenbases refreshed several times within the run.
  TrainConfig c = tiny_config({.steps = kSteps, .seed = 11, .optimizer = optimizer, .test_rates = true, .precondition_frequency = 5});
  c.runtime.precision = policy(precision);
  return c;
}

struct Variant {
  std::string name;
  PlannerOptions planner;
  Placement placement = Placement::owner;
  bool prefetch = false;
  std::optional<c10::ScalarType> reduce_dtype;  // overrides the base policy's
};

// The planner axis: four strategies and a random explicit assignment (seeded by W).
std::vector<Variant> variants(const TrainConfig& base, int W) {
  std::vector<Variant> out;
  for (TailPolicy tail : {TailPolicy::even, TailPolicy::owner}) {
    for (PlannerKind kind : {PlannerKind::round_robin, PlannerKind::greedy_bytes, PlannerKind::greedy_cost,
                             PlannerKind::balanced, PlannerKind::explicit_assignment}) {
      PlannerOptions o = base.planner;
      o.planner = kind;
      o.tail_policy = tail;
      if (kind == PlannerKind::explicit_assignment) {
        std::mt19937 rng(1000 + W);
        for (const PlanItem& item : plan_items(TransformerModel(base.model).spec(), o))
          o.explicit_owners[item.key] = static_cast<int>(rng() % W);
      }
      out.push_back({std::string(to_string(kind)) + "/" + to_string(tail), o, Placement::owner, false, std::nullopt});
    }
  }
  // The baselines: FSDP2 + Muon reconstruction and all-to-all (DistMuon) step even-sharded
  // matrices with Muon (or AdamW); Shampoo and SOAP need whole matrices, so only ZeRO-1 joins them.
  const bool elementwise_or_muon = base.runtime.optimizer == OptimizerKind::muon || base.runtime.optimizer == OptimizerKind::adamw;
  for (Placement p : {Placement::reconstruct, Placement::alltoall, Placement::zero1})
    if (elementwise_or_muon || p == Placement::zero1) out.push_back({std::string("placement ") + to_string(p), base.planner, p, false, std::nullopt});
  // Communication overlapped with compute (prefetched unshard and revive).
  out.push_back({"owner balanced/even + prefetch", base.planner, Placement::owner, /*prefetch=*/true, std::nullopt});
  // bf16 on the wire: deterministic mode still accumulates the (bf16-exact) contributions in
  // float32 in rank order, so the trajectory is the oracle's with a float32 reduction.
  if (base.runtime.precision.param_dtype == c10::kBFloat16) {
    Variant v{"owner balanced/even, reduce bf16", base.planner, Placement::owner, false, std::nullopt};
    v.reduce_dtype = c10::kBFloat16;
    out.push_back(v);
  }
  return out;
}

using GridParam = std::tuple<int, OptimizerKind, Precision>;

// "W<world size>_<optimizer>[_bf16]" for parameterised test names.
std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  std::string name = "W";
  name += std::to_string(std::get<0>(info.param));
  name += '_';
  name += to_string(std::get<1>(info.param));
  if (std::get<2>(info.param) == Precision::bf16) name += "_bf16";
  return name;
}

class Differential : public ::testing::TestWithParam<GridParam> {};

// Runs the oracle once and every variant against it on W thread ranks; returns the failures.
std::vector<std::string> variants_against_oracle(const TrainConfig& base, int W, const std::vector<Variant>& all) {
  std::mutex mutex;
  std::vector<std::string> failures;
  RanksOptions ranks;
  ranks.world_size = W;
  ranks.timeout = std::chrono::seconds(120);
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    const Trajectory control = run_oracle(ctx, base);
    for (const Variant& v : all) {
      TrainConfig c = base;
      c.planner = v.planner;
      apply_placement(v.placement, c);
      c.runtime.prefetch = v.prefetch;
      if (v.reduce_dtype) c.runtime.precision.reduce_dtype = *v.reduce_dtype;
      const Comparison cmp = compare(control, run_recorded(ctx, c));
      if (!cmp.bitwise_equal) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back("rank " + std::to_string(ctx.rank) + ", " + v.name + ": first difference at step " +
                           std::to_string(cmp.first_bad_step) + " in " + cmp.first_bad + " (" + cmp.detail +
                           "); max |diff| " + std::to_string(cmp.max_abs_diff) + ", max ULP " + std::to_string(cmp.max_ulp));
      }
    }
  });
  return failures;
}

// Each failure as a test failure; with none, one line saying what `what` matched.
void report(const std::vector<std::string>& failures, const std::string& what) {
  for (const auto& f : failures) ADD_FAILURE() << f;
  if (failures.empty()) std::printf("%s\n", what.c_str());
}

std::string summary(const char* model, int W, const TrainConfig& base, size_t variants) {
  return std::string(model) + " W=" + std::to_string(W) + " " + to_string(base.runtime.optimizer) + ", " +
         to_string(base.runtime.precision) + ": " + std::to_string(variants) + " planner/tail/placement variants x " +
         std::to_string(base.steps) + " steps bit-identical to the oracle (max |diff| 0)";
}

TEST_P(Differential, EveryPlannerAndTailPolicyBitMatchesTheOracle) {
  const auto [W, optimizer, precision] = GetParam();
  const TrainConfig base = base_config(optimizer, precision);
  const std::vector<Variant> all = variants(base, W);
  report(variants_against_oracle(base, W, all), summary("dense", W, base, all.size()));
}

INSTANTIATE_TEST_SUITE_P(Grid, Differential,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values(OptimizerKind::muon, OptimizerKind::adamw,
                                                              OptimizerKind::shampoo, OptimizerKind::soap),
                                            ::testing::Values(Precision::fp32, Precision::bf16)),
                         grid_name);

// Tied embeddings (--tie-embeddings): the head reuses embed.weight, so the embedding unit stays
// gathered through the forward and its gradient is the sum of both uses, reduced once. The same
// planner/placement axis as the grid, against the oracle running the same tied model.
class TiedDifferential : public ::testing::TestWithParam<GridParam> {};

TEST_P(TiedDifferential, EveryPlannerAndPlacementBitMatchesTheTiedOracle) {
  const auto [W, optimizer, precision] = GetParam();
  TrainConfig base = base_config(optimizer, precision);
  base.model.tie_embeddings = true;
  const std::vector<Variant> all = variants(base, W);
  report(variants_against_oracle(base, W, all), summary("tied", W, base, all.size()));
}

INSTANTIATE_TEST_SUITE_P(Tied, TiedDifferential,
                         ::testing::Combine(::testing::Values(3, 5),
                                            ::testing::Values(OptimizerKind::muon, OptimizerKind::adamw,
                                                              OptimizerKind::shampoo, OptimizerKind::soap),
                                            ::testing::Values(Precision::fp32)),
                         grid_name);
INSTANTIATE_TEST_SUITE_P(TiedBf16, TiedDifferential,
                         ::testing::Combine(::testing::Values(2),
                                            ::testing::Values(OptimizerKind::muon, OptimizerKind::adamw,
                                                              OptimizerKind::shampoo, OptimizerKind::soap),
                                            ::testing::Values(Precision::bf16)),
                         grid_name);

// The ungated MLP of the bench32 preset (two up projections concatenated, GELU, one down): a
// block shape the simulator prices; the same planner/placement axis against the oracle.
class UngatedDifferential : public ::testing::TestWithParam<GridParam> {};

TEST_P(UngatedDifferential, EveryPlannerAndPlacementBitMatchesTheOracle) {
  const auto [W, optimizer, precision] = GetParam();
  TrainConfig base = base_config(optimizer, precision);
  base.model.gated_mlp = false;
  const std::vector<Variant> all = variants(base, W);
  report(variants_against_oracle(base, W, all), summary("ungated", W, base, all.size()));
}

INSTANTIATE_TEST_SUITE_P(Ungated, UngatedDifferential,
                         ::testing::Combine(::testing::Values(3), ::testing::Values(OptimizerKind::muon),
                                            ::testing::Values(Precision::fp32, Precision::bf16)),
                         grid_name);

// Mixture of experts (--experts 4 --top-k 2): every block's MLP routed over 3-D expert tensors cut
// into expert ranges (0: one per rank while experts last, 1: whole, 2), the per-slice matrix
// optimizers stepping each rank's experts. W 3 is plain MoE; W 5 keeps block 0 dense and adds a
// shared expert. The planner/placement axis as the grid, each planner with another range count.
class MoeDifferential : public ::testing::TestWithParam<GridParam> {};

TEST_P(MoeDifferential, EveryPlannerRangeCountAndPlacementBitMatchesTheMoeOracle) {
  const auto [W, optimizer, precision] = GetParam();
  TrainConfig base = base_config(optimizer, precision);
  base.model.experts = 4, base.model.top_k = 2, base.model.moe_intermediate = 32;
  base.steps = kSteps / 2;  // roots and eigenbases still refreshed twice
  if (W == 5) base.model.first_dense = 1, base.model.shared_experts = 1;
  std::vector<Variant> all = variants(base, W);
  const int ranges[] = {0, 2, 1};
  for (size_t i = 0; i < all.size(); ++i) {
    all[i].planner.expert_ranges = ranges[i % 3];
    all[i].name += ", expert ranges " + std::to_string(ranges[i % 3]);
  }
  // The default plan cuts every expert tensor over several ranks.
  const OwnershipPlan plan = make_plan(TransformerModel(base.model).spec(), W, base.planner);
  int split = 0;
  for (const MatrixShard& s : plan.shards()) split += s.role == Role::expert_range && s.slices.size() > 1;
  EXPECT_EQ(split, W == 5 ? 3 : 6) << "expert tensors cut into more than one range";
  report(variants_against_oracle(base, W, all), summary("moe", W, base, all.size()));
}

INSTANTIATE_TEST_SUITE_P(Moe, MoeDifferential,
                         ::testing::Combine(::testing::Values(3, 5),
                                            ::testing::Values(OptimizerKind::muon, OptimizerKind::adamw,
                                                              OptimizerKind::shampoo, OptimizerKind::soap),
                                            ::testing::Values(Precision::fp32)),
                         grid_name);
INSTANTIATE_TEST_SUITE_P(MoeBf16, MoeDifferential,
                         ::testing::Combine(::testing::Values(3), ::testing::Values(OptimizerKind::muon),
                                            ::testing::Values(Precision::bf16)),
                         grid_name);

}  // namespace
}  // namespace mfsdp

namespace mfsdp {
namespace {

// The comparison itself must see a one-ULP change anywhere, and a changed loss.
TEST(TrajectoryComparison, SeesOneUlpInOneParameterAtOneStep) {
  Trajectory a;
  for (int s = 0; s < 4; ++s) {
    a.local_losses.push_back(1.0 + s);
    a.params.push_back({{"w", at::full({3, 3}, 0.5 + s, at::kFloat)}, {"b", at::full({3}, 1.0, at::kFloat)}});
  }
  Trajectory b = a;
  for (auto& step : b.params)
    for (auto& [name, t] : step) t = t.clone();
  EXPECT_TRUE(compare(a, b).bitwise_equal);
  b.params[2].at("w").view({-1})[4] = std::nextafter(2.5f, 3.0f);
  Comparison c = compare(a, b);
  EXPECT_FALSE(c.bitwise_equal);
  EXPECT_EQ(c.first_bad_step, 3);
  EXPECT_EQ(c.first_bad, "w");
  EXPECT_EQ(c.max_ulp, 1u);
  Trajectory d = a;
  d.local_losses[1] = std::nextafter(2.0, 3.0);
  EXPECT_EQ(compare(a, d).first_bad, "loss");
}

// A failure names every parameter that differs at its first step, and the ratio of the two updates
// there: a step 2.8e-4 larger everywhere (the stop-44 signature) reads as a ratio of 1.00028 on
// every element, a gradient difference would not. Step 1 reads its "before" from initial_params.
TEST(TrajectoryComparison, ReportsEveryParameterAndTheUpdateRatioAtTheFirstDifferingStep) {
  Trajectory a;
  a.initial_params = {{"w", at::full({4}, 1.0, at::kFloat)}, {"b", at::full({2}, 2.0, at::kFloat)}};
  a.local_losses = {1.0, 1.0};
  a.params.push_back({{"w", at::full({4}, 0.5, at::kFloat)}, {"b", at::full({2}, 1.0, at::kFloat)}});
  a.params.push_back({{"w", at::full({4}, 0.25, at::kFloat)}, {"b", at::full({2}, 0.5, at::kFloat)}});
  Trajectory b = a;
  b.params[0] = {{"w", at::full({4}, 1.0 - 0.5 * 1.00028, at::kFloat)}, {"b", at::full({2}, 2.0 - 1.00028, at::kFloat)}};
  b.params[1] = {{"w", at::full({4}, 0.2, at::kFloat)}, {"b", at::full({2}, 0.5, at::kFloat)}};
  const Comparison c = compare(a, b);
  EXPECT_EQ(c.first_bad_step, 1);
  EXPECT_NE(c.step_report.find("b: 2 of 2 differ"), std::string::npos) << c.step_report;
  EXPECT_NE(c.step_report.find("w: 4 of 4 differ"), std::string::npos) << c.step_report;
  EXPECT_NE(c.step_report.find("update ratio [1.00028, 1.00028]"), std::string::npos) << c.step_report;
  EXPECT_EQ(c.step_report.find("0.2"), std::string::npos) << "only the first differing step: " << c.step_report;
  Trajectory no_initial = b;
  no_initial.initial_params.clear();
  EXPECT_EQ(compare(a, no_initial).step_report.find("update ratio"), std::string::npos);
}

}  // namespace
}  // namespace mfsdp

namespace mfsdp {
namespace {

// Fast mode (native reduce, any order) is not bitwise: it is held to the tolerance model of
// harness/trajectory.h (fast_tolerance), the one `mfsdp verify --fast` applies.
class FastMode : public ::testing::TestWithParam<GridParam> {};

TEST_P(FastMode, StaysWithinTheToleranceModel) {
  const auto [W, optimizer, precision] = GetParam();
  const FastTolerance tol = fast_tolerance(optimizer, precision == Precision::bf16 ? c10::kBFloat16 : c10::kFloat);
  TrainConfig oracle_config = base_config(optimizer, precision);
  oracle_config.steps = kFastToleranceSteps;
  TrainConfig fast = oracle_config;
  fast.runtime.reduce = ReduceMode::fast;
  // Under bf16 compute the fast mode sums natively in bf16 on the wire (half the bytes); the
  // oracle's deterministic fp32 accumulation is the control.
  if (precision == Precision::bf16) fast.runtime.precision.reduce_dtype = c10::kBFloat16;
  std::mutex mutex;
  FastDeviation worst;
  RanksOptions ranks;
  ranks.world_size = W;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    const Trajectory control = run_oracle(ctx, oracle_config);
    const Trajectory experiment = run_recorded(ctx, fast);
    const FastDeviation d = fast_deviation(control, experiment);
    std::lock_guard<std::mutex> lock(mutex);
    worst.max_param_abs = std::max(worst.max_param_abs, d.max_param_abs);
    worst.max_loss_rel = std::max(worst.max_loss_rel, d.max_loss_rel);
  });
  std::printf("fast mode W=%d %s: max |param diff| %.3g (bound %.3g), max relative loss diff %.3g (bound %.3g)\n", W,
              to_string(optimizer), worst.max_param_abs, tol.max_param_abs, worst.max_loss_rel, tol.max_loss_rel);
  EXPECT_LE(worst.max_param_abs, tol.max_param_abs);
  EXPECT_LE(worst.max_loss_rel, tol.max_loss_rel);
}

INSTANTIATE_TEST_SUITE_P(Tolerance, FastMode,
                         ::testing::Combine(::testing::Values(3, 5),
                                            ::testing::Values(OptimizerKind::muon, OptimizerKind::adamw,
                                                              OptimizerKind::shampoo, OptimizerKind::soap),
                                            ::testing::Values(Precision::fp32, Precision::bf16)),
                         grid_name);

}  // namespace
}  // namespace mfsdp

namespace mfsdp {
namespace {

// Parameter groups (torch.optim style, by glob): the owner runtime and the all-to-all baseline
// apply them exactly like the oracle, and a group with lr 0 freezes its parameters.
TEST(ParamGroups, BitMatchTheOracleAndLrZeroFreezes) {
  TrainConfig base = base_config(OptimizerKind::muon);
  base.steps = 6;
  base.runtime.groups = {param_group_from_string("layers.0.*:lr=0"), param_group_from_string("*norm*:wd=0.5:lr=0.01")};
  const ParamMap init = TransformerModel(base.model).init(base.seed);
  std::mutex mutex;
  std::vector<std::string> failures;
  RanksOptions ranks;
  ranks.world_size = 3;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    const Trajectory control = run_oracle(ctx, base);
    for (Placement p : {Placement::owner, Placement::alltoall, Placement::zero1}) {
      TrainConfig c = base;
      apply_placement(p, c);
      const Comparison cmp = compare(control, run_recorded(ctx, c));
      std::lock_guard<std::mutex> lock(mutex);
      if (!cmp.bitwise_equal) failures.push_back(std::string(to_string(p)) + ": " + cmp.first_bad + " " + cmp.detail);
    }
    std::lock_guard<std::mutex> lock(mutex);
    int frozen = 0, moved = 0;
    for (const auto& [name, value] : control.params.back()) {
      const bool equal = at::equal(value, init.at(name));
      if (name.rfind("layers.0.", 0) == 0) {
        if (!equal) failures.push_back(name + " moved with lr 0");
        ++frozen;
      } else if (!equal) {
        ++moved;
      }
    }
    if (frozen == 0 || moved == 0) failures.push_back("the groups froze nothing or everything");
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace mfsdp
