// Checkpoints, bit for bit (docs/checkpoints.md):
//  - round trip at the same W: load then save again reproduces every byte of every rank file
//    (parameters, every optimizer state, counters), for all four optimizers;
//  - reshard: a checkpoint written at W = 4 continues at W = 2, 3, 8, under other planners and tail
//    policies, and (Muon, AdamW) under the reconstruct and all-to-all placements, bitwise equal to
//    the DDP oracle resumed from the same consolidated state, over 10 steps;
//  - each rank of a resharded load reads only part of the checkpoint;
//  - bad input: truncated and corrupted files, a missing rank file, an unknown format version, a
//    different model, a lying safetensors header, an edited plan: each a clear error naming the file.
#include "core/util/files.h"
#include "core/io/checkpoint.h"
#include "core/plan/planner.h"
#include "core/dist/mesh.h"
#include "core/dist/ranks.h"
#include "core/train/replica.h"
#include "core/util/crc32.h"
#include "core/util/tensor_compare.h"
#include "oracle/ddp_oracle.h"
#include "harness/trajectory.h"
#include "harness/placements.h"
#include "testing/fixtures.h"

#include <gtest/gtest.h>

#include <ftw.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

namespace mfsdp {
namespace {

// Every directory temp_dir made, removed (whole trees) when the test program ends.
std::vector<std::string>& made_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

class RemoveTempDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const std::string& d : made_dirs())
      ::nftw(d.c_str(), [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
             FTW_DEPTH | FTW_PHYS);
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveTempDirs = ::testing::AddGlobalTestEnvironment(new RemoveTempDirs);

std::string temp_dir(const std::string& tag) {
  std::string t = "/tmp/mfsdp_ckpt_" + tag + "_XXXXXX";
  TORCH_CHECK(::mkdtemp(t.data()), "mkdtemp failed");
  made_dirs().push_back(t);
  return t;
}

std::string slurp(const std::string& path) { return read_file(path, "test"); }

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

TrainConfig base_config(OptimizerKind optimizer) {
  // Roots and eigenbases refreshed before the checkpoint and several times after it.
  return tiny_config({.steps = 20, .seed = 5, .optimizer = optimizer, .test_rates = true, .precondition_frequency = 3});
}

std::string name_of(const ::testing::TestParamInfo<OptimizerKind>& info) { return to_string(info.param); }

// ---- Round trip -------------------------------------------------------------------------------

// What `checkpoint` recorded besides the tensors, for writing it again from a loaded runtime.
CheckpointContext context_of(const std::string& checkpoint, int rank) {
  const CheckpointLayout first = read_layout(checkpoint);
  CheckpointContext c;
  c.step = first.step;
  c.placement = first.placement;
  c.model = first.model;
  c.optimizers = first.optimizers;
  c.sampler = first.ranks[rank].sampler;
  c.lr_schedule = first.lr_schedule;  // the training loop's record, as written
  return c;
}

class RoundTrip : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(RoundTrip, LoadThenSaveReproducesEveryByteAtTheSameWorldSize) {
  const std::string root = temp_dir("roundtrip");
  TrainConfig c = base_config(GetParam());
  c.steps = 4;
  c.checkpoint_dir = root + "/a";
  c.checkpoint_every = 4;
  RanksOptions ranks;
  ranks.world_size = 3;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    train_placement(ctx, c);
    // A fresh runtime with other initial weights takes everything from the checkpoint ...
    TransformerModel model(c.model);
    Communicator comm(ctx.backend);
    const OwnershipPlan plan = make_plan(model.spec(), comm.world_size(), c.planner);
    OwnerRuntime rt(plan, comm, c.runtime, model.init(c.seed + 1));
    const LoadReport report = load_checkpoint(root + "/a/step_00000004", rt);
    EXPECT_TRUE(report.same_layout);
    EXPECT_EQ(report.step, 4);
    // ... reading its own file only (chunks and a small cache: about one file's worth).
    EXPECT_LT(report.bytes_read, report.bytes_total / 3 * 2) << "rank " << ctx.rank;
    // ... and writes it back byte for byte.
    save_checkpoint(root + "/b", rt, context_of(root + "/a/step_00000004", ctx.rank));
  });
  for (int r = 0; r < 3; ++r) {
    char file[64];
    std::snprintf(file, sizeof(file), "/step_00000004/rank_%05d.safetensors", r);
    const std::string a = slurp(root + "/a" + file), b = slurp(root + "/b" + file);
    EXPECT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b) << "rank " << r << " file differs after a load and a save";
  }
  EXPECT_EQ(slurp(root + "/a/step_00000004/layout.json"), slurp(root + "/b/step_00000004/layout.json"));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, RoundTrip,
                         ::testing::Values(OptimizerKind::muon, OptimizerKind::adamw, OptimizerKind::shampoo,
                                           OptimizerKind::soap),
                         name_of);

// ---- Reshard ----------------------------------------------------------------------------------

struct Target {
  std::string name;
  int world_size;
  PlannerKind planner;
  TailPolicy tail;
  Placement placement = Placement::owner;
  std::optional<c10::ScalarType> param_dtype;  // resume under another policy than the writer's
};

// The writer's precision: float32, or bf16 compute copies of float32 masters.
using ReshardParam = std::tuple<OptimizerKind, c10::ScalarType>;

class Reshard : public ::testing::TestWithParam<ReshardParam> {
 protected:
  std::function<void()> oracle_snapshot_;
};

TEST_P(Reshard, ContinuingAtAnotherWorldSizeOrPlannerBitMatchesTheOracleFromTheSameState) {
  const auto [optimizer, param_dtype] = GetParam();
  const std::string root = temp_dir("reshard");
  auto config = [&, param_dtype = param_dtype] {
    TrainConfig c = base_config(optimizer);
    c.runtime.precision.param_dtype = param_dtype;
    return c;
  };
  TrainConfig write = config();
  write.steps = 5;
  write.checkpoint_dir = root;
  write.checkpoint_every = 5;
  RanksOptions ranks;
  ranks.world_size = 4;
  // The anchor, independent of the checkpoint reader: the W = 4 oracle's parameters and optimizer
  // state after the same 5 steps (the runtime bit-matches it, state included).
  ParamMap oracle_params;
  std::map<std::string, OptimizerStateEntry> oracle_state;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    train_placement(ctx, write);
    TrainConfig oracle = write;
    oracle.checkpoint_dir.clear();
    train_loop(ctx, oracle, [&](const TransformerModel& model, Communicator& comm, const ParamMap& init) {
      auto o = std::make_unique<DdpOracle>(model, comm, oracle.runtime, init, OracleStep{oracle.runtime.precision});
      const DdpOracle* seen = o.get();
      if (ctx.rank == 0)
        oracle_snapshot_ = [&, seen] {
          oracle_params = cpu_copies(seen->params());
          for (const auto& [name, _] : oracle_params) {
            const TensorOptimizer& opt = seen->optimizer(name);
            oracle_state[name] = {opt.kind(), opt.state(), opt.scalars()};
          }
        };
      return o;
    }, [&](const StepMetrics& m) {
      if (ctx.rank == 0 && m.step == 5) oracle_snapshot_();
    });
  });
  {
    const FullState full = read_full_state(root + "/step_00000005");
    ASSERT_EQ(full.params.size(), oracle_params.size());
    for (const auto& [name, want] : oracle_params) {
      EXPECT_TRUE(diff(full.params.at(name), want).bitwise_equal) << "parameter " << name;
      const OptimizerStateEntry& w = oracle_state.at(name);
      const OptimizerStateEntry& got = full.optimizers.at(name);
      EXPECT_EQ(got.kind, w.kind) << name;
      EXPECT_EQ(got.scalars, w.scalars) << name;
      for (const auto& [k, t] : w.state) {
        if (!t.defined()) continue;
        ASSERT_TRUE(got.state.count(k)) << name << " lacks state " << k;
        EXPECT_TRUE(diff(got.state.at(k), t.cpu()).bitwise_equal) << name << " state " << k;
      }
    }
  }

  std::vector<Target> targets{
      {"W=2 balanced/even", 2, PlannerKind::balanced, TailPolicy::even, Placement::owner, std::nullopt},
      {"W=3 round_robin/owner", 3, PlannerKind::round_robin, TailPolicy::owner, Placement::owner, std::nullopt},
      {"W=8 balanced/even", 8, PlannerKind::balanced, TailPolicy::even, Placement::owner, std::nullopt},
      {"W=4 greedy_cost/owner (planner and tail change)", 4, PlannerKind::greedy_cost, TailPolicy::owner, Placement::owner, std::nullopt},
  };
  if (optimizer == OptimizerKind::muon || optimizer == OptimizerKind::adamw) {
    targets.push_back({"W=3 reconstruct placement", 3, PlannerKind::balanced, TailPolicy::even, Placement::reconstruct, std::nullopt});
    targets.push_back({"W=2 alltoall placement", 2, PlannerKind::balanced, TailPolicy::even, Placement::alltoall, std::nullopt});
  }
  // Another precision policy: the masters and state are float32 whatever the writer's policy, so
  // the continuation is exact (the oracle continues under the new policy too).
  targets.push_back({"W=3 balanced/even under the other policy", 3, PlannerKind::balanced, TailPolicy::even,
                     Placement::owner, param_dtype == c10::kFloat ? c10::kBFloat16 : c10::kFloat});
  for (const Target& t : targets) {
    TrainConfig c = config();
    if (t.param_dtype) c.runtime.precision.param_dtype = *t.param_dtype;
    c.steps = 15;  // 10 steps after the checkpoint
    c.resume_from = root;
    c.planner.planner = t.planner;
    c.planner.tail_policy = t.tail;
    apply_placement(t.placement, c);
    std::mutex mutex;
    std::vector<std::string> failures;
    std::atomic<int64_t> read_most{0};
    int64_t verified = 0;  // over the ranks: every file once
    int64_t total = 0;
    RanksOptions r;
    r.world_size = t.world_size;
    run_ranks_as_threads(r, [&](RankContext& ctx) {
      TrainConfig oracle = c;
      oracle.placement = Placement::ddp;
      oracle.record_params = true;
      const Trajectory control = to_trajectory(train_placement(ctx, oracle));
      TrainConfig experiment = c;
      experiment.record_params = true;
      TrainResult result = train_placement(ctx, experiment);
      const ResumeInfo info = result.resumed;
      const Comparison cmp = compare(control, to_trajectory(std::move(result)));
      std::lock_guard<std::mutex> lock(mutex);
      if (info.step != 5 || info.written_world_size != 4 || control.params.size() != 10)
        failures.push_back("resumed from step " + std::to_string(info.step) + " of W=" + std::to_string(info.written_world_size));
      if (!cmp.bitwise_equal)
        failures.push_back("rank " + std::to_string(ctx.rank) + ": first difference at step " + std::to_string(cmp.first_bad_step) +
                           " in " + cmp.first_bad + " (" + cmp.detail + ")");
      read_most = std::max<int64_t>(read_most, info.bytes_read);
      verified += info.bytes_verified;
      total = info.bytes_total;
    });
    for (const std::string& f : failures) ADD_FAILURE() << to_string(optimizer) << ", " << t.name << ": " << f;
    // No rank of a resharded load reads the whole checkpoint (W = 8: about an eighth of it).
    EXPECT_LT(read_most, total) << t.name;
    // ... yet every byte of it was verified, once in all.
    EXPECT_EQ(verified, total) << t.name;
    if (failures.empty())
      std::printf("%s, %s: 10 steps after a W=4 %s checkpoint bit-identical to the oracle; most read by a rank %lld of %lld bytes\n",
                  to_string(optimizer), t.name.c_str(), short_dtype_name(param_dtype), static_cast<long long>(read_most.load()), static_cast<long long>(total));
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Reshard,
                         ::testing::Combine(::testing::Values(OptimizerKind::muon, OptimizerKind::adamw,
                                                              OptimizerKind::shampoo, OptimizerKind::soap),
                                            ::testing::Values(c10::kFloat, c10::kBFloat16)),
                         [](const ::testing::TestParamInfo<ReshardParam>& info) {
                           std::string name = to_string(std::get<0>(info.param));
                           if (std::get<1>(info.param) == c10::kBFloat16) name += "_bf16";
                           return name;
                         });

// ---- HSDP meshes ------------------------------------------------------------------------------

struct HsdpCase {
  OptimizerKind optimizer;
  StepMode mode;
  c10::ScalarType param_dtype;
  bool tied = false;  // --tie-embeddings
  bool moe = false;   // --experts 8 --top-k 2: expert tensors cut into ranges that change with every mesh
};

void PrintTo(const HsdpCase& c, std::ostream* out) {
  *out << to_string(c.optimizer) << " " << to_string(c.mode) << " " << short_dtype_name(c.param_dtype) << (c.tied ? " tied" : "")
       << (c.moe ? " moe" : "");
}

std::string hsdp_name(const ::testing::TestParamInfo<HsdpCase>& info) {
  std::string n = std::string(to_string(info.param.optimizer)) + "_" + to_string(info.param.mode);
  if (info.param.param_dtype == c10::kBFloat16) n += "_bf16";
  if (info.param.tied) n += "_tied";
  if (info.param.moe) n += "_moe";
  return n;
}

TrainConfig hsdp_config(const HsdpCase& hc, int replicas) {
  TrainConfig c = base_config(hc.optimizer);
  c.runtime.precision.param_dtype = hc.param_dtype;
  c.runtime.replicas = replicas;
  c.runtime.step_mode = hc.mode;
  c.model.tie_embeddings = hc.tied;
  if (hc.moe) c.model.experts = 8, c.model.top_k = 2, c.model.moe_intermediate = 32;
  return c;
}

class HsdpRoundTrip : public ::testing::TestWithParam<HsdpCase> {};

// A (2, 3) mesh writes 6 rank files holding every tensor once: parameters in replica 0's, each
// optimizer state in the file of the replica stepping it. A fresh runtime on the same mesh loads it
// and writes it back byte for byte.
TEST_P(HsdpRoundTrip, EveryTensorOnceWhereTheStepModeKeepsItAndLoadThenSaveReproducesEveryByte) {
  const HsdpCase hc = GetParam();
  const std::string root = temp_dir("hsdp_roundtrip");
  TrainConfig c = hsdp_config(hc, 2);
  c.steps = 4;
  c.checkpoint_dir = root + "/a";
  c.checkpoint_every = 4;
  RanksOptions ranks;
  ranks.world_size = 6;
  std::mutex mutex;
  std::vector<std::string> failures;
  int64_t verified = 0, total = 0;  // over the mesh: every byte of the checkpoint verified once
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    train_placement(ctx, c);
    TransformerModel model(c.model);
    Communicator world(ctx.backend);
    Mesh mesh = make_mesh(ctx, 2);
    const OwnershipPlan plan = make_plan(model.spec(), mesh.shape.shard, c.planner);
    OwnerRuntime rt(plan, *mesh.shard, c.runtime, model.init(c.seed + 1), mesh.replicate.get());
    const LoadReport report = load_checkpoint(root + "/a/step_00000004", rt, &world);
    {
      std::lock_guard<std::mutex> lock(mutex);
      verified += report.bytes_verified;
      total = report.bytes_total;
      if (!report.same_layout || report.step != 4 || report.written_world_size != 6)
        failures.push_back("rank " + std::to_string(ctx.rank) + ": same_layout " + std::to_string(report.same_layout) +
                           ", step " + std::to_string(report.step) + ", written world size " +
                           std::to_string(report.written_world_size));
    }
    save_checkpoint(root + "/b", rt, context_of(root + "/a/step_00000004", ctx.rank), &world);
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(verified, total) << "the mesh's ranks verified " << verified << " of the checkpoint's " << total
                             << " bytes (each file once, by mesh rank)";

  const CheckpointLayout L = read_layout(root + "/a/step_00000004");
  EXPECT_EQ(L.mesh.replicas, 2);
  EXPECT_EQ(L.mesh.step_mode, to_string(hc.mode));
  EXPECT_EQ(L.plan->world_size(), 3);
  ASSERT_EQ(L.ranks.size(), 6u);
  const std::vector<int> steppers = dedup_step_replicas(*L.plan, 2, hc.optimizer, OptimizerCostConfig{});
  std::set<int> state_replicas;
  for (const CheckpointRank& r : L.ranks) {
    const int replica = r.rank / 3;
    for (const CheckpointTensor& t : r.tensors) {
      const int shard = static_cast<int>(&L.plan->shard(t.param) - L.plan->shards().data());
      const int want = t.state.empty() || hc.mode == StepMode::replicated ? 0 : steppers[shard];
      EXPECT_EQ(replica, want) << t.tensor << " is in " << r.file;
      if (!t.state.empty()) state_replicas.insert(replica);
    }
  }
  // dedup spreads the steps, hence the state, over both replicas; replicated keeps one copy.
  EXPECT_EQ(state_replicas.size(), hc.mode == StepMode::dedup ? 2u : 1u);
  for (int r = 0; r < 6; ++r) {
    char file[64];
    std::snprintf(file, sizeof(file), "/step_00000004/rank_%05d.safetensors", r);
    EXPECT_TRUE(slurp(root + "/a" + file) == slurp(root + "/b" + file)) << "rank " << r << " file differs after a load and a save";
  }
  EXPECT_EQ(slurp(root + "/a/step_00000004/layout.json"), slurp(root + "/b/step_00000004/layout.json"));
}

INSTANTIATE_TEST_SUITE_P(Meshes, HsdpRoundTrip,
                         ::testing::Values(HsdpCase{OptimizerKind::shampoo, StepMode::dedup, c10::kFloat, false},
                                           HsdpCase{OptimizerKind::adamw, StepMode::replicated, c10::kFloat, false}),
                         hsdp_name);

class HsdpReshard : public ::testing::TestWithParam<HsdpCase> {};

// One run through the meshes (R, S) = (2, 4) -> (1, 3) -> (4, 2) -> (1, 8), each leg resuming
// from the checkpoint of the one before: every leg bit-identical, every step, to the DDP oracle
// (in that leg's mesh order) resumed from the same checkpoint; the first to the oracle from scratch.
TEST_P(HsdpReshard, ThroughMeshesTwoByFourOneByThreeFourByTwoOneByEightEachLegBitMatchesTheOracle) {
  const HsdpCase hc = GetParam();
  const std::string root = temp_dir("hsdp_reshard");
  struct Leg {
    int replicas, shard, to;
  };
  const std::vector<Leg> legs{{2, 4, 4}, {1, 3, 7}, {4, 2, 10}, {1, 8, 13}};
  std::string from;
  int from_world = 0, from_step = 0;
  for (size_t k = 0; k < legs.size(); ++k) {
    const Leg& leg = legs[k];
    const std::string name = "(" + std::to_string(leg.replicas) + "," + std::to_string(leg.shard) + ")";
    TrainConfig c = hsdp_config(hc, leg.replicas);
    if (hc.moe) {  // another planner and range count every leg: the ranges move between ranks
      const PlannerKind planners[] = {PlannerKind::balanced, PlannerKind::round_robin, PlannerKind::greedy_cost, PlannerKind::balanced};
      const int ranges[] = {0, 2, 1, 3};
      c.planner.planner = planners[k];
      c.planner.expert_ranges = ranges[k];
    }
    c.steps = leg.to;
    c.resume_from = from;
    c.record_params = true;
    std::mutex mutex;
    std::vector<std::string> failures;
    int64_t verified = 0, total = 0;  // by the leg's whole mesh: the checkpoint it resumed from, once
    RanksOptions r;
    r.world_size = leg.replicas * leg.shard;
    run_ranks_as_threads(r, [&](RankContext& ctx) {
      TrainConfig oracle = c;
      oracle.placement = Placement::ddp;
      const Trajectory control = to_trajectory(train_placement(ctx, oracle));
      TrainConfig experiment = c;
      experiment.checkpoint_dir = root + "/leg" + std::to_string(k);
      experiment.checkpoint_every = leg.to;
      TrainResult result = train_placement(ctx, experiment);
      const ResumeInfo info = result.resumed;
      const Comparison cmp = compare(control, to_trajectory(std::move(result)));
      std::lock_guard<std::mutex> lock(mutex);
      verified += info.bytes_verified;
      total = info.bytes_total;
      if (!from.empty() && (info.step != from_step || info.written_world_size != from_world))
        failures.push_back("resumed from step " + std::to_string(info.step) + " of W=" + std::to_string(info.written_world_size));
      if (control.params.size() != static_cast<size_t>(leg.to - from_step))
        failures.push_back("the oracle ran " + std::to_string(control.params.size()) + " steps");
      if (!cmp.bitwise_equal)
        failures.push_back("rank " + std::to_string(ctx.rank) + ": first difference at step " + std::to_string(cmp.first_bad_step) +
                           " in " + cmp.first_bad + " (" + cmp.detail + ")");
    });
    if (!from.empty() && verified != total)
      failures.push_back("the mesh verified " + std::to_string(verified) + " of the checkpoint's " + std::to_string(total) + " bytes");
    for (const std::string& f : failures) ADD_FAILURE() << hsdp_name({GetParam(), 0}) << ", mesh " << name << ": " << f;
    if (!failures.empty()) return;
    std::printf("%s, mesh %s: steps %d..%d bit-identical to the oracle resumed from the same state\n",
                hsdp_name({GetParam(), 0}).c_str(), name.c_str(), from_step + 1, leg.to);
    from = root + "/leg" + std::to_string(k);
    from_world = leg.replicas * leg.shard;
    from_step = leg.to;
  }
  // The last checkpoint holds every parameter once and the whole optimizer state.
  const FullState full = read_full_state(resolve_checkpoint(from));
  EXPECT_EQ(full.step, 13);
  EXPECT_EQ(full.optimizers.size(), full.params.size());
}

INSTANTIATE_TEST_SUITE_P(Meshes, HsdpReshard,
                         ::testing::Values(HsdpCase{OptimizerKind::muon, StepMode::dedup, c10::kFloat, false},
                                           HsdpCase{OptimizerKind::adamw, StepMode::dedup, c10::kFloat, false},
                                           HsdpCase{OptimizerKind::shampoo, StepMode::dedup, c10::kFloat, false},
                                           HsdpCase{OptimizerKind::soap, StepMode::dedup, c10::kFloat, false},
                                           HsdpCase{OptimizerKind::muon, StepMode::replicated, c10::kFloat, false},
                                           HsdpCase{OptimizerKind::adamw, StepMode::replicated, c10::kFloat, false},
                                           HsdpCase{OptimizerKind::shampoo, StepMode::replicated, c10::kFloat, false},
                                           HsdpCase{OptimizerKind::soap, StepMode::replicated, c10::kFloat, false},
                                           HsdpCase{OptimizerKind::muon, StepMode::dedup, c10::kBFloat16, false},
                                           // Tied embeddings: the one embed.weight (and its state) through every mesh.
                                           HsdpCase{OptimizerKind::muon, StepMode::dedup, c10::kFloat, true},
                                           HsdpCase{OptimizerKind::adamw, StepMode::replicated, c10::kFloat, true},
                                           HsdpCase{OptimizerKind::shampoo, StepMode::dedup, c10::kFloat, true},
                                           HsdpCase{OptimizerKind::soap, StepMode::replicated, c10::kBFloat16, true},
                                           // Experts: ranges of 8 experts re-cut for S = 4, 3, 2, 8 and
                                           // four planners, per-slice state carried along.
                                           HsdpCase{OptimizerKind::muon, StepMode::dedup, c10::kFloat, false, true},
                                           HsdpCase{OptimizerKind::adamw, StepMode::replicated, c10::kFloat, false, true},
                                           HsdpCase{OptimizerKind::shampoo, StepMode::dedup, c10::kFloat, false, true},
                                           HsdpCase{OptimizerKind::soap, StepMode::replicated, c10::kFloat, false, true}),
                         hsdp_name);

// ---- Bad input --------------------------------------------------------------------------------

// A W = 2 Shampoo checkpoint after 2 steps, copied afresh for each test.
class BadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pristine_ = new std::string(temp_dir("pristine"));
    TrainConfig c = base_config(OptimizerKind::shampoo);
    c.steps = 2;
    c.checkpoint_dir = *pristine_;
    c.checkpoint_every = 2;
    RanksOptions ranks;
    ranks.world_size = 2;
    run_ranks_as_threads(ranks, [&](RankContext& ctx) { train_placement(ctx, c); });
  }
  void SetUp() override {
    dir_ = temp_dir("bad");
    for (const char* f : {"layout.json", "rank_00000.safetensors", "rank_00001.safetensors"})
      spit(dir_ + "/" + f, slurp(*pristine_ + "/step_00000002/" + f));
  }
  std::string file(const char* name) const { return dir_ + "/" + name; }
  // Expects reading the whole state to fail with a message matching `regex`.
  void expect_error(const std::string& regex) const {
    try {
      read_full_state(dir_);
      ADD_FAILURE() << "no error; expected one matching " << regex;
    } catch (const c10::Error& e) {
      EXPECT_TRUE(std::regex_search(e.what_without_backtrace(), std::regex(regex))) << e.what_without_backtrace();
    }
  }
  static std::string* pristine_;
  std::string dir_;
};
std::string* BadInput::pristine_ = nullptr;

TEST_F(BadInput, ThePristineCopyLoads) {
  FullState s = read_full_state(dir_);
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(s.optimizers.at("layers.0.attn.q.weight").kind, OptimizerKind::shampoo);
  std::string report;
  EXPECT_TRUE(inspect_checkpoint(dir_, true, report)) << report;
}

TEST_F(BadInput, TruncatedRankFile) {
  std::string bytes = slurp(file("rank_00001.safetensors"));
  spit(file("rank_00001.safetensors"), bytes.substr(0, bytes.size() - 100));
  expect_error("rank_00001\\.safetensors' is [0-9]+ bytes but the manifest says [0-9]+ \\(truncated\\)");
}

TEST_F(BadInput, CorruptedByte) {
  std::string bytes = slurp(file("rank_00000.safetensors"));
  bytes[bytes.size() - 5000] ^= 0x10;
  spit(file("rank_00000.safetensors"), bytes);
  expect_error("rank_00000\\.safetensors' is corrupted: checksum mismatch in bytes \\[[0-9]+, [0-9]+\\)");
  std::string report;
  EXPECT_FALSE(inspect_checkpoint(dir_, true, report));
  EXPECT_NE(report.find("FAILED"), std::string::npos) << report;
}

TEST_F(BadInput, MissingRankFile) {
  ASSERT_EQ(::unlink(file("rank_00001.safetensors").c_str()), 0);
  expect_error("cannot open '.*rank_00001\\.safetensors': No such file or directory \\(a rank file of the layout is missing\\)");
}

TEST_F(BadInput, UnknownFormatVersion) {
  std::string text = slurp(file("layout.json"));
  const std::string from = "\"format_version\": 4";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"format_version\": 99");
  spit(file("layout.json"), seal_layout(text));
  expect_error("layout\\.json': layout\\.format_version: unknown format version 99 \\(this build reads versions 1 to 4\\)");
}

// Any byte of layout.json changed (here one digit of a learning rate, which parses as well as the
// original): the seal refuses it before any field is believed.
// Format 3 added the precision record; a format-2 layout (no record, every such run was float32)
// still loads, read as the float32 policy, and a bad record is refused naming the field.
TEST_F(BadInput, Format2LayoutWithoutPrecisionLoadsAsFloat32) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(slurp(file("layout.json")));
  ASSERT_EQ(j["precision"]["param_dtype"], "fp32");
  j.erase("precision");
  j.erase("mesh");  // format 4's: a format-2 writer wrote neither (a layout holding them is a downgrade, refused)
  j["format_version"] = 2;
  j.erase("layout_crc32");
  j["layout_crc32"] = "00000000";
  spit(file("layout.json"), seal_layout(j.dump(1) + "\n"));
  const CheckpointLayout L = read_layout(dir_);
  EXPECT_EQ(L.format_version, 2);
  EXPECT_EQ(L.precision, precision_to_json(PrecisionPolicy{}));
  EXPECT_EQ(read_full_state(dir_).step, 2);
}

TEST_F(BadInput, UnknownPrecisionDtype) {
  std::string text = slurp(file("layout.json"));
  const std::string from = "\"param_dtype\": \"fp32\"";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"param_dtype\": \"int8\"");
  spit(file("layout.json"), seal_layout(text));
  expect_error("layout\\.precision\\.param_dtype: is 'int8', not fp32 or bf16");
}

TEST_F(BadInput, EditedLayoutWithoutItsSeal) {
  std::string text = slurp(file("layout.json"));
  const size_t at = text.find("\"lr\": ");
  ASSERT_NE(at, std::string::npos);
  char& digit = text[text.find_first_of("123456789", at)];
  digit = digit == '9' ? '8' : static_cast<char>(digit + 1);
  spit(file("layout.json"), text);
  expect_error("layout\\.json' is corrupted: its layout_crc32 says [0-9a-f]{8} but its bytes give [0-9a-f]{8}");
}

TEST_F(BadInput, EditedPlan) {
  std::string text = slurp(file("layout.json"));
  const std::string from = "\"tail_policy\": \"even\"";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"tail_policy\": \"owner\"");
  spit(file("layout.json"), seal_layout(text));  // resealed: the plan's own hash must catch it
  expect_error("layout\\.json': (plan\\.hash: is [0-9a-f]+ but the plan it describes hashes to|plan)");
}

TEST_F(BadInput, FileNameThatLeavesTheDirectory) {
  std::string text = slurp(file("layout.json"));
  for (size_t at = text.find("rank_00001.safetensors"); at != std::string::npos; at = text.find("rank_00001.safetensors"))
    text.replace(at, 22, "../etc/passwd");
  spit(file("layout.json"), seal_layout(text));
  expect_error("'\\.\\./etc/passwd' is not a plain file name");
}

TEST_F(BadInput, DifferentModel) {
  TrainConfig c = base_config(OptimizerKind::shampoo);
  c.model.intermediate = 96;
  const OwnershipPlan plan = make_plan(TransformerModel(c.model).spec(), 2, c.planner);
  try {
    check_same_model(read_layout(dir_), plan, dir_);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_TRUE(std::regex_search(e.what_without_backtrace(),
                                  std::regex("was written for a different model: parameter 'layers\\.0\\.mlp\\.gate\\.weight' "
                                             "is \\[64, 32\\] F32 there but \\[96, 32\\] F32 here")))
        << e.what_without_backtrace();
  }
}

// The header lies (a tensor's byte range overlaps its neighbour) but the checksums were recomputed:
// the safetensors reader itself must refuse it.
TEST_F(BadInput, LyingSafetensorsHeaderWithValidChecksums) {
  const std::string bytes = slurp(file("rank_00000.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    auto& off = it.value()["data_offsets"];
    if (off[0].get<int64_t>() == 0) {
      off[1] = off[1].get<int64_t>() + 4;
      break;
    }
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  out += text + bytes.substr(8 + n);
  spit(file("rank_00000.safetensors"), out);
  CheckpointLayout L = read_layout(dir_);
  for (FileManifest& m : L.manifest)
    if (m.file == "rank_00000.safetensors") m = compute_manifest(dir_, m.file);
  spit(file("layout.json"), layout_to_json(L));
  expect_error("safetensors: '.*rank_00000\\.safetensors', tensor '.*': covers [0-9]+ bytes but its dtype and shape need [0-9]+");
}

// Through the runtime: a corrupted file that only rank 1 reads fails every rank, naming rank 1.
TEST_F(BadInput, ACorruptFileFailsEveryRankNamingTheRankThatFoundIt) {
  std::string bytes = slurp(file("rank_00001.safetensors"));
  bytes[bytes.size() - 3000] ^= 0x01;
  spit(file("rank_00001.safetensors"), bytes);
  TrainConfig c = base_config(OptimizerKind::shampoo);
  std::mutex mutex;
  std::vector<std::string> errors;
  RanksOptions ranks;
  ranks.world_size = 2;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    TransformerModel model(c.model);
    Communicator comm(ctx.backend);
    const OwnershipPlan plan = make_plan(model.spec(), 2, c.planner);
    OwnerRuntime rt(plan, comm, c.runtime, model.init(c.seed));
    try {
      load_checkpoint(dir_, rt);
    } catch (const c10::Error& e) {
      std::lock_guard<std::mutex> lock(mutex);
      errors.push_back(e.what_without_backtrace());
    }
  });
  ASSERT_EQ(errors.size(), 2u);
  for (const std::string& e : errors)
    EXPECT_TRUE(std::regex_search(e, std::regex("verifying '.*' failed on rank 1: .*rank_00001\\.safetensors' is corrupted")))
        << e;
}

// An HSDP layout (2 x 2) edited so that a tensor is listed twice, or a parameter's rows are in no
// file: the strict reader refuses it, naming the row range and the rank.
TEST(HsdpBadInput, ARowWrittenTwiceOrByNoRankIsRefused) {
  const std::string root = temp_dir("hsdp_bad");
  TrainConfig c = hsdp_config({OptimizerKind::muon, StepMode::dedup, c10::kFloat, false}, 2);
  c.steps = 1;
  c.checkpoint_dir = root;
  c.checkpoint_every = 1;
  RanksOptions ranks;
  ranks.world_size = 4;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) { train_placement(ctx, c); });
  const std::string dir = root + "/step_00000001";
  const std::string pristine = slurp(dir + "/layout.json");
  auto expect_refused = [&](const CheckpointLayout& edited, const std::string& regex) {
    spit(dir + "/layout.json", layout_to_json(edited));
    try {
      read_layout(dir);
      ADD_FAILURE() << "no error; expected one matching " << regex;
    } catch (const c10::Error& e) {
      EXPECT_TRUE(std::regex_search(e.what_without_backtrace(), std::regex(regex))) << e.what_without_backtrace();
    }
    spit(dir + "/layout.json", pristine);
  };
  const CheckpointLayout L = read_layout(dir);
  ASSERT_EQ(L.ranks.size(), 4u);
  ASSERT_FALSE(L.ranks[0].tensors.empty());
  {
    CheckpointLayout twice = L;  // replica 1's shard rank 0 also lists replica 0's parameter rows
    twice.ranks[2].tensors.push_back(L.ranks[0].tensors[0]);
    expect_refused(twice, "rows \\[[0-9]+, [0-9]+\\) of '" + L.ranks[0].tensors[0].param +
                              "' are also written by rank [02] \\(each row is written once\\)");
  }
  {
    CheckpointLayout none = L;
    const CheckpointTensor dropped = none.ranks[0].tensors[0];
    none.ranks[0].tensors.erase(none.ranks[0].tensors.begin());
    expect_refused(none, "holds [0-9]+ of the [0-9]+ rows of '" + dropped.param + "' \\(every parameter row is in exactly one rank file\\)");
  }
  EXPECT_NO_THROW(read_full_state(dir));
}

TEST(CheckpointPaths, LatestThatNamesNothingIsAnError) {
  const std::string root = temp_dir("latest");
  spit(root + "/latest", "step_00000042\n");
  try {
    resolve_checkpoint(root);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace())
                  .find("names 'step_00000042', which does not exist; the directory holds no committed checkpoint"),
              std::string::npos)
        << e.what_without_backtrace();
  }
  EXPECT_THROW(resolve_checkpoint(root + "/nothing"), c10::Error);
}


}  // namespace
}  // namespace mfsdp

namespace mfsdp {
namespace {

// The precision policy a checkpoint records is the run's own, field by field (a bf16 run recorded
// as fp32 would resume, reshard and export under the wrong policy without any other test seeing
// it), flat and on an HSDP mesh.
TEST(CheckpointPolicy, TheRecordedPrecisionIsTheRunsPolicy) {
  struct Case {
    const char* name;
    c10::ScalarType param, reduce;
    std::optional<c10::ScalarType> output;
    int replicas;
    const char* want_param;
    const char* want_reduce;
    const char* want_output;  // nullptr: not recorded
  };
  const Case cases[] = {
      {"fp32", c10::kFloat, c10::kFloat, std::nullopt, 1, "fp32", "fp32", nullptr},
      {"bf16 compute", c10::kBFloat16, c10::kFloat, std::nullopt, 1, "bf16", "fp32", nullptr},
      {"bf16 compute and reduce, fp32 outputs", c10::kBFloat16, c10::kBFloat16, c10::kFloat, 1, "bf16", "bf16", "fp32"},
      {"bf16 compute and reduce on a 2 x 2 mesh", c10::kBFloat16, c10::kBFloat16, std::nullopt, 2, "bf16", "bf16", nullptr},
  };
  for (const Case& k : cases) {
    const std::string root = temp_dir("policy");
    TrainConfig c = base_config(OptimizerKind::muon);
    c.steps = 1;
    c.checkpoint_dir = root;
    c.checkpoint_every = 1;
    c.runtime.precision.param_dtype = k.param;
    c.runtime.precision.reduce_dtype = k.reduce;
    c.runtime.precision.output_dtype = k.output;
    c.runtime.replicas = k.replicas;
    RanksOptions ranks;
    ranks.world_size = 2 * k.replicas;
    run_ranks_as_threads(ranks, [&](RankContext& ctx) { train_placement(ctx, c); });
    const CheckpointLayout layout = read_layout(root + "/step_00000001");
    EXPECT_EQ(layout.precision.value("master_dtype", std::string("?")), "fp32") << k.name;
    EXPECT_EQ(layout.precision.value("param_dtype", std::string("?")), k.want_param) << k.name;
    EXPECT_EQ(layout.precision.value("reduce_dtype", std::string("?")), k.want_reduce) << k.name;
    if (k.want_output) EXPECT_EQ(layout.precision.value("output_dtype", std::string("?")), k.want_output) << k.name;
    else EXPECT_FALSE(layout.precision.contains("output_dtype")) << k.name;
  }
}

}  // namespace
}  // namespace mfsdp
