// QK-clip (docs/qk_clip.md): the rule's scales (sqrt of tau / S per kv group, the grouped-query
// rule), every placement bitwise equal to the oracle that clips the same way (q and k on other
// owners, GQA, HSDP in both step modes, bf16, accumulation with clipping, experts, recompute), with
// heads clipped on some step; the clip changes the trajectory; one MAX all-reduce per step in phase
// qk_clip and none in the owner's step; a non-finite logit goes to the non-finite policy before
// the reduction; a resume continues exactly with nothing saved; bad settings are refused.
#include "core/dist/communicator.h"
#include "core/dist/ranks.h"
#include "core/plan/planner.h"
#include "core/runtime/owner_runtime.h"
#include "core/train/model.h"
#include "core/train/qk_clip.h"
#include "core/util/errors.h"
#include "core/util/files.h"
#include "harness/placements.h"
#include "harness/trajectory.h"
#include "testing/fixtures.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

namespace mfsdp {
namespace {

constexpr double kTau = 0.05;  // below the narrowed tiny model's largest logits at the test rates

TransformerConfig model_with(int64_t kv_heads) {
  TransformerConfig m = preset_config("tiny");
  m.kv_heads = kv_heads;
  return m;
}

QkLogits logits_of(const std::vector<std::vector<float>>& rows) {
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  QkLogits s;
  s.max_logits = at::tensor(flat).view({static_cast<int64_t>(rows.size()), -1});
  return s;
}

// Each kv group's factor is sqrt(tau / S_g), S_g the largest logit of the group's query heads, and
// 1 where S_g <= tau: within an ulp of the float64 value (the spelling's own rounding), so a
// planted wrong exponent (gamma instead of its root) or a per-head instead of a per-group maximum
// is far outside.
TEST(QkClipRule, ScalesAreTheRootOfTauOverTheGroupsLargestLogit) {
  const float tau = 2.0f;
  const QkLogits s = logits_of({{1.0f, 8.0f, 3.0f, 2.0f}, {0.5f, 0.25f, 2.5f, 50.0f}});
  struct Want {
    int64_t kv_heads;
    int64_t layer;
    std::vector<double> scales;
  };
  for (const Want& w : {Want{4, 0, {1, std::sqrt(2.0 / 8), std::sqrt(2.0 / 3), 1}},
                        Want{2, 0, {std::sqrt(2.0 / 8), std::sqrt(2.0 / 3)}},
                        Want{2, 1, {1, std::sqrt(2.0 / 50)}},
                        Want{1, 1, {std::sqrt(2.0 / 50)}}}) {
    TransformerConfig m = model_with(w.kv_heads);
    const QkClip clip(m, tau, at::kCPU);
    const at::Tensor got = clip.scales(s, w.layer);
    ASSERT_EQ(got.numel(), static_cast<int64_t>(w.scales.size()));
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    for (size_t g = 0; g < w.scales.size(); ++g) {
      const double v = got[static_cast<int64_t>(g)].item<double>();
      EXPECT_NEAR(v, w.scales[g], 2e-7 * w.scales[g]) << "kv heads " << w.kv_heads << ", layer " << w.layer << ", group " << g;
      if (w.scales[g] == 1) EXPECT_EQ(v, 1.0);  // unclipped heads are multiplied by exactly 1
    }
  }
}

TEST(QkClipRule, BadSettingsAreRefusedNamingTheFlag) {
  auto said = [](double tau, OptimizerKind k, const TransformerConfig& m) { return error_of([&] { check_qk_clip(tau, k, m); }); };
  const TransformerConfig m = model_with(4);
  for (double tau : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()})
    EXPECT_NE(said(tau, OptimizerKind::muon, m).find("--qk-clip-tau must be a finite number > 0"), std::string::npos) << tau;
  // Checked in double, applied in float32: what float32 rounds to 0, a subnormal or infinity is refused.
  for (double tau : {1e-320, 1e-44, 1e-39, 1e39, 3.5e38})
    EXPECT_NE(said(tau, OptimizerKind::muon, m).find("--qk-clip-tau is applied in float32"), std::string::npos) << tau;
  for (double tau : {static_cast<double>(std::numeric_limits<float>::min()), 1e-30, 1e30,
                     static_cast<double>(std::numeric_limits<float>::max())})
    EXPECT_EQ(said(tau, OptimizerKind::muon, m), "") << tau;
  for (OptimizerKind k : {OptimizerKind::adamw, OptimizerKind::shampoo, OptimizerKind::soap})
    EXPECT_NE(said(1.0, k, m).find("has no QK-clip rule"), std::string::npos) << to_string(k);
  for (OptimizerKind k : {OptimizerKind::muon, OptimizerKind::normuon, OptimizerKind::adamuon}) EXPECT_EQ(said(1.0, k, m), "");
  TransformerConfig mla = preset_config("deepseek-v3");
  EXPECT_NE(said(1.0, OptimizerKind::muon, mla).find("multi-head latent attention"), std::string::npos);
}

struct Case {
  std::string name;
  int W = 5;
  Placement placement = Placement::owner;
  OptimizerKind optimizer = OptimizerKind::muon;
  int64_t kv_heads = 4;
  int K = 1;
  double max_norm = 0;
  bool bf16 = false, experts = false, recompute = false, qkv_bias = false;
  int replicas = 1;
  StepMode step_mode = StepMode::replicated;
  PlannerKind planner = PlannerKind::balanced;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

TrainConfig config_for(const Case& c, double tau = kTau) {
  TrainConfig t = tiny_config({.steps = 6, .batch = c.K > 1 ? 1 : 2, .seed = 5, .optimizer = c.optimizer, .test_rates = true});
  t.model.kv_heads = c.kv_heads;
  t.model.qkv_bias = c.qkv_bias;
  t.qk_clip_tau = tau;
  t.grad_accum = c.K;
  t.runtime.max_norm = c.max_norm;
  t.runtime.activation_checkpointing = c.recompute;
  if (c.bf16) t.runtime.precision.param_dtype = c10::kBFloat16;
  if (c.experts) t.model.experts = 4, t.model.top_k = 2, t.model.moe_intermediate = 32;
  t.runtime.replicas = c.replicas;
  t.runtime.step_mode = c.step_mode;
  t.planner.planner = c.planner;
  apply_placement(c.placement, t);
  return t;
}

class QkClipRuns : public ::testing::TestWithParam<Case> {};

// The statistic and the rescale reach every placement as they reach the oracle: every loss, every
// largest logit, every clipped-head count and every parameter after every step equal bit for bit,
// with heads clipped on some step (so the rescale is exercised, not only the statistic).
TEST_P(QkClipRuns, BitMatchesTheOracle) {
  const Case& c = GetParam();
  const TrainConfig config = config_for(c);
  std::atomic<int64_t> clipped{0};
  const std::vector<std::string> failures =
      oracle_differences(config, c.W, [&](int rank, const TrainResult&, const TrainResult& mine) {
        if (rank == 0)
          for (const StepMetrics& m : mine.steps) clipped += m.qk_clipped_heads;
        return std::string();
      });
  for (const std::string& f : failures) ADD_FAILURE() << c.name << ": " << f;
  EXPECT_GT(clipped.load(), 0) << c.name << ": no head was clipped in " << config.steps << " steps at tau " << kTau;
}

INSTANTIATE_TEST_SUITE_P(
    Placements, QkClipRuns,
    ::testing::Values(Case{.name = "W5_owner_muon"},
                      Case{.name = "W5_owner_muon_gqa2", .kv_heads = 2},
                      Case{.name = "W3_owner_muon_mqa_round_robin", .W = 3, .kv_heads = 1, .planner = PlannerKind::round_robin},
                      Case{.name = "W7_owner_muon_greedy_bytes_bias", .W = 7, .qkv_bias = true, .planner = PlannerKind::greedy_bytes},
                      Case{.name = "W5_owner_muon_bf16", .bf16 = true},
                      Case{.name = "W6_owner_muon_K3_clip_gqa2", .W = 6, .kv_heads = 2, .K = 3, .max_norm = 0.5},
                      Case{.name = "W8_owner_muon_R2_dedup", .W = 8, .replicas = 2, .step_mode = StepMode::dedup},
                      Case{.name = "W6_owner_muon_R2_replicated_gqa2", .W = 6, .kv_heads = 2, .replicas = 2},
                      Case{.name = "W8_owner_muon_R2_dedup_gqa2_bf16", .W = 8, .kv_heads = 2, .bf16 = true, .replicas = 2,
                           .step_mode = StepMode::dedup},
                      Case{.name = "W3_reconstruct_muon_bias", .W = 3, .placement = Placement::reconstruct, .qkv_bias = true},
                      Case{.name = "W5_alltoall_muon_gqa2", .placement = Placement::alltoall, .kv_heads = 2},
                      Case{.name = "W3_zero1_muon", .W = 3, .placement = Placement::zero1},
                      Case{.name = "W3_owner_normuon_experts", .W = 3, .optimizer = OptimizerKind::normuon, .experts = true},
                      Case{.name = "W5_owner_adamuon_recompute", .optimizer = OptimizerKind::adamuon, .recompute = true}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The plans above put the q and k of some head on different owners, so the rescale of one head
// runs on two ranks (and the runs above prove each applies its own rows).
TEST(QkClipOnce, SomePlanPutsTheQAndKOfAHeadOnDifferentOwners) {
  int split = 0;
  for (int W : {3, 5, 7}) {
    const TrainConfig c = config_for(Case{.name = "plan", .W = W});
    const OwnershipPlan plan = make_plan(transformer_spec(c.model), W, c.planner);
    for (int64_t l = 0; l < c.model.layers; ++l) {
      const std::string pre = "layers." + std::to_string(l) + ".attn.";
      split += plan.shard(pre + "q.weight").owner != plan.shard(pre + "k.weight").owner;
    }
  }
  EXPECT_GT(split, 0);
}

// The clip is applied at all (the same run without it ends elsewhere), it counts the heads whose
// group maximum exceeded tau, and the agreement is one MAX all-reduce per step in phase qk_clip of
// (L * H + 1) floats while the owner's optimizer step stays at 0 collectives.
TEST(QkClipOnce, TheClipChangesTheRunAndIsAgreedByOneMaxReducePerStep) {
  RanksOptions ranks;
  ranks.world_size = 3;
  std::vector<std::string> failures;
  std::mutex mutex;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    TrainConfig plain = config_for(Case{.name = "plain", .W = 3});
    plain.qk_clip_tau = 0;
    const TrainConfig clipped = config_for(Case{.name = "clipped", .W = 3});
    const TrainResult a = train_placement(ctx, plain), b = train_placement(ctx, clipped);
    bool differ = false;
    for (const auto& [name, p] : a.final_params) differ = differ || !p.equal(b.final_params.at(name));
    std::string bad;
    if (!differ) bad += " the clip changed no parameter;";
    for (const StepMetrics& m : b.steps) {
      const PhaseCounters& q = m.bytes[phase_index(Phase::qk_clip)];
      const int64_t floats = clipped.model.layers * clipped.model.heads + 1;
      if (q.calls != 1 || q.bytes_sent != floats * 4 * (ctx.world_size - 1))
        bad += " step " + std::to_string(m.step) + ": phase qk_clip " + std::to_string(q.calls) + " calls, " +
               std::to_string(q.bytes_sent) + " bytes;";
      if (m.bytes[phase_index(Phase::optimizer_step)].calls != 0) bad += " the optimizer step communicated;";
      if (!m.qk_max_logit || *m.qk_max_logit <= 0) bad += " no largest logit recorded;";
      if (m.qk_max_logit && (*m.qk_max_logit > kTau) != (m.qk_clipped_heads > 0))
        bad += " step " + std::to_string(m.step) + ": largest logit " + std::to_string(*m.qk_max_logit) + " but " +
               std::to_string(m.qk_clipped_heads) + " heads clipped;";
    }
    for (const StepMetrics& m : a.steps)
      if (m.qk_max_logit || m.bytes[phase_index(Phase::qk_clip)].calls != 0) bad += " the run without QK-clip recorded or reduced logits;";
    std::lock_guard<std::mutex> lock(mutex);
    if (!bad.empty()) failures.push_back("rank " + std::to_string(ctx.rank) + ":" + bad);
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

// A NaN logit on one rank: the reduction never sees it (+inf instead), every rank learns which rank
// had it, the fail policy throws on every rank naming block, head and rank, and skip reports it.
TEST(QkClipOnce, ANonFiniteLogitGoesToTheNonFinitePolicyBeforeTheReduction) {
  RanksOptions ranks;
  ranks.world_size = 3;
  std::vector<std::string> failures;
  std::mutex mutex;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    const TransformerModel model(preset_config("tiny"));
    ParamMap params = model.init(1);
    if (ctx.rank == 1) params.at("layers.1.attn.q.weight").select(0, 9).fill_(std::nan(""));  // row 9: head 0 (head_dim 16)
    const at::Tensor tokens = at::arange(32, at::kLong).view({2, 16}) % 256;
    Communicator comm(ctx.backend);
    std::string bad;
    for (NonFinitePolicy policy : {NonFinitePolicy::fail, NonFinitePolicy::skip}) {
      QkClip clip(model.config(), 1.0, at::kCPU);
      clip.begin_step(model);
      model.loss(tokens, tokens, params);
      QkLogits s;
      const std::string e = error_of([&] { s = clip.agree(comm, model, policy, 3); });
      if (policy == NonFinitePolicy::fail) {
        if (e.find("step 3: QK-clip: the largest attention logit of block 1 head 0 is not finite (rank 1 saw it") == std::string::npos)
          bad += " fail said '" + e + "';";
      } else if (!e.empty() || s.non_finite_rank != 1 || !std::isinf(s.max()) ||
                 !std::isfinite(s.max_logits[0][0].item<double>())) {
        bad += " skip: '" + e + "', rank " + std::to_string(s.non_finite_rank) + ";";
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (!bad.empty()) failures.push_back("rank " + std::to_string(ctx.rank) + ":" + bad);
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

// Nothing is saved: a run checkpointed after step 3 and resumed (at W = 5, and resharded onto W = 3)
// equals the uninterrupted run and the oracle resumed from the same checkpoint, bit for bit, and
// the checkpoint's layout names no QK-clip state.
TEST(QkClipCheckpoints, AResumeContinuesExactlyWithNothingSaved) {
  TempDir root("qk_ckpt");
  const std::string dir = root.path() + "/ck", step_dir = dir + "/step_00000003";
  std::vector<std::string> failures;
  std::mutex mutex;
  auto fail = [&](const std::string& f) {
    std::lock_guard<std::mutex> lock(mutex);
    failures.push_back(f);
  };
  RanksOptions five;
  five.world_size = 5;
  five.timeout = std::chrono::seconds(120);
  run_ranks_as_threads(five, [&](RankContext& ctx) {
    TrainConfig whole = config_for(Case{.name = "whole", .kv_heads = 2});
    whole.record_params = true;
    const TrainResult full = train_placement(ctx, whole);
    TrainConfig first = config_for(Case{.name = "first", .kv_heads = 2});
    first.steps = 3;
    first.checkpoint_dir = dir;
    first.checkpoint_every = 3;
    train_placement(ctx, first);
    TrainConfig rest = config_for(Case{.name = "rest", .kv_heads = 2});
    rest.resume_from = step_dir;
    rest.record_params = true;
    const Trajectory tail = drop_steps(to_trajectory(full), 3);
    const Comparison cmp = compare(tail, to_trajectory(train_placement(ctx, rest)));
    if (!cmp.bitwise_equal)
      fail("W=5 rank " + std::to_string(ctx.rank) + ": step " + std::to_string(cmp.first_bad_step) + ", " + cmp.first_bad + " (" +
           cmp.detail + ")");
  });
  RanksOptions three;
  three.world_size = 3;
  three.timeout = std::chrono::seconds(120);
  run_ranks_as_threads(three, [&](RankContext& ctx) {
    TrainConfig c = config_for(Case{.name = "resharded", .W = 3, .kv_heads = 2});
    c.resume_from = step_dir;
    c.record_params = true;
    TrainConfig oracle = c;
    oracle.placement = Placement::ddp;
    const Comparison cmp = compare(to_trajectory(train_placement(ctx, oracle)), to_trajectory(train_placement(ctx, c)));
    if (!cmp.bitwise_equal)
      fail("W=3 rank " + std::to_string(ctx.rank) + ": step " + std::to_string(cmp.first_bad_step) + ", " + cmp.first_bad + " (" +
           cmp.detail + ")");
  });
  const std::string layout = read_file(step_dir + "/layout.json");
  EXPECT_EQ(layout.find("qk_clip"), std::string::npos) << "the layout names QK-clip state";
  EXPECT_EQ(layout.find("logit"), std::string::npos) << "the layout names QK-clip state";
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace mfsdp
