// The simulator (sim/): the traced step is the real step's collectives, and its prices.
#include "sim/simulate.h"
#include "sim/trace.h"

#include "core/dist/ranks.h"
#include "core/plan/optimizer_cost.h"
#include "core/plan/planner.h"
#include "core/util/files.h"
#include "harness/placements.h"
#include "testing/fixtures.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include <mutex>
#include <sstream>

namespace mfsdp {
namespace {

TrainConfig small_config() {
  return tiny_config({.intermediate = 48, .steps = 1});
}

// One collective as both logs show it.
std::string describe(const std::string& op, Phase phase, int unit, int root, int64_t bytes) {
  std::ostringstream s;
  s << op << " " << to_string(phase) << " unit " << unit << " root " << root << " " << bytes << " B";
  return s.str();
}

bool step_phase(Phase p) { return p != Phase::other && p != Phase::checkpoint; }

struct TraceCase {
  std::string name;
  Placement placement;
  int world_size;
  std::function<void(TrainConfig&)> adjust = [](TrainConfig&) {};
};

class TraceMatchesRealStep : public ::testing::TestWithParam<TraceCase> {};

// The real step over Gloo on thread ranks, each rank's log of its step's collectives, against
// that rank's traced step on meta tensors: the same operations, phases, units, roots and bytes in
// the same order.
TEST_P(TraceMatchesRealStep, EveryRankIssuesWhatItsTraceSays) {
  const TraceCase& tc = GetParam();
  TrainConfig c = small_config();
  tc.adjust(c);
  apply_placement(tc.placement, c);
  const int W = tc.world_size;
  std::mutex mutex;
  // Per rank, per group (world; HSDP: shard, replicate), the collectives in order.
  std::vector<std::array<std::vector<std::string>, 3>> real(W);
  RanksOptions ranks;
  ranks.world_size = W;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    std::vector<c10::intrusive_ptr<RecordingBackend>> groups{recording(ctx.backend)};
    ctx.on_group = [&](const std::string&, const c10::intrusive_ptr<RecordingBackend>& b) {
      b->record_events(true);
      groups.push_back(b);
    };
    groups[0]->record_events(true);
    train_placement(ctx, c);
    std::array<std::vector<std::string>, 3> mine;
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g]->record_events(false);
      for (const BackendEvent& e : groups[g]->events())
        if (e.collective && step_phase(e.phase)) mine.at(g).push_back(describe(e.what, e.phase, e.unit, e.root, e.bytes));
    }
    std::lock_guard<std::mutex> lock(mutex);
    real[ctx.rank] = mine;
  });
  for (int r = 0; r < W; ++r) {
    const StepTrace trace = trace_step(c, W, r);
    std::array<std::vector<std::string>, 3> traced;
    for (const TracedCollective& t : trace.collectives)
      if (step_phase(t.phase)) traced[static_cast<int>(t.group)].push_back(describe(t.op, t.phase, t.unit, t.root, t.input_bytes));
    ASSERT_FALSE(real[r][0].empty() && real[r][1].empty()) << "rank " << r << " logged no collective";
    for (int g = 0; g < 3; ++g) {
      const char* group = to_string(static_cast<TraceGroup>(g));
      if (c.runtime.replicas > 1 && g > 0) {
        EXPECT_FALSE(traced[g].empty()) << "rank " << r << " traced nothing on its " << group << " group";
      }
      EXPECT_EQ(traced[g], real[r][g]) << "rank " << r << ", " << group << " group";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, TraceMatchesRealStep,
    ::testing::Values(TraceCase{"owner_W3", Placement::owner, 3}, TraceCase{"owner_W4", Placement::owner, 4},
                      TraceCase{"reconstruct_W3", Placement::reconstruct, 3},
                      TraceCase{"alltoall_W3", Placement::alltoall, 3}, TraceCase{"zero1_W3", Placement::zero1, 3},
                      TraceCase{"ddp_W3", Placement::ddp, 3},
                      TraceCase{"owner_W5_fast_reduce", Placement::owner, 5,
                                [](TrainConfig& c) { c.runtime.reduce = ReduceMode::fast; }},
                      TraceCase{"owner_W3_allgather_even_prefetch", Placement::owner, 3,
                                [](TrainConfig& c) {
                                  c.runtime.unshard = UnshardStrategy::allgather_even;
                                  c.runtime.prefetch = true;
                                }},
                      TraceCase{"owner_W3_bf16", Placement::owner, 3,
                                [](TrainConfig& c) {
                                  c.runtime.precision.param_dtype = at::kBFloat16;
                                  c.runtime.precision.reduce_dtype = at::kBFloat16;
                                }},
                      TraceCase{"owner_W3_shampoo", Placement::owner, 3,
                                [](TrainConfig& c) { set_optimizer(c, OptimizerKind::shampoo); }},
                      TraceCase{"owner_W3_recompute_prefetch", Placement::owner, 3,
                                [](TrainConfig& c) {
                                  c.runtime.activation_checkpointing = true;
                                  c.runtime.prefetch = true;
                                }},
                      // HSDP meshes: each rank's shard and replicate groups, group by group.
                      TraceCase{"hsdp_r2s3_owner_replicated", Placement::owner, 6, [](TrainConfig& c) { c.runtime.replicas = 2; }},
                      TraceCase{"hsdp_r3s2_owner_dedup", Placement::owner, 6,
                                [](TrainConfig& c) {
                                  c.runtime.replicas = 3;
                                  c.runtime.step_mode = StepMode::dedup;
                                }},
                      TraceCase{"hsdp_r2s2_reconstruct", Placement::reconstruct, 4, [](TrainConfig& c) { c.runtime.replicas = 2; }},
                      TraceCase{"hsdp_r2s3_alltoall_fast", Placement::alltoall, 6,
                                [](TrainConfig& c) {
                                  c.runtime.replicas = 2;
                                  c.runtime.reduce = ReduceMode::fast;
                                }}),
    [](const ::testing::TestParamInfo<TraceCase>& info) { return info.param.name; });

SimConfig cluster(const std::string& model, Placement placement, int W, const std::string& profile) {
  SimConfig s;
  s.train.model = preset_config(model);
  s.train.runtime.precision.param_dtype = s.train.runtime.precision.reduce_dtype = s.train.model.dtype;
  set_optimizer(s.train, OptimizerKind::muon);
  s.train.batch = 1;
  s.train.seq = 4096;
  s.placement = placement;
  s.world_size = W;
  s.profile = load_hardware_profile(profile, MFSDP_PROFILE_DIR);
  return s;
}

double optimizer_s(const SimResult& r) { return r.stages[static_cast<int>(Stage::optimizer)].seconds(); }

bool within_2x(double got, double want) { return got >= want / 2 && got <= want * 2; }

SimConfig bench32_a100(Placement placement, int W, SimConfig::ReconstructNs ns = SimConfig::ReconstructNs::redundant) {
  SimConfig s = cluster("bench32", placement, W, "a100-8x-4hdr");
  s.train.runtime.muon.ns_steps = 2;  // the public implementation's default
  s.reconstruct_ns = ns;
  return s;
}

// The public implementation's benchmark on 8 A100s: 748 ms (FSDP2 + Muon) -> 175 ms (owner).
// With the all-gather + redundant Newton–Schulz baseline as traced, both within 2x.
TEST(Simulate, ReproducesThePublicImplementationsStepTimesWithinTwice) {
  const double owner = optimizer_s(simulate(bench32_a100(Placement::owner, 8))) * 1e3;
  const double baseline = optimizer_s(simulate(bench32_a100(Placement::reconstruct, 8))) * 1e3;
  std::printf("8 x A100: owner %.1f ms (public 175), reconstruct %.1f ms (public 748)\n", owner, baseline);
  EXPECT_TRUE(within_2x(owner, 175)) << owner;
  EXPECT_TRUE(within_2x(baseline, 748)) << baseline;
}

// The MatrixFSDP paper (README.md#the-paper): the optimizer step 4.2x faster than FSDP2 + Muon on 8 A100s and 54.6x on 64 (8
// nodes, 4 x HDR each), both within 2x with Newton–Schulz on sharded tensors (implicit gathers);
// the traced redundant baseline is within 2x at 64 (at 8 it is 8.4x, twice the paper).
TEST(Simulate, ReproducesThePapersOwnerSpeedupsWithinTwice) {
  using NS = SimConfig::ReconstructNs;
  for (const auto& [W, paper] : {std::pair{8, 4.2}, std::pair{64, 54.6}}) {
    const double owner = optimizer_s(simulate(bench32_a100(Placement::owner, W)));
    const double sharded = optimizer_s(simulate(bench32_a100(Placement::reconstruct, W, NS::sharded)));
    const double redundant = optimizer_s(simulate(bench32_a100(Placement::reconstruct, W, NS::redundant)));
    std::printf("W=%d: sharded NS %.1fx, redundant %.1fx (paper %.1fx)\n", W, sharded / owner, redundant / owner, paper);
    EXPECT_TRUE(within_2x(sharded / owner, paper)) << "W=" << W << ": " << sharded / owner;
    if (W == 64) {
      EXPECT_TRUE(within_2x(redundant / owner, paper)) << "W=" << W << ": " << redundant / owner;
    }
  }
}

// The MatrixFSDP paper's memory claim for a 32B model: about 10 GB per rank under owner sharding, ZeRO-1
// (full parameters and gradients on every rank) above 80 GB. qwen2.5-32b on 64 H100s, bf16,
// 4096 tokens per rank, activation checkpointing and fused attention.
TEST(Simulate, AThirtyTwoBillionModelNeedsAboutTenGigabytesPerRankUnderOwnerSharding) {
  auto run = [](Placement p) {
    SimConfig s = cluster("qwen2.5-32b", p, 64, "h100-8x-8ndr");
    s.activation_checkpointing = s.fused_attention = true;
    return simulate(s);
  };
  const SimResult owner = run(Placement::owner), zero1 = run(Placement::zero1);
  const double GB = 1e9;
  std::printf("32B on 64 ranks: owner peak %.1f GB (resident %.1f), zero1 resident %.1f GB\n", owner.peak_bytes / GB,
              owner.resident_bytes / GB, zero1.resident_bytes / GB);
  EXPECT_TRUE(within_2x(owner.peak_bytes / GB, 10)) << owner.peak_bytes / GB;
  EXPECT_GT(zero1.resident_bytes / GB, 80);
  EXPECT_TRUE(owner.fits);
  EXPECT_FALSE(zero1.fits);
}

// The owner step communicates nothing in the simulator either: its traced optimizer stage is empty.
TEST(Simulate, TheOwnerOptimizerStageHasNoCollective) {
  const SimResult r = simulate(cluster("bench32", Placement::owner, 64, "a100-8x-4hdr"));
  EXPECT_EQ(r.stages[static_cast<int>(Stage::optimizer)].calls, 0);
  EXPECT_GT(r.stages[static_cast<int>(Stage::forward)].calls, 0);
  EXPECT_GT(r.stages[static_cast<int>(Stage::backward)].calls, 0);
}

// Model-wide groups (--comm-groups model) are priced as they run: the traced forward is one
// collective and the backward one reduction group with the non-finite flags' all-reduce, with the
// unit-grouped step's forward bytes and no revive; every unit is gathered, and its gradients held,
// at once, so the peak grows by the gathered model and its full gradients.
TEST(Simulate, ModelWideGroupsAreTwoCollectivesAStepAndHoldTheWholeModel) {
  SimConfig s = cluster("llama3-8b", Placement::owner, 64, "h100-8x-8ndr");
  s.activation_checkpointing = s.fused_attention = true;
  s.train.runtime.reduce = ReduceMode::fast;
  const SimResult unit = simulate(s);
  s.activation_checkpointing = false;  // model groups keep every unit gathered: nothing is recomputed
  const SimResult unit_plain = simulate(s);
  s.train.runtime.comm_groups = CommGroups::model;
  const SimResult model = simulate(s);
  const auto& fwd = model.stages[static_cast<int>(Stage::forward)];
  const auto& bwd = model.stages[static_cast<int>(Stage::backward)];
  EXPECT_EQ(fwd.calls, 1);
  EXPECT_EQ(bwd.calls, 2);
  EXPECT_EQ(fwd.bytes, unit_plain.stages[static_cast<int>(Stage::forward)].bytes);
  EXPECT_LT(model.step_s, unit_plain.step_s);
  const double gathered = static_cast<double>(model.peak_bytes - model.activation_bytes) -
                          static_cast<double>(unit_plain.peak_bytes - unit_plain.activation_bytes);
  std::printf("llama3-8b, W = 64: unit groups %d + %d collectives, %.1f ms (%.1f ms recomputing); model groups %d + %d, "
              "%.1f ms; peak without activations +%.1f GiB\n",
              unit_plain.stages[0].calls, unit_plain.stages[1].calls, unit_plain.step_s * 1e3, unit.step_s * 1e3, fwd.calls,
              bwd.calls, model.step_s * 1e3, gathered / (1 << 30));
  // About the model's bf16 copy and its gradients (8.0 B parameters x 2 x 2 bytes), less the one
  // unit a unit-grouped step gathers.
  EXPECT_GT(gathered / 1e9, 28);
  EXPECT_LT(gathered / 1e9, 34);
}

// Every matrix optimizer's owner step is traced to its end on meta tensors (a missing meta kernel
// stops a trace: SOAP's eigenbasis flip once did), and it is local there too.
TEST(Simulate, TracesEveryMatrixOptimizersOwnerStep) {
  for (OptimizerKind kind : {OptimizerKind::muon, OptimizerKind::adamw, OptimizerKind::shampoo, OptimizerKind::soap}) {
    SCOPED_TRACE(to_string(kind));
    SimConfig s = cluster("tiny", Placement::owner, 3, "cpu-local");
    set_optimizer(s.train, kind);
    s.train.seq = 32;
    const SimResult r = simulate(s);
    EXPECT_GT(r.stages[static_cast<int>(Stage::optimizer)].ops, 0);
    EXPECT_EQ(r.stages[static_cast<int>(Stage::optimizer)].calls, 0);
  }
}

// The traced compute against the formulas it must equal: the forward's matrix products are
// 2·N·tokens + attention, the backward's exactly twice that, and the owner's optimizer step on a
// rank is the cost model's Newton–Schulz multiply-adds (times 2) of the matrices it owns.
TEST(Trace, CountsTheFlopsTheFormulasGive) {
  for (int W : {3, 5}) {
    TrainConfig c = small_config();
    apply_placement(Placement::owner, c);
    const OwnershipPlan plan = make_plan(TransformerModel(c.model).spec(), W, c.planner);
    for (int r = 0; r < W; ++r) {
      const StepTrace t = trace_step(c, W, r);
      const double fwd = forward_flops(c.model, c.batch, c.seq);
      const StageCompute& f = t.compute[static_cast<int>(Stage::forward)];
      const StageCompute& b = t.compute[static_cast<int>(Stage::backward)];
      const StageCompute& o = t.compute[static_cast<int>(Stage::optimizer)];
      EXPECT_EQ(f.flops_fp32 + f.flops_bf16, fwd) << "W=" << W << " rank " << r;
      EXPECT_EQ(b.flops_fp32 + b.flops_bf16, 2 * fwd) << "W=" << W << " rank " << r;
      EXPECT_GT(f.ops, 0);
      EXPECT_GT(b.ops, 0);
      double ns = 0;
      for (const MatrixShard& s : plan.shards())
        if (s.role == Role::owned_matrix && matrix_kind(s.kind) && s.owner == r)
          // The cost model's Muon adds rows x cols for the momentum update, which is no product.
          ns += 2 * (optimizer_step_cost(OptimizerKind::muon, s.shape[0], s.shape[1], OptimizerCostConfig(c.runtime)) -
                     static_cast<double>(s.shape[0] * s.shape[1]));
      EXPECT_EQ(o.flops_bf16, ns) << "W=" << W << " rank " << r;  // Newton–Schulz runs in bf16
      EXPECT_EQ(o.flops_fp32, 0) << "W=" << W << " rank " << r;
    }
  }
}

// Activation checkpointing traced from the real recomputing step: the backward's matrix products
// are the storing step's plus each block's forward once more (the forward's without the head's),
// its operators more by the blocks' forward operators, and the collectives are the same ones.
TEST(Trace, TheRecomputingStepAddsTheBlocksForwardToTheBackwardOnly) {
  TrainConfig c = small_config();
  apply_placement(Placement::owner, c);
  TrainConfig ck = c;
  ck.runtime.activation_checkpointing = true;
  const StepTrace plain = trace_step(c, 3, 1), recomputing = trace_step(ck, 3, 1);
  const double fwd = forward_flops(c.model, c.batch, c.seq);
  const double head = 2.0 * static_cast<double>(c.model.vocab * c.model.hidden * c.batch * c.seq);
  auto flops = [](const StepTrace& t, Stage s) { return t.compute[static_cast<int>(s)].flops_fp32 + t.compute[static_cast<int>(s)].flops_bf16; };
  EXPECT_EQ(flops(recomputing, Stage::forward), fwd);
  EXPECT_EQ(flops(recomputing, Stage::backward), 2 * fwd + (fwd - head));
  EXPECT_EQ(flops(recomputing, Stage::optimizer), flops(plain, Stage::optimizer));
  EXPECT_EQ(recomputing.compute[static_cast<int>(Stage::forward)].ops, plain.compute[static_cast<int>(Stage::forward)].ops);
  EXPECT_GT(recomputing.compute[static_cast<int>(Stage::backward)].ops,
            plain.compute[static_cast<int>(Stage::backward)].ops + plain.compute[static_cast<int>(Stage::forward)].ops / 2);
  ASSERT_EQ(recomputing.collectives.size(), plain.collectives.size());
  for (size_t k = 0; k < plain.collectives.size(); ++k) {
    EXPECT_EQ(recomputing.collectives[k].kind, plain.collectives[k].kind) << k;
    EXPECT_EQ(recomputing.collectives[k].bytes, plain.collectives[k].bytes) << k;
    EXPECT_EQ(recomputing.collectives[k].stage, plain.collectives[k].stage) << k;
  }
}

TEST(Trace, RefusesWhatItCannotTrace) {
  TrainConfig c = small_config();
  c.model.experts = 4;
  c.model.top_k = 2;
  try {
    trace_step(c, 4);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("MoE models are not traced yet"), std::string::npos)
        << e.what_without_backtrace();
  }
}

// Ranks sharing a CPU's cores: the ones that finish early give their share to the rest.
TEST(Simulate, ProcessorSharingFinishesAsTheCoresAllow) {
  EXPECT_DOUBLE_EQ(processor_sharing_finish({1, 1, 1, 1}, 2), 2);        // 4 equal jobs on 2 cores
  EXPECT_DOUBLE_EQ(processor_sharing_finish({10, 1, 1, 1}, 2), 11);      // 2 s at half speed, then alone
  EXPECT_DOUBLE_EQ(processor_sharing_finish({3, 1}, 4), 3);              // more cores than jobs
  const std::vector<double> f = processor_sharing_finishes({10, 1, 1, 1}, 2);
  EXPECT_EQ(f, (std::vector<double>{11, 2, 2, 2}));
  EXPECT_DOUBLE_EQ(processor_sharing_finish({1, 1}, 1.6), 1.25);        // cores that do less than their count
}

// An optimizer stage's operators run without autograd: a profile may price them apart
// (optimizer_op_overhead_s, measured by calibrate); without that, every stage's at op_overhead_s.
TEST(Simulate, PricesTheOptimizerStagesOperatorsAtTheirOwnCost) {
  HardwareProfile hw = load_hardware_profile("a100-8x-4hdr", MFSDP_PROFILE_DIR);
  hw.op_overhead_s = 8e-6;
  StageCompute ops;
  ops.ops = 100;
  EXPECT_DOUBLE_EQ(compute_seconds(ops, hw, Stage::forward), 8e-4);
  EXPECT_DOUBLE_EQ(compute_seconds(ops, hw, Stage::optimizer), 8e-4);
  hw.optimizer_op_overhead_s = 5e-6;
  const HardwareProfile again = hardware_profile_from_json(hardware_profile_to_json(hw), "again.json");
  EXPECT_DOUBLE_EQ(compute_seconds(ops, again, Stage::backward), 8e-4);
  EXPECT_DOUBLE_EQ(compute_seconds(ops, again, Stage::optimizer), 5e-4);
}

// The check against measured CPUs (docs/simulate.md): on each machine `mfsdp calibrate` measured
// a profile and bench_step ran right after it; the simulator, given that profile alone, predicts
// the bench (results/cpu/simcheck/<machine>/{profile,bench_step}.json, the inputs; no timing here):
// the optimizer step and forward + backward of every placement at W = 2, 4 and 8, and of the HSDP
// meshes of 2 replica groups at W = 4 and 8 where the file has them, for both bench models. Stated tolerances: the median error at most 25 % and every latency within 2x, but for the
// misses named in kUnmodelled (a bound of 25 % on every latency is below the bench's own repeatability, docs/simulate.md; the table this prints
// shows where the model falls short, and beside it how far the bench's own rounds stray from one
// another where the file has rounds).
struct CpuCheck {
  std::string machine;  // results/cpu/simcheck/<machine>/
  // Latencies the model misses by more than 2x, with the reason; each must still miss (when the
  // model learns it, the entry goes).
  std::vector<std::tuple<std::string, std::string, int, std::string>> unmodelled;  // model, placement, W, what
};

class PredictsTheMeasuredCpuBench : public ::testing::TestWithParam<CpuCheck> {};

TEST_P(PredictsTheMeasuredCpuBench, WithinTheStatedTolerances) {
  const CpuCheck& check = GetParam();
  const std::string dir = std::string(MFSDP_SOURCE_DIR) + "/results/cpu/simcheck/" + check.machine;
  const HardwareProfile hw = load_hardware_profile(dir + "/profile.json", MFSDP_PROFILE_DIR);
  const nlohmann::json bench = nlohmann::json::parse(read_file(dir + "/bench_step.json", "bench results", 1 << 24));
  const std::string cpu = bench.at("environment").at("cpu").get<std::string>();
  ASSERT_NE(hw.description.find(cpu), std::string::npos)
      << "the profile (" << hw.description << ") and the bench (" << cpu << ") were measured on different CPUs";
  constexpr double kMedianTolerance = 0.25, kEveryFactor = 2.0;
  std::vector<double> errors, bench_spreads;
  std::ostringstream table;
  int flat_cases = 0;
  auto spread = [](const nlohmann::json& m, const char* key) {  // the rounds' largest / smallest - 1
    if (!m.contains(key) || m.at(key).size() < 2) return -1.0;
    const std::vector<double> v = m.at(key).get<std::vector<double>>();
    return *std::max_element(v.begin(), v.end()) / *std::min_element(v.begin(), v.end()) - 1;
  };
  for (const nlohmann::json& m : bench.at("cases")) {
    const std::string placement = m.at("placement"), model = m.at("model");
    const int W = m.at("world_size");
    flat_cases += placement.rfind("hsdp2_", 0) != 0;
    SimConfig sc;
    sc.train = bench_train_config(placement, model);
    sc.placement = sc.train.placement;
    sc.world_size = W;
    sc.profile = hw;
    const SimResult r = simulate(sc);
    const double opt = r.stages[static_cast<int>(Stage::optimizer)].seconds() * 1e3;
    // bench_step's forward is the slowest rank's: the rank that left its optimizer step first
    // waits in the forward's first collective for the last one.
    const double fb = (r.stages[static_cast<int>(Stage::forward)].seconds() + r.stages[static_cast<int>(Stage::backward)].seconds() +
                       r.optimizer_wait_s) * 1e3;
    const double opt_m = m.at("optimizer_step_ms"), fb_m = m.at("forward_ms").get<double>() + m.at("backward_ms").get<double>();
    const double opt_spread = spread(m, "round_optimizer_step_ms"), fb_spread = spread(m, "round_fwd_bwd_ms");
    char line[300];
    std::snprintf(line, sizeof(line),
                  "%-6s %-22s W=%d  optimizer %7.1f ms predicted %7.1f (%+4.0f%%; rounds %3.0f%%)  fwd+bwd %7.1f ms "
                  "predicted %7.1f (%+4.0f%%; rounds %3.0f%%)\n",
                  model.c_str(), placement.c_str(), W, opt_m, opt, 100 * (opt / opt_m - 1), 100 * opt_spread, fb_m, fb,
                  100 * (fb / fb_m - 1), 100 * fb_spread);
    table << line;
    for (const auto& [what, predicted, measured, rounds] :
         {std::tuple{"optimizer step", opt, opt_m, opt_spread}, std::tuple{"forward + backward", fb, fb_m, fb_spread}}) {
      errors.push_back(std::fabs(predicted / measured - 1));
      if (rounds >= 0) bench_spreads.push_back(rounds);
      const bool within = predicted <= kEveryFactor * measured && measured <= kEveryFactor * predicted;
      const bool listed = std::find(check.unmodelled.begin(), check.unmodelled.end(),
                                    std::tuple<std::string, std::string, int, std::string>{model, placement, W, what}) !=
                          check.unmodelled.end();
      EXPECT_TRUE(within != listed) << check.machine << ": " << model << " " << placement << " W=" << W << " " << what
                                    << ": predicted " << predicted << " ms, measured " << measured << " ms"
                                    << (listed ? " (listed as unmodelled, but now within 2x: drop it from the list)" : "");
    }
  }
  ASSERT_EQ(flat_cases, 2 * 5 * 3) << "the bench file lacks cases (2 models x 5 placements x W = 2, 4, 8)";
  std::sort(errors.begin(), errors.end());
  const double median = errors[errors.size() / 2];
  const auto within = std::count_if(errors.begin(), errors.end(), [](double e) { return e <= 0.25; });
  std::printf("%s (%s)\n%s  median error %.0f%%, largest %.0f%%; %lld of %zu latencies within 25%%\n", check.machine.c_str(),
              cpu.c_str(), table.str().c_str(), 100 * median, 100 * errors.back(), static_cast<long long>(within), errors.size());
  if (!bench_spreads.empty()) {
    std::sort(bench_spreads.begin(), bench_spreads.end());
    const auto steady = std::count_if(bench_spreads.begin(), bench_spreads.end(), [](double e) { return e <= 0.25; });
    std::printf("  the bench against itself: its rounds' medians differ by %.0f%% at the median; %lld of %zu latencies vary "
                "by at most 25%% from round to round\n",
                100 * bench_spreads[bench_spreads.size() / 2], static_cast<long long>(steady), bench_spreads.size());
  }
  EXPECT_LE(median, kMedianTolerance) << check.machine;
}

INSTANTIATE_TEST_SUITE_P(
    Machines, PredictsTheMeasuredCpuBench,
    ::testing::Values(
        // Intel Xeon, 2 cores, AVX-512 and AMX: one round of 6 steps (2026-12-02).
        CpuCheck{"xeon", {}},
        // AMD EPYC (Zen 5), 2 cores: three rounds of 10 steps, HSDP meshes too (2026-12-03).
        // Unmodelled: (1) small optimizer stages without collectives on oversubscribed cores: the
        // tiny model's owner step at W = 4 and 8 and its HSDP replicated step at W = 4 are ranks of about
        // a millisecond each on 1.7 cores; processor sharing from a common start prices them as if
        // all overlapped, but the ranks leave the backward's last all-to-all one by one as the
        // cores free up and hardly overlap. (2) HSDP dedup at W = 4: the update broadcast over
        // 2-rank replicate groups while the other group computes costs twice what the contended
        // 2-rank fit gives.
        CpuCheck{"epyc",
                 {{"tiny", "owner", 4, "optimizer step"},
                  {"tiny", "owner", 8, "optimizer step"},
                  {"tiny", "hsdp2_owner_replicated", 4, "optimizer step"},
                  {"tiny", "hsdp2_owner_dedup", 4, "optimizer step"},
                  {"small", "hsdp2_owner_dedup", 4, "optimizer step"}}},
        // The same EPYC with grouped segment collectives (one group per unit and direction, Gloo's
        // broadcasts in a group as point-to-point messages; calibrate's broadcast_group fit prices
        // them): three rounds of 10 steps (2026-12-07). Unmodelled: (1) as above, the small
        // optimizer stages on oversubscribed cores (tiny owner at W = 8; tiny zero1 at W = 4, whose
        // rounds measured 18.3, 9.1 and 7.4 ms); (2) small alltoall at W = 2: its rounds measured
        // 95.7, 40.3 and 43.4 ms, the machine drifting in the first; the model's 21.8 ms is a
        // third of the steadier rounds.
        CpuCheck{"epyc_groups",
                 {{"tiny", "owner", 8, "optimizer step"},
                  {"tiny", "zero1", 4, "optimizer step"},
                  {"small", "alltoall", 2, "optimizer step"}}}),
    [](const ::testing::TestParamInfo<CpuCheck>& info) { return info.param.machine; });

}  // namespace
}  // namespace mfsdp
