// Learning-rate schedules (docs/schedules.md): λ's closed forms and their bad input; every
// placement bitwise equal to the oracle under a schedule (with accumulation, clipping, bf16, HSDP
// and experts among the cases); a schedule that is applied at all (the trajectory changes); a
// skipped step takes no optimizer step; and a resume in the warm-up or the decay continues the
// schedule exactly, on the same and on another world size, with --steps extended.
#include "core/dist/ranks.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer_routing.h"
#include "core/util/errors.h"
#include "harness/placements.h"
#include "harness/trajectory.h"
#include "testing/fixtures.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace mfsdp {
namespace {

LrSchedule schedule(LrScheduleKind kind, int64_t warmup, int64_t stable, std::optional<int64_t> decay, double min_ratio) {
  LrSchedule s;
  s.kind = kind, s.warmup_steps = warmup, s.stable_steps = stable, s.decay_steps = decay, s.min_lr_ratio = min_ratio;
  return s;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

TEST(LrLambda, TheClosedFormsAtTheirBoundaries) {
  using K = LrScheduleKind;
  const LrSchedule cos = schedule(K::warmup_cosine, 3, 0, 4, 0.1);
  EXPECT_EQ(lr_lambda(cos, 0), 0.25);  // (t + 1) / (W + 1): never 0 in the warm-up
  EXPECT_EQ(lr_lambda(cos, 2), 0.75);
  EXPECT_EQ(lr_lambda(cos, 3), 1.0);  // the decay's start: cos(0)
  EXPECT_TRUE(same_bits(lr_lambda(cos, 5), 0.1 + (1 - 0.1) * 0.5 * (1.0 + std::cos(3.141592653589793 * 0.5))));
  EXPECT_EQ(lr_lambda(cos, 7), 0.1 + (1 - 0.1) * 0.5 * (1.0 + std::cos(3.141592653589793)));  // the floor, up to cos(π)'s rounding
  EXPECT_EQ(lr_lambda(cos, 7), lr_lambda(cos, 1000));  // held after the decay
  const LrSchedule lin = schedule(K::warmup_linear, 0, 0, 4, 0.2);
  EXPECT_EQ(lr_lambda(lin, 0), 1.0);
  EXPECT_EQ(lr_lambda(lin, 2), 0.2 + (1 - 0.2) * (1.0 - 0.5));
  EXPECT_EQ(lr_lambda(lin, 4), 0.2);
  const LrSchedule wsd = schedule(K::wsd, 2, 3, 2, 0);
  std::vector<double> got;
  for (int t = 0; t < 9; ++t) got.push_back(lr_lambda(wsd, t));
  EXPECT_EQ(got, (std::vector<double>{1.0 / 3, 2.0 / 3, 1, 1, 1, 1, 0.5, 0, 0}));
  EXPECT_EQ(lr_lambda(schedule(K::constant, 0, 0, std::nullopt, 0), 123), 1.0);
  EXPECT_EQ(lr_lambda(schedule(K::constant, 4, 0, std::nullopt, 0), 1), 0.4);
}

// The default decay length comes from the steps of the run that resolves it; once resolved (and
// recorded), λ no longer depends on --steps.
TEST(LrLambda, TheDefaultDecayIsResolvedOnceAndThenIndependentOfSteps) {
  const LrSchedule s = schedule(LrScheduleKind::warmup_cosine, 2, 0, std::nullopt, 0);
  const LrSchedule ten = resolve_decay_steps(s, 10), twenty = resolve_decay_steps(s, 20);
  EXPECT_EQ(*ten.decay_steps, 8);
  EXPECT_EQ(*twenty.decay_steps, 18);
  EXPECT_EQ(*resolve_decay_steps(ten, 20).decay_steps, 8);
  EXPECT_EQ(*resolve_decay_steps(schedule(LrScheduleKind::wsd, 5, 10, std::nullopt, 0), 3).decay_steps, 1);
  // wsd's default decay is what is left after the warm-up and the stable phase (not after the
  // warm-up alone: 20 - 2 - 3, not 18), and its λ reaches the floor at the run's last step.
  const LrSchedule wsd = resolve_decay_steps(schedule(LrScheduleKind::wsd, 2, 3, std::nullopt, 0.25), 20);
  EXPECT_EQ(*wsd.decay_steps, 15);
  EXPECT_EQ(lr_lambda(wsd, 19), 0.25 + 0.75 * (1.0 - 14.0 / 15.0));
  EXPECT_EQ(lr_lambda(wsd, 20), 0.25);
  int64_t taken = -1;
  const LrSchedule back = lr_schedule_from_json(lr_schedule_to_json(ten, 6), &taken);
  EXPECT_EQ(taken, 6);
  EXPECT_EQ(describe(back), describe(ten));
}

TEST(LrLambda, BadSettingsAndRecordsAreRefusedNamingThem) {
  using K = LrScheduleKind;
  auto refused = [](const LrSchedule& s, const std::string& words) {
    const std::string e = error_of([&] { validate(s); });
    EXPECT_NE(e.find(words), std::string::npos) << "said '" << e << "', not '" << words << "'";
  };
  refused(schedule(K::warmup_cosine, -1, 0, 4, 0), "--warmup-steps must be an integer from 0");
  refused(schedule(K::warmup_cosine, 1, 0, 0, 0), "--decay-steps must be at least 1");
  refused(schedule(K::warmup_linear, 1, 0, -3, 0), "--decay-steps must be an integer from 0");
  refused(schedule(K::warmup_linear, 1, 0, 4, 1.5), "--min-lr-ratio must be a number in [0, 1], got 1.5");
  refused(schedule(K::warmup_linear, 1, 0, 4, std::nan("")), "--min-lr-ratio must be a number in [0, 1]");
  refused(schedule(K::warmup_cosine, 1, 2, 4, 0), "--stable-steps is for --lr-schedule wsd");
  refused(schedule(K::constant, 1, 0, 4, 0), "--decay-steps is for a decaying schedule");
  EXPECT_NE(error_of([] { lr_schedule_kind_from_string("cosine"); })
                .find("unknown learning-rate schedule 'cosine' (expected constant, warmup-cosine, warmup-linear or wsd)"),
            std::string::npos);
  nlohmann::json j = lr_schedule_to_json(schedule(K::wsd, 1, 2, 3, 0), 4);
  j["surprise"] = 1;
  EXPECT_NE(error_of([&] { lr_schedule_from_json(j, nullptr); }).find("unknown entry 'surprise'"), std::string::npos);
  j = lr_schedule_to_json(schedule(K::wsd, 1, 2, 3, 0), 4);
  j.erase("steps_taken");
  EXPECT_NE(error_of([&] { lr_schedule_from_json(j, nullptr); }).find("lacks 'steps_taken'"), std::string::npos);
}

struct Case {
  std::string name;
  int W = 5;
  Placement placement = Placement::owner;
  OptimizerKind optimizer = OptimizerKind::muon;
  LrSchedule schedule;
  int K = 1;
  double max_norm = 0;
  bool bf16 = false, experts = false;
  int replicas = 1;
  StepMode step_mode = StepMode::replicated;
  std::string group;  // a parameter group PATTERN:lr=X (its own base rate, scheduled alike)
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

TrainConfig config_for(const Case& c) {
  TrainConfig t = tiny_config({.steps = 6, .batch = c.K > 1 ? 1 : 2, .seed = 5, .optimizer = c.optimizer, .test_rates = true,
                               .precondition_frequency = 2});
  t.lr_schedule = c.schedule;
  t.grad_accum = c.K;
  t.runtime.max_norm = c.max_norm;
  if (c.bf16) t.runtime.precision.param_dtype = c10::kBFloat16;
  if (c.experts) t.model.experts = 4, t.model.top_k = 2, t.model.moe_intermediate = 32;
  t.runtime.replicas = c.replicas;
  t.runtime.step_mode = c.step_mode;
  if (!c.group.empty()) t.runtime.groups.push_back(param_group_from_string(c.group));
  apply_placement(c.placement, t);
  return t;
}

class ScheduleRuns : public ::testing::TestWithParam<Case> {};

// The schedule's λ(t) reaches every optimizer of the runtime and of the oracle alike: equal bit
// for bit, and the factors each step used are the closed form's.
TEST_P(ScheduleRuns, BitMatchesTheOracle) {
  const Case& c = GetParam();
  const TrainConfig config = config_for(c);
  const LrSchedule resolved = resolve_decay_steps(config.lr_schedule, config.steps);
  const std::vector<std::string> failures =
      oracle_differences(config, c.W, [&](int, const TrainResult& a, const TrainResult& b) {
        std::string bad;
        for (size_t s = 0; s < b.steps.size(); ++s)
          if (!same_bits(b.steps[s].lr_factor, lr_lambda(resolved, static_cast<int64_t>(s))) ||
              !same_bits(a.steps[s].lr_factor, b.steps[s].lr_factor))
            bad += "step " + std::to_string(s + 1) + " used lambda " + std::to_string(b.steps[s].lr_factor) + "; ";
        return bad;
      });
  for (const std::string& f : failures) ADD_FAILURE() << c.name << ": " << f;
}

using K = LrScheduleKind;
const LrSchedule kCos = schedule(K::warmup_cosine, 2, 0, 3, 0.1);
const LrSchedule kWsd = schedule(K::wsd, 1, 2, 2, 0);
const LrSchedule kLin = schedule(K::warmup_linear, 2, 0, std::nullopt, 0.05);  // decay left to its default
INSTANTIATE_TEST_SUITE_P(
    Placements, ScheduleRuns,
    ::testing::Values(Case{.name = "W5_owner_muon_cosine", .schedule = kCos},
                      Case{.name = "W5_owner_shampoo_wsd", .optimizer = OptimizerKind::shampoo, .schedule = kWsd},
                      Case{.name = "W3_owner_soap_linear", .W = 3, .optimizer = OptimizerKind::soap, .schedule = kLin},
                      Case{.name = "W5_owner_adamw_linear", .optimizer = OptimizerKind::adamw, .schedule = kLin},
                      Case{.name = "W3_reconstruct_muon_cosine", .W = 3, .placement = Placement::reconstruct, .schedule = kCos},
                      Case{.name = "W3_alltoall_muon_wsd", .W = 3, .placement = Placement::alltoall, .schedule = kWsd},
                      Case{.name = "W3_zero1_muon_cosine", .W = 3, .placement = Placement::zero1, .schedule = kCos},
                      Case{.name = "W5_owner_muon_cosine_K4_clip", .schedule = kCos, .K = 4, .max_norm = 0.5},
                      Case{.name = "W5_owner_muon_cosine_bf16", .schedule = kCos, .bf16 = true},
                      Case{.name = "W3_owner_muon_cosine_experts", .W = 3, .schedule = kCos, .experts = true},
                      Case{.name = "W6_owner_muon_wsd_R2_dedup", .W = 6, .schedule = kWsd, .replicas = 2,
                           .step_mode = StepMode::dedup},
                      Case{.name = "W5_owner_muon_cosine_mlp_group", .schedule = kCos, .group = "layers.*.mlp.*:lr=0.05:wd=0.01"}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// A schedule is applied at all: the same run without it ends elsewhere (so the bitwise cases above
// cannot pass by ignoring it on both sides), and with it the per-step factors are not all 1.
TEST(ScheduleOnce, AScheduleChangesTheTrajectory) {
  RanksOptions ranks;
  ranks.world_size = 2;
  std::vector<std::string> failures;
  std::mutex mutex;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    TrainConfig plain = config_for(Case{.name = "plain", .W = 2, .schedule = LrSchedule{}});
    TrainConfig scheduled = config_for(Case{.name = "cosine", .W = 2, .schedule = kCos});
    const TrainResult a = train_placement(ctx, plain), b = train_placement(ctx, scheduled);
    bool differ = false;
    for (const auto& [name, p] : a.final_params) differ = differ || !p.equal(b.final_params.at(name));
    std::lock_guard<std::mutex> lock(mutex);
    if (!differ) failures.push_back("rank " + std::to_string(ctx.rank) + ": the schedule changed no parameter");
    if (b.steps.front().lr_factor != 1.0 / 3 || a.steps.front().lr_factor != 1.0)
      failures.push_back("rank " + std::to_string(ctx.rank) + ": first factors " + std::to_string(a.steps.front().lr_factor) + ", " +
                         std::to_string(b.steps.front().lr_factor));
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

// t counts optimizer steps taken: a step skipped for non-finite gradients leaves it, and λ, where
// they were. AdamW at lr 1e30 sends every weight to ±1e27 in one step, so every later step's
// gradients are non-finite and skipped under the skip policy.
TEST(ScheduleOnce, ASkippedStepTakesNoOptimizerStep) {
  RanksOptions ranks;
  ranks.world_size = 2;
  std::vector<std::string> failures;
  std::mutex mutex;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    TrainConfig c = config_for(Case{.name = "skip", .W = 2, .optimizer = OptimizerKind::adamw, .schedule = kCos});
    c.steps = 4;
    c.runtime.adamw.lr = 1e30;
    c.runtime.non_finite = NonFinitePolicy::skip;
    const TrainResult r = train_placement(ctx, c);
    std::string seen;
    for (const StepMetrics& m : r.steps)
      seen += " (" + std::string(m.skipped ? "skipped" : "taken") + ", t " + std::to_string(m.optimizer_steps) + ", lambda " +
              std::to_string(m.lr_factor) + ")";
    const bool ok = r.steps.size() == 4 && !r.steps[0].skipped && r.steps[0].optimizer_steps == 1 && r.steps[1].skipped &&
                    r.steps[1].optimizer_steps == 1 && r.steps[3].optimizer_steps == 1 &&
                    r.steps[3].lr_factor == lr_lambda(kCos, 1) && r.steps[1].lr_factor == lr_lambda(kCos, 1);
    std::lock_guard<std::mutex> lock(mutex);
    if (!ok) failures.push_back("rank " + std::to_string(ctx.rank) + ":" + seen);
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

// A checkpoint in the warm-up (after step 1 of warm-up 2) and one in the decay (after step 4):
// resumed at the same W, the rest equals the uninterrupted run bit for bit; resumed at W = 3 (a
// reshard) and with --steps extended, the oracle resumed from the same checkpoint is equal and
// every step's λ is the uninterrupted run's (the recorded decay length and t continue).
TEST(ScheduleCheckpoints, ResumeInWarmupOrDecayContinuesExactly) {
  TempDir root("sched_ckpt");
  auto config = [] {
    TrainConfig c = config_for(Case{.name = "resume", .W = 4, .optimizer = OptimizerKind::shampoo,
                                    .schedule = schedule(K::warmup_cosine, 2, 0, std::nullopt, 0.1)});
    c.steps = 6;  // the default decay: 4 steps
    return c;
  };
  std::vector<std::string> failures;
  std::mutex mutex;
  auto fail = [&](const std::string& f) {
    std::lock_guard<std::mutex> lock(mutex);
    failures.push_back(f);
  };
  const LrSchedule resolved = resolve_decay_steps(config().lr_schedule, 6);
  for (int at : {1, 4}) {
    const std::string dir = root.path() + "/at" + std::to_string(at);
    const std::string step_dir = dir + "/step_0000000" + std::to_string(at);
    RanksOptions four;
    four.world_size = 4;
    four.timeout = std::chrono::seconds(120);
    run_ranks_as_threads(four, [&](RankContext& ctx) {
      TrainConfig whole = config();
      whole.record_params = true;
      const TrainResult full = train_placement(ctx, whole);
      // The run checkpointed after step `at` (a crash then: its --steps, so its default decay, unchanged).
      TrainConfig first = config();
      first.checkpoint_dir = dir;
      first.checkpoint_every = at;
      train_placement(ctx, first);
      TrainConfig rest = config();
      rest.resume_from = step_dir;
      rest.record_params = true;
      const Trajectory tail = drop_steps(to_trajectory(full), static_cast<size_t>(at));
      const Comparison cmp = compare(tail, to_trajectory(train_placement(ctx, rest)));
      if (!cmp.bitwise_equal)
        fail("resumed after step " + std::to_string(at) + " at W=4, rank " + std::to_string(ctx.rank) + ": step " +
             std::to_string(cmp.first_bad_step) + ", " + cmp.first_bad + " (" + cmp.detail + ")");
    });
    RanksOptions three;
    three.world_size = 3;
    three.timeout = std::chrono::seconds(120);
    run_ranks_as_threads(three, [&](RankContext& ctx) {
      TrainConfig c = config();
      c.steps = 8;  // extended: the recorded decay length (4) stays
      c.resume_from = step_dir;
      c.record_params = true;
      TrainConfig oracle = c;
      oracle.placement = Placement::ddp;
      const TrainResult o = train_placement(ctx, oracle), r = train_placement(ctx, c);
      const Comparison cmp = compare(to_trajectory(o), to_trajectory(r));
      if (!cmp.bitwise_equal)
        fail("resumed after step " + std::to_string(at) + " at W=3, rank " + std::to_string(ctx.rank) + ": step " +
             std::to_string(cmp.first_bad_step) + ", " + cmp.first_bad + " (" + cmp.detail + ")");
      for (size_t s = 0; s < r.steps.size(); ++s) {
        const int64_t t = at + static_cast<int64_t>(s);
        const double want = lr_lambda(resolved, t);  // the uninterrupted run's (ScheduleRuns checks those are)
        if (!same_bits(r.steps[s].lr_factor, want))
          fail("resumed after step " + std::to_string(at) + " at W=3: step " + std::to_string(t + 1) + " used lambda " +
               std::to_string(r.steps[s].lr_factor) + ", the uninterrupted run " + std::to_string(want));
      }
    });
  }
  EXPECT_EQ(*resolved.decay_steps, 4);
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace mfsdp
