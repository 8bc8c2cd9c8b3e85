// HSDP (docs/hsdp.md): owner sharding inside R replica groups of S ranks, replication across them.
// For each mesh (R, S) in {(2,2), (2,3), (3,2), (2,4), (4,2)} x optimizer x step mode
// {replicated, dedup}, the DDP oracle averaging in the mesh order runs 10 steps once, and every
// variant (planners and tail policies, prefetch, bf16 compute, the reconstruct baseline under
// replicated) must reproduce every parameter after every step and every rank's loss with memcmp
// equality. Counted in the same runs: under dedup each owned matrix is stepped once across the
// whole mesh per step (replicated: R times), the optimizer step itself moves nothing, and the only
// traffic after the step's reduction is the update broadcast.
#include "core/dist/mesh.h"
#include "core/dist/ranks.h"
#include "core/plan/memory_model.h"
#include "core/plan/planner.h"
#include "core/runtime/owner_runtime.h"
#include "core/train/data.h"
#include "harness/placements.h"
#include "harness/trajectory.h"
#include "testing/fixtures.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

namespace mfsdp {
namespace {

constexpr int kSteps = 10;

TrainConfig base_config(OptimizerKind optimizer, int replicas, StepMode mode) {
  TrainConfig c = tiny_config({.steps = kSteps, .seed = 13, .optimizer = optimizer, .test_rates = true, .precondition_frequency = 4});
  c.runtime.replicas = replicas;
  c.runtime.step_mode = mode;
  return c;
}

struct MeshCase {
  int replicas, shard;
  OptimizerKind optimizer;
  StepMode mode;
};

class Hsdp : public ::testing::TestWithParam<MeshCase> {};

TEST_P(Hsdp, EveryVariantBitMatchesTheMeshOrderOracle) {
  const MeshCase mc = GetParam();
  const int W = mc.replicas * mc.shard;
  const TrainConfig base = base_config(mc.optimizer, mc.replicas, mc.mode);
  struct Variant {
    std::string name;
    TrainConfig config;
  };
  std::vector<Variant> variants;
  for (auto [planner, tail] : {std::pair{PlannerKind::balanced, TailPolicy::even}, {PlannerKind::round_robin, TailPolicy::owner},
                               {PlannerKind::greedy_cost, TailPolicy::even}}) {
    TrainConfig c = base;
    c.planner.planner = planner;
    c.planner.tail_policy = tail;
    variants.push_back({std::string(to_string(planner)) + "/" + to_string(tail), c});
  }
  {
    TrainConfig c = base;
    c.runtime.prefetch = true;
    variants.push_back({"balanced/even + prefetch", c});
  }
  if (mc.mode == StepMode::replicated && (mc.optimizer == OptimizerKind::muon || mc.optimizer == OptimizerKind::adamw)) {
    TrainConfig c = base;
    apply_placement(Placement::reconstruct, c);  // FSDP2 HSDP + Muon
    variants.push_back({"placement reconstruct", c});
  }
  TrainConfig bf16 = base;
  bf16.runtime.precision.param_dtype = c10::kBFloat16;

  std::mutex mutex;
  std::vector<std::string> failures;
  auto fail = [&](const std::string& f) {
    std::lock_guard<std::mutex> lock(mutex);
    failures.push_back(f);
  };
  int64_t matrix_steps = 0, owned_matrices = 0;  // summed over the mesh; the plan's
  bool order_matters = false;
  RanksOptions ranks;
  ranks.world_size = W;
  ranks.timeout = std::chrono::seconds(120);
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    const Trajectory control = run_oracle(ctx, base);
    for (const Variant& v : variants) {
      const Comparison cmp = compare(control, run_recorded(ctx, v.config));
      if (!cmp.bitwise_equal)
        fail("rank " + std::to_string(ctx.rank) + ", " + v.name + ": first difference at step " + std::to_string(cmp.first_bad_step) +
             " in " + cmp.first_bad + " (" + cmp.detail + ")");
    }
    {
      const Comparison cmp = compare(run_oracle(ctx, bf16), run_recorded(ctx, bf16));
      if (!cmp.bitwise_equal) fail("rank " + std::to_string(ctx.rank) + ", bf16: " + cmp.first_bad + " (" + cmp.detail + ")");
    }
    // The mesh order is what the runtime follows: the plain rank-order oracle differs somewhere.
    TrainConfig flat = base;
    flat.runtime.replicas = 1;
    if (!compare(control, run_oracle(ctx, flat)).bitwise_equal) {
      std::lock_guard<std::mutex> lock(mutex);
      order_matters = true;
    }
    // One more run, counted: matrix steps over the mesh and the phases of every step.
    TrainConfig counted = base;
    counted.steps = 2;
    train_loop(ctx, counted, [&](const TransformerModel& model, Communicator& comm, const ParamMap& init) {
      return make_runner(model, comm, counted, init, &ctx);
    }, [&](const StepMetrics& m) {
      if (m.bytes[static_cast<int>(Phase::optimizer_step)].calls != 0)
        fail("rank " + std::to_string(ctx.rank) + ": the optimizer step issued collectives");
      const PhaseCounters& up = m.bytes[static_cast<int>(Phase::update_broadcast)];
      if ((mc.mode == StepMode::dedup) != (up.calls > 0))
        fail("rank " + std::to_string(ctx.rank) + ": " + std::to_string(up.calls) + " update broadcasts under " + to_string(mc.mode));
    });
    // One step of a runtime built here, counted: matrix-optimizer steps summed over the mesh.
    {
      const TransformerModel model(counted.model);
      Mesh mesh = make_mesh(ctx, mc.replicas);
      const OwnershipPlan plan = make_plan(model.spec(), mc.shard, counted.planner);
      OwnerRuntime rt(plan, *mesh.shard, counted.runtime, model.init(counted.seed), mesh.replicate.get());
      const ByteCorpus corpus = ByteCorpus::load();
      auto [tokens, targets] = corpus.batch(counted.seed, 0, ctx.rank, counted.batch, counted.seq);
      at::Tensor x = tokens;
      for (int u = 0; u < rt.num_units(); ++u) x = rt.after_forward(u, model.unit_forward(u, x, rt.unshard(u), targets));
      x.backward();
      mesh.shard->reset_counters();
      mesh.replicate->reset_counters();
      rt.step();
      if (mesh.shard->total().calls != 0) fail("rank " + std::to_string(ctx.rank) + ": the step used the shard group");
      const PhaseCounters up = mesh.replicate->counters(Phase::update_broadcast);
      if (mesh.replicate->total().calls != up.calls) fail("rank " + std::to_string(ctx.rank) + ": step traffic besides the update broadcast");
      // The memory model per step mode: this global rank's resident bytes exactly.
      MemoryModelOptions mopts;
      mopts.optimizer = counted.runtime.optimizer;
      mopts.replicas = mc.replicas;
      mopts.step_mode = mc.mode;
      const PlanUsage usage = plan_usage(plan, mopts);
      if (rt.resident_bytes() != usage.ranks[ctx.rank].resident_bytes)
        fail("rank " + std::to_string(ctx.rank) + ": resident " + std::to_string(rt.resident_bytes()) + " bytes, the model says " +
             std::to_string(usage.ranks[ctx.rank].resident_bytes));
      std::lock_guard<std::mutex> lock(mutex);
      matrix_steps += rt.matrix_steps();
      if (ctx.rank == 0)
        for (const MatrixShard& sh : plan.shards()) owned_matrices += sh.role == Role::owned_matrix && sh.kind == ParamKind::hidden_matrix;
    }
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
  // dedup: Newton-Schulz (or the Shampoo/SOAP/AdamW matrix step) once per matrix across the mesh.
  EXPECT_EQ(matrix_steps, (mc.mode == StepMode::dedup ? 1 : mc.replicas) * owned_matrices) << to_string(mc.mode);
  EXPECT_TRUE(order_matters) << "the rank-order oracle equals the mesh-order one: this case cannot see the order";
  if (failures.empty())
    std::printf("HSDP %d x %d %s %s: %zu variants + bf16 x %d steps bit-identical to the mesh-order oracle\n", mc.replicas,
                mc.shard, to_string(mc.optimizer), to_string(mc.mode), variants.size(), kSteps);
}

std::vector<MeshCase> mesh_cases() {
  std::vector<MeshCase> out;
  for (auto [r, s] : {std::pair{2, 2}, {2, 3}, {3, 2}, {2, 4}, {4, 2}})
    for (OptimizerKind o : {OptimizerKind::muon, OptimizerKind::adamw, OptimizerKind::shampoo, OptimizerKind::soap})
      for (StepMode m : {StepMode::replicated, StepMode::dedup}) out.push_back({r, s, o, m});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Meshes, Hsdp, ::testing::ValuesIn(mesh_cases()), [](const ::testing::TestParamInfo<MeshCase>& info) {
  return "R" + std::to_string(info.param.replicas) + "xS" + std::to_string(info.param.shard) + "_" +
         to_string(info.param.optimizer) + "_" + to_string(info.param.mode);
});

// Ranks started with different HSDP settings fail together before any group forms, each naming
// the rank that differs and both settings; a rank without HSDP among ranks with it too (it once
// skipped the check and went on to a plan for another world size).
TEST(HsdpSettings, RanksThatDisagreeOnTheMeshFailTogetherNamingTheRank) {
  struct Case {
    int replicas_of_rank_3;
    StepMode mode_of_rank_3;
    std::string rank_3_has;
  };
  for (const Case& k : {Case{1, StepMode::replicated, "rank 3 has 'no HSDP (replicas 1)'"},
                        Case{2, StepMode::dedup, "rank 3 has 'replicas 2, step mode dedup'"}}) {
    std::mutex m;
    std::vector<std::string> errors(4);
    RanksOptions ranks;
    ranks.world_size = 4;
    run_ranks_as_threads(ranks, [&](RankContext& ctx) {
      TrainConfig c = base_config(OptimizerKind::muon, 2, StepMode::replicated);
      c.steps = 1;
      if (ctx.rank == 3) c.runtime.replicas = k.replicas_of_rank_3, c.runtime.step_mode = k.mode_of_rank_3;
      try {
        train_placement(ctx, c);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(m);
        errors[ctx.rank] = e.what();
      }
    });
    for (int r = 0; r < 4; ++r) {
      EXPECT_NE(errors[r].find("the HSDP mesh differs across ranks: rank 0 has 'replicas 2, step mode replicated'"),
                std::string::npos)
          << "rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find(k.rank_3_has), std::string::npos) << "rank " << r << ": " << errors[r];
    }
  }
}

}  // namespace
}  // namespace mfsdp

namespace mfsdp {
namespace {

// What must not happen: under dedup, a rank whose segment of a unit holds only the padding rows of
// even shards (every matrix owned elsewhere) has no partial sum to send to any stepper, and its
// empty list of parts must not crash the replica combination. It did: `torch.cat(): expected a
// non-empty list of Tensors` on W = 6 (2 x 3), AdamW, hidden 2, every item on shard rank 0, found by
// RuntimeProperties.OneStepBitMatchesTheOracle one run in three.
TEST(HsdpDedup, ARankHoldingOnlyPaddingBitMatchesTheOracle) {
  for (const OptimizerKind optimizer : {OptimizerKind::adamw, OptimizerKind::muon}) {
    for (const int64_t hidden : {int64_t{2}, int64_t{4}}) {
      TrainConfig c = base_config(optimizer, 2, StepMode::dedup);
      c.steps = 2;
      c.seq = 3;
      c.batch = 1;
      // Norms of 2 or 4 elements in even shards over 3 ranks: the last rank stores padding alone.
      c.model.hidden = hidden;
      c.model.heads = c.model.kv_heads = 1;
      c.model.layers = 1;
      c.model.intermediate = 3;
      c.planner.planner = PlannerKind::explicit_assignment;
      c.planner.tail_policy = TailPolicy::even;
      for (const PlanItem& item : plan_items(TransformerModel(c.model).spec(), c.planner)) c.planner.explicit_owners[item.key] = 0;
      std::mutex m;
      std::vector<std::string> failures;
      RanksOptions ranks;
      ranks.world_size = 6;
      run_ranks_as_threads(ranks, [&](RankContext& ctx) {
        const Comparison cmp = compare(run_oracle(ctx, c), run_recorded(ctx, c));
        if (!cmp.bitwise_equal) {
          std::lock_guard<std::mutex> lock(m);
          failures.push_back("rank " + std::to_string(ctx.rank) + ": " + cmp.first_bad + ": " + cmp.detail);
        }
      });
      for (const std::string& f : failures) ADD_FAILURE() << to_string(optimizer) << ", hidden " << hidden << ": " << f;
    }
  }
}

}  // namespace
}  // namespace mfsdp

namespace mfsdp {
namespace {

// HSDP fast mode (native sums, any order) checked where it can be exact in scale: the gradients
// it hands the optimizer, before any step, against the deterministic reduction's, within the
// rounding of a sum of W float32 contributions. A tolerance on a trajectory cannot see a wrong
// scale (Muon normalises it away); this can: a mean taken over S instead of W is R times off.
// Every optimizer (each has its own plan costs, so its own owners) and both step modes.
TEST(HsdpFastMode, GradientsEqualTheDeterministicOnesWithinTheReductionsRounding) {
  for (auto [R, S] : {std::pair{2, 2}, {2, 3}}) {
    for (OptimizerKind optimizer : {OptimizerKind::muon, OptimizerKind::adamw, OptimizerKind::shampoo, OptimizerKind::soap}) {
      for (StepMode mode : {StepMode::replicated, StepMode::dedup}) {
        const TrainConfig base = base_config(optimizer, R, mode);
        std::mutex mutex;
        std::vector<std::string> failures;
        int compared = 0;
        RanksOptions ranks;
        ranks.world_size = R * S;
        run_ranks_as_threads(ranks, [&](RankContext& ctx) {
          const TransformerModel model(base.model);
          Mesh mesh = make_mesh(ctx, R);
          const OwnershipPlan plan = make_plan(model.spec(), S, base.planner);
          const ByteCorpus corpus = ByteCorpus::load();
          auto [tokens, targets] = corpus.batch(base.seed, 0, ctx.rank, base.batch, base.seq);
          std::map<std::string, at::Tensor> grads[2];
          std::vector<int> steppers[2];
          int replica = -1;
          for (int fast = 0; fast < 2; ++fast) {
            RuntimeOptions opts = base.runtime;
            opts.reduce = fast ? ReduceMode::fast : ReduceMode::deterministic;
            OwnerRuntime rt(plan, *mesh.shard, opts, model.init(base.seed), mesh.replicate.get());
            at::Tensor x = tokens;
            for (int u = 0; u < rt.num_units(); ++u) x = rt.after_forward(u, model.unit_forward(u, x, rt.unshard(u), targets));
            x.backward();  // the engine's final callback runs finish_backward: the reduced gradients
            for (const MatrixShard& s : plan.shards()) {
              at::Tensor g = rt.local_grad(s.name);
              if (g.defined() && g.numel() > 0) grads[fast][s.name] = g.clone();
            }
            steppers[fast] = rt.step_replicas();
            replica = rt.replica();
          }
          for (size_t i = 0; i < plan.shards().size(); ++i) {
            const std::string& name = plan.shards()[i].name;
            // Under dedup only the stepping replica holds the whole mean.
            if (mode == StepMode::dedup && (steppers[0].at(i) != replica || steppers[1].at(i) != replica)) continue;
            if (!grads[0].count(name)) continue;
            const at::Tensor det = grads[0].at(name), fast = grads[1].at(name);
            const double scale = det.abs().max().item<double>();
            const double diff = (fast - det).abs().max().item<double>();
            const double bound = 8.0 * R * S * std::ldexp(1.0, -24) * std::max(scale, 1e-30) * 4;
            std::lock_guard<std::mutex> lock(mutex);
            ++compared;
            if (!(diff <= bound))
              failures.push_back("rank " + std::to_string(ctx.rank) + ", " + name + ": fast-mode gradient differs by " +
                                 std::to_string(diff) + " (largest element " + std::to_string(scale) + ", bound " +
                                 std::to_string(bound) + ")");
          }
        });
        for (const auto& f : failures)
          ADD_FAILURE() << R << " x " << S << " " << to_string(optimizer) << " " << to_string(mode) << ": " << f;
        EXPECT_GT(compared, 0);
      }
    }
  }
}

}  // namespace
}  // namespace mfsdp
