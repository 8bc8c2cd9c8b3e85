// The designed differential grid (regression/grid/, docs/testing.md "The designed grid"): each row
// of the committed covering array (regression/grid/array.json, from design.py) is one training of
// the tiny model, run next to the DDP oracle on W thread ranks and compared with memcmp equality:
// every parameter after every step and every rank's loss. The array holds every feasible pair of
// factor values and every triple of the risky sub-models, so a factor added to design.py's table
// reaches every other factor here without a new loop.
#include "core/dist/ranks.h"
#include "core/plan/planner.h"
#include "core/util/enum_names.h"
#include "core/train/model.h"
#include "harness/placements.h"
#include "core/util/tensor_compare.h"
#include "harness/trajectory.h"
#include "testing/fixtures.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <random>

namespace mfsdp {
namespace {

constexpr int kSteps = 12;  // Shampoo and SOAP refresh every 5 steps: 3 refreshes (2 with experts or accumulation)

struct Row {
  int id = 0, W = 1;
  std::string mesh, step_mode, optimizer, precision, reduce, placement, planner, tail, prefetch, comm_groups, mlp, tied,
      experts, batched_ns, ns_variant, grad_reduce, clip, recompute, schedule, resume, qk_clip;
  int expert_ranges = 0, grad_accum = 1, kv_heads = 4;
};

std::vector<Row> load_rows() {
  std::ifstream in(MFSDP_GRID_ARRAY);
  if (!in) return {};  // the test below then fails naming the file
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<Row> rows;
  for (const auto& j : doc.at("rows")) {
    Row r;
    r.id = j.at("id");
    r.W = j.at("W");
    r.mesh = j.at("mesh"), r.step_mode = j.at("step_mode"), r.optimizer = j.at("optimizer");
    r.precision = j.at("precision"), r.reduce = j.at("reduce"), r.placement = j.at("placement");
    r.planner = j.at("planner"), r.tail = j.at("tail"), r.prefetch = j.at("prefetch"), r.mlp = j.at("mlp");
    r.comm_groups = j.at("comm_groups");
    r.tied = j.at("tied"), r.experts = j.at("experts"), r.batched_ns = j.at("batched_ns");
    r.ns_variant = j.at("ns_variant");
    r.expert_ranges = j.at("expert_ranges");
    r.grad_accum = j.at("grad_accum"), r.grad_reduce = j.at("grad_reduce");
    r.clip = j.at("clip");
    r.recompute = j.at("recompute"), r.schedule = j.at("schedule"), r.resume = j.at("resume");
    r.qk_clip = j.at("qk_clip"), r.kv_heads = j.at("kv_heads");
    rows.push_back(r);
  }
  return rows;
}

// How gtest prints a row (instead of its bytes).
void PrintTo(const Row& r, std::ostream* os) { *os << "array row " << r.id; }

int replicas(const Row& r) {
  if (r.mesh == "r2") return 2;
  if (r.mesh == "s2") return r.W / 2;
  if (r.mesh == "rW") return r.W;
  return 1;
}

// The row as a training configuration, through the same named settings `mfsdp train` parses.
TrainConfig config_for(const Row& r) {
  TrainConfig c = tiny_config({.steps = kSteps, .seed = 11, .optimizer = optimizer_kind_from_string(r.optimizer),
                               .test_rates = true, .precondition_frequency = 5});
  if (r.precision == "bf16") c.runtime.precision.param_dtype = c10::kBFloat16;
  if (r.reduce == "bf16") c.runtime.precision.reduce_dtype = c10::kBFloat16;
  c.runtime.replicas = replicas(r);
  c.runtime.step_mode = value_in(kStepModeNames, r.step_mode).value();
  c.model.gated_mlp = r.mlp == "gated";
  c.model.tie_embeddings = r.tied == "yes";
  if (r.experts != "none") {
    c.model.experts = 4, c.model.top_k = 2, c.model.moe_intermediate = 32;
    c.steps = kSteps / 2;  // roots and eigenbases still refreshed twice
    if (r.experts == "moe_shared") c.model.first_dense = 1, c.model.shared_experts = 1;
  }
  c.planner.expert_ranges = r.expert_ranges;
  c.runtime.muon.batched_ns = r.batched_ns == "on";
  c.runtime.muon.ns_variant = ns_variant_from_string(r.ns_variant);
  c.runtime.muon.ns_steps = ns_steps_of(ns_variant_info(c.runtime.muon.ns_variant), c.runtime.muon.ns_steps);
  c.planner.tail_policy = tail_policy_from_string(r.tail);
  if (r.planner == "explicit") {
    c.planner.planner = PlannerKind::explicit_assignment;
    std::mt19937 rng(1000 + 31 * r.id);
    const int S = r.W / c.runtime.replicas;
    for (const PlanItem& item : plan_items(TransformerModel(c.model).spec(), c.planner))
      c.planner.explicit_owners[item.key] = static_cast<int>(rng() % S);
  } else {
    c.planner.planner = planner_kind_from_string(r.planner);
  }
  apply_placement(placement_from_string(r.placement), c);
  c.runtime.prefetch = r.prefetch == "on";
  c.runtime.comm_groups = value_in(kCommGroupsNames, r.comm_groups).value();
  // Accumulation: micro-batches of one sequence (K = 2 sees the tokens of the plain rows' batch of
  // 2), for half the steps (roots and eigenbases still refreshed), so that a row costs about what a
  // plain one does.
  c.grad_accum = r.grad_accum;
  if (r.grad_accum > 1) c.batch = 1, c.steps = kSteps / 2;
  c.runtime.grad_reduce = r.grad_reduce == "deferred" ? GradReduce::deferred : GradReduce::per_microbatch;
  // Clipping at 0.5: below the tiny model's gradient norms at the test rates (about 1 to 2), so
  // every step scales.
  if (r.clip == "on") c.runtime.max_norm = 0.5;
  c.runtime.activation_checkpointing = r.recompute == "on";
  // Grouped-query attention over the model's 4 query heads, and QK-clip at 0.05: below the narrowed
  // tiny model's largest logits at the test rates, so heads are clipped (test_qk_clip.cpp).
  c.model.kv_heads = r.kv_heads;
  if (r.qk_clip == "on") c.qk_clip_tau = 0.05;
  // Schedules with explicit lengths (so a run cut at the middle step has the same schedule): the
  // warm-up, the decay and the floor all inside the shortest rows' 6 steps.
  if (r.schedule == "warmup_cosine") {
    c.lr_schedule.kind = LrScheduleKind::warmup_cosine;
    c.lr_schedule.warmup_steps = 1, c.lr_schedule.decay_steps = 3, c.lr_schedule.min_lr_ratio = 0.1;
  } else if (r.schedule == "wsd") {
    c.lr_schedule.kind = LrScheduleKind::wsd;
    c.lr_schedule.warmup_steps = 1, c.lr_schedule.stable_steps = 1, c.lr_schedule.decay_steps = 2;
  }
  return c;
}

std::string row_name(const ::testing::TestParamInfo<Row>& info) {
  const Row& r = info.param;
  std::string n = "row" + std::to_string(r.id) + "_W" + std::to_string(r.W) + "_" + r.placement + "_" + r.optimizer;
  if (r.mesh != "flat") n += "_" + r.mesh + "_" + r.step_mode;
  if (r.precision == "bf16") n += r.reduce == "bf16" ? "_bf16_reduce_bf16" : "_bf16";
  if (r.experts != "none") n += "_" + r.experts;
  if (r.tied == "yes") n += "_tied";
  if (r.ns_variant != "torch") {  // gtest names take no '-'
    std::string v = r.ns_variant;
    std::replace(v.begin(), v.end(), '-', '_');
    n += "_ns_" + v;
  }
  if (r.grad_accum > 1) n += "_K" + std::to_string(r.grad_accum) + (r.grad_reduce == "deferred" ? "_deferred" : "_per_microbatch");
  if (r.clip == "on") n += "_clip";
  if (r.recompute == "on") n += "_recompute";
  if (r.schedule != "constant") n += "_" + r.schedule;
  if (r.resume == "mid") n += "_resumed";
  if (r.kv_heads != 4) n += "_kv" + std::to_string(r.kv_heads);
  if (r.qk_clip == "on") n += "_qk_clip";
  if (r.comm_groups == "model") n += "_model_groups";
  return n;
}

// The first recorded parameter in which two ranks' trajectories differ ("" if none).
std::string first_param_difference(const Trajectory& a, const Trajectory& b) {
  if (a.params.size() != b.params.size()) return "different numbers of steps";
  for (size_t s = 0; s < a.params.size(); ++s)
    for (const auto& [name, t] : a.params[s]) {
      const auto it = b.params[s].find(name);
      if (it == b.params[s].end()) return "step " + std::to_string(s + 1) + ": " + name + " missing";
      const TensorDiff d = diff(it->second, t);
      if (!d.bitwise_equal) return "step " + std::to_string(s + 1) + ": " + name + " (" + describe(d, it->second, t) + ")";
    }
  return "";
}

class GridRow : public ::testing::TestWithParam<Row> {};

TEST_P(GridRow, BitMatchesTheOracle) {
  const Row& r = GetParam();
  const TrainConfig config = config_for(r);
  std::mutex mutex;
  std::vector<std::string> failures;
  RanksOptions ranks;
  ranks.world_size = r.W;
  ranks.timeout = std::chrono::seconds(120);
  // Every rank records every parameter in full after every step, so on each side the ranks must
  // agree among themselves too; which side's ranks disagree tells where a difference came from.
  std::vector<Trajectory> oracles(r.W), runtimes(r.W);
  TempDir scratch("grid_row" + std::to_string(r.id));  // resume rows: the checkpoint of the first half
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    Trajectory& oracle = oracles[ctx.rank];
    Trajectory& runtime = runtimes[ctx.rank];
    oracle = run_oracle(ctx, config);
    if (r.resume == "mid") {
      // Checkpointed after the middle step and resumed from there: the two halves, end to end.
      const int mid = config.steps / 2;
      TrainConfig first = config;
      first.steps = mid;
      first.checkpoint_dir = scratch.path();
      first.checkpoint_every = mid;
      runtime = run_recorded(ctx, first);
      TrainConfig rest = config;
      rest.resume_from = scratch.path();
      const Trajectory tail = run_recorded(ctx, rest);
      append(runtime, tail);
    } else {
      runtime = run_recorded(ctx, config);
    }
    const Comparison cmp = compare(oracle, runtime);
    if (!cmp.bitwise_equal) {
      std::lock_guard<std::mutex> lock(mutex);
      failures.push_back("rank " + std::to_string(ctx.rank) + ": first difference at step " +
                         std::to_string(cmp.first_bad_step) + " in " + cmp.first_bad + " (" + cmp.detail + "); max |diff| " +
                         std::to_string(cmp.max_abs_diff) + ", max ULP " + std::to_string(cmp.max_ulp) +
                         "; at that step: " + cmp.step_report);
    }
  });
  for (const auto& [side, all] : {std::pair{"oracle", &oracles}, std::pair{"runtime", &runtimes}})
    for (int rank = 1; rank < r.W; ++rank) {
      const std::string d = first_param_difference((*all)[0], (*all)[rank]);
      if (!d.empty()) failures.push_back(std::string(side) + ": rank " + std::to_string(rank) + " differs from rank 0: " + d);
    }
  for (const auto& f : failures) ADD_FAILURE() << "row " << r.id << ": " << f;
  if (failures.empty())
    std::printf("row %d (W=%d %s %s, mesh %s %s, %s reduce %s, planner %s/%s, prefetch %s, groups %s, mlp %s, tied %s, experts %s "
                "ranges %d, batched NS %s, NS variant %s, %d micro-batch(es) %s, clip %s, recompute %s, schedule %s, resume %s, kv heads %d, qk-clip %s): %d steps "
                "bit-identical to the oracle\n",
                r.id, r.W, r.placement.c_str(), r.optimizer.c_str(), r.mesh.c_str(), r.step_mode.c_str(), r.precision.c_str(),
                r.reduce.c_str(), r.planner.c_str(), r.tail.c_str(), r.prefetch.c_str(), r.comm_groups.c_str(), r.mlp.c_str(), r.tied.c_str(),
                r.experts.c_str(), r.expert_ranges, r.batched_ns.c_str(), r.ns_variant.c_str(), r.grad_accum, r.grad_reduce.c_str(), r.clip.c_str(),
                r.recompute.c_str(), r.schedule.c_str(), r.resume.c_str(), r.kv_heads, r.qk_clip.c_str(), config.steps);
}

INSTANTIATE_TEST_SUITE_P(Array, GridRow, ::testing::ValuesIn(load_rows()), row_name);

TEST(GridArray, IsReadable) {
  EXPECT_GT(load_rows().size(), 0u) << "no rows read from " << MFSDP_GRID_ARRAY;
}

}  // namespace
}  // namespace mfsdp
