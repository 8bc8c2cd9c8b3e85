// Activation checkpointing (docs/recompute.md): each block recomputed in backward on its revived
// buffer. Bitwise equal to the same run storing its activations and to the oracle in every mode
// that claims it, with the same unshard calls and bytes; each block's forward runs twice and the
// embedding's and head's once; refused where it cannot run.
#include "core/dist/ranks.h"
#include "core/plan/planner.h"
#include "core/runtime/owner_runtime.h"
#include "core/train/data.h"
#include "core/train/model.h"
#include "core/util/errors.h"
#include "harness/placements.h"
#include "harness/trajectory.h"
#include "testing/fixtures.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace mfsdp {
namespace {

struct Case {
  std::string name;
  int W = 3;
  Placement placement = Placement::owner;
  OptimizerKind optimizer = OptimizerKind::muon;
  bool bf16 = false, experts = false, tied = false, prefetch = false;
  int replicas = 1;
  StepMode step_mode = StepMode::replicated;
  int K = 1;
  GradReduce grad_reduce = GradReduce::per_microbatch;
  double max_norm = 0;
  bool schedule = false;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

TrainConfig config_for(const Case& c) {
  TrainConfig t = tiny_config({.steps = 4, .batch = c.K > 1 ? 1 : 2, .seed = 3, .optimizer = c.optimizer, .test_rates = true,
                               .precondition_frequency = 2});
  if (c.bf16) t.runtime.precision.param_dtype = c10::kBFloat16;
  if (c.experts) t.model.experts = 4, t.model.top_k = 2, t.model.moe_intermediate = 32;
  t.model.tie_embeddings = c.tied;
  t.runtime.prefetch = c.prefetch;
  t.runtime.replicas = c.replicas;
  t.runtime.step_mode = c.step_mode;
  t.grad_accum = c.K;
  t.runtime.grad_reduce = c.grad_reduce;
  t.runtime.max_norm = c.max_norm;
  if (c.schedule) {
    t.lr_schedule.kind = LrScheduleKind::warmup_cosine;
    t.lr_schedule.warmup_steps = 1;
    t.lr_schedule.decay_steps = 2;
  }
  apply_placement(c.placement, t);
  return t;
}

class RecomputeRuns : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeRuns, BitMatchesTheStoringRunAndTheOracleWithTheSameUnshards) {
  const Case& c = GetParam();
  const TrainConfig storing = config_for(c);
  TrainConfig recomputing = storing;
  recomputing.runtime.activation_checkpointing = true;
  std::mutex mutex;
  std::vector<std::string> failures;
  RanksOptions ranks;
  ranks.world_size = c.W;
  ranks.timeout = std::chrono::seconds(120);
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    const Trajectory oracle = run_oracle(ctx, storing), stored = run_recorded(ctx, storing), recomputed = run_recorded(ctx, recomputing);
    std::lock_guard<std::mutex> lock(mutex);
    const std::string who = "rank " + std::to_string(ctx.rank) + ": ";
    for (const auto& [what, control] : {std::pair{"the storing run", &stored}, std::pair{"the oracle", &oracle}}) {
      const Comparison cmp = compare(*control, recomputed);
      if (!cmp.bitwise_equal)
        failures.push_back(who + "vs " + what + ": step " + std::to_string(cmp.first_bad_step) + ", " + cmp.first_bad + " (" +
                           cmp.detail + ")");
    }
    const PhaseCounters& a = stored.last_step_bytes[phase_index(Phase::unshard)];
    const PhaseCounters& b = recomputed.last_step_bytes[phase_index(Phase::unshard)];
    if (a.calls != b.calls || a.bytes_recv != b.bytes_recv || a.bytes_sent != b.bytes_sent || a.calls == 0)
      failures.push_back(who + "unshard (with revives) " + std::to_string(a.calls) + " calls, " + std::to_string(a.bytes_recv) +
                         " bytes received storing; " + std::to_string(b.calls) + " calls, " + std::to_string(b.bytes_recv) +
                         " recomputing");
  });
  for (const std::string& f : failures) ADD_FAILURE() << c.name << ": " << f;
}

INSTANTIATE_TEST_SUITE_P(
    Modes, RecomputeRuns,
    ::testing::Values(Case{.name = "W3_owner_muon"}, Case{.name = "W5_owner_shampoo", .W = 5, .optimizer = OptimizerKind::shampoo},
                      Case{.name = "W3_owner_soap", .optimizer = OptimizerKind::soap},
                      Case{.name = "W5_owner_adamw", .W = 5, .optimizer = OptimizerKind::adamw},
                      Case{.name = "W3_reconstruct_muon", .placement = Placement::reconstruct},
                      Case{.name = "W3_alltoall_muon", .placement = Placement::alltoall},
                      Case{.name = "W5_owner_muon_bf16", .W = 5, .bf16 = true},
                      Case{.name = "W3_owner_muon_experts", .experts = true},
                      Case{.name = "W3_owner_muon_tied_prefetch", .tied = true, .prefetch = true},
                      Case{.name = "W6_owner_muon_R2_replicated", .W = 6, .replicas = 2},
                      Case{.name = "W6_owner_soap_R2_dedup", .W = 6, .optimizer = OptimizerKind::soap, .replicas = 2,
                           .step_mode = StepMode::dedup},
                      Case{.name = "W5_owner_muon_K4_deferred_clip_schedule", .W = 5, .K = 4, .grad_reduce = GradReduce::deferred,
                           .max_norm = 0.5, .schedule = true},
                      Case{.name = "W3_owner_muon_bf16_K2_per_microbatch_clip", .bf16 = true, .K = 2, .max_norm = 0.5}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Each block's forward runs twice (forward, then the recompute in backward), the embedding's and
// the head's once; the runtime's units end the step sharded, and the step is the storing one's.
TEST(RecomputeOnce, EachBlockRunsTwiceAndTheOthersOnce) {
  const TrainConfig base = tiny_config({.steps = 1, .batch = 2, .seed = 3, .optimizer = OptimizerKind::muon, .test_rates = true});
  const TransformerModel model(base.model);
  const ParamMap init = model.init(base.seed);
  const ByteCorpus corpus = ByteCorpus::load();
  std::mutex mutex;
  std::vector<std::string> failures;
  RanksOptions ranks;
  ranks.world_size = 2;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    const OwnershipPlan plan = make_plan(model.spec(), 2, base.planner);
    Communicator comm(ctx.backend);
    OwnerRuntime rt(plan, comm, base.runtime, init);
    auto [tokens, targets] = corpus.batch(base.seed, 0, ctx.rank, 2, base.seq);
    std::vector<int> runs(rt.num_units(), 0);
    at::Tensor x = tokens;
    for (int u = 0; u < rt.num_units(); ++u) {
      const bool block = u >= 1 && u <= base.model.layers;
      if (block) {
        x = rt.recomputed_forward(u, x, [&, u](const ParamMap& p, const at::Tensor& in) {
          ++runs[u];
          return model.unit_forward(u, in, p, at::Tensor());
        });
      } else {
        ++runs[u];
        x = model.unit_forward(u, x, rt.unshard(u), targets);
      }
      x = rt.after_forward(u, x);
    }
    x.backward();
    std::string seen;
    bool ok = true;
    for (int u = 0; u < rt.num_units(); ++u) {
      const int want = (u >= 1 && u <= base.model.layers) ? 2 : 1;
      ok = ok && runs[u] == want && rt.unit(u).state() == UnitState::sharded;
      seen += " " + std::to_string(runs[u]);
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (!ok) failures.push_back("rank " + std::to_string(ctx.rank) + ": forward runs per unit" + seen);
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

TEST(RecomputeErrors, ReplicasAndTiedUnitsAreRefusedNamingThem) {
  TrainConfig c = tiny_config({.steps = 1});
  c.runtime.activation_checkpointing = true;
  for (Placement p : {Placement::zero1, Placement::ddp}) {
    const std::string e = error_of([&] { apply_placement(p, c); });
    EXPECT_NE(e.find(std::string("placement ") + to_string(p) + " holds full replicas and does not recompute"), std::string::npos) << e;
  }
  c.model.tie_embeddings = true;
  const TransformerModel model(c.model);
  RanksOptions one;
  one.world_size = 1;
  run_ranks_as_threads(one, [&](RankContext& ctx) {
    const OwnershipPlan plan = make_plan(model.spec(), 1, c.planner);
    Communicator comm(ctx.backend);
    OwnerRuntime rt(plan, comm, c.runtime, model.init(0));
    const std::string e = error_of([&] {
      rt.recomputed_forward(0, at::zeros({1, 4}, at::kLong), [](const ParamMap&, const at::Tensor& x) { return x; });
    });
    EXPECT_NE(e.find("lends or borrows tied parameters and cannot be recomputed"), std::string::npos) << e;
  });
}

}  // namespace
}  // namespace mfsdp
