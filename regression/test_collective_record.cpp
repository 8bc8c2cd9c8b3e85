// What the backend itself recorded, not what the Communicator says it did:
//  - whole training steps of every placement, at W = 3 and 5: per phase, the calls the backend saw
//    equal the calls the Communicator counted (nothing bypassed it), and each phase holds what the
//    placement claims — the owner runtime's optimizer step makes no collective at all, DDP
//    never unshards, the baselines' steps communicate;
//  - the check catches a bypass: a runner that issues one collective on the backend directly
//    inside its step is flagged;
//  - prefetch, read from the order of the backend's log: unit u+1's unshard is issued before unit
//    u's forward compute begins, backward revives units in reverse order with unit u-1's revive
//    issued before unit u's backward compute — and without prefetch neither holds, so the check
//    tells the two apart;
//  - groups, read from the same log: owner placement's forward and backward issue at most one
//    collective per unit and direction (a group's parts share its id), even tails included, at
//    W = 3 and 5 with and without prefetch, in both reduce modes and both grouped unshard
//    strategies; one broadcast per segment breaks the bound, so the check tells the two apart.
#include "core/dist/ranks.h"
#include "core/dist/recording_backend.h"
#include "harness/placements.h"
#include "testing/fixtures.h"

#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <mutex>
#include <sstream>

namespace mfsdp {
namespace {

TrainConfig small_config(Placement placement) {
  TrainConfig c = tiny_config({.intermediate = 48, .steps = 2, .batch = 1});
  apply_placement(placement, c);
  return c;
}

struct Case {
  std::string name;
  Placement placement;
  bool prefetch = false;
};

// What one step's record must show for `placement`; empty when it does.
std::vector<std::string> attribution_problems(const StepMetrics& m, Placement placement) {
  std::vector<std::string> out;
  auto calls = [&](Phase p) { return m.backend[static_cast<int>(p)].calls; };
  for (int p = 0; p < kNumPhases; ++p) {
    const Phase phase = static_cast<Phase>(p);
    if (m.backend[p].calls != m.bytes[p].calls)
      out.push_back(std::string("phase ") + to_string(phase) + ": the backend saw " + std::to_string(m.backend[p].calls) +
                    " collectives, the Communicator counted " + std::to_string(m.bytes[p].calls) + " (a bypass)");
  }
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) out.push_back(what);
  };
  expect(calls(Phase::checkpoint) == 0, "collectives in phase checkpoint without a checkpoint");
  expect(calls(Phase::grad_reduce) > 0, "no gradient reduction");
  switch (placement) {
    case Placement::owner:
      expect(calls(Phase::optimizer_step) == 0 && m.backend[static_cast<int>(Phase::optimizer_step)].bytes == 0,
             "the owner step issued " + std::to_string(calls(Phase::optimizer_step)) + " collectives");
      expect(calls(Phase::unshard) > 0, "the owner runtime never unsharded");
      break;
    case Placement::reconstruct:
    case Placement::alltoall:
      expect(calls(Phase::optimizer_step) > 0, "the even-matrix step communicated nothing");
      expect(calls(Phase::unshard) > 0, "no unshard");
      break;
    case Placement::zero1:
      expect(calls(Phase::optimizer_step) > 0, "ZeRO-1 did not broadcast its updated parameters");
      break;
    case Placement::ddp:
      expect(calls(Phase::unshard) == 0, "DDP unsharded");
      expect(calls(Phase::optimizer_step) == 0, "DDP's replicated step communicated");
      break;
  }
  return out;
}

// Runs `c` on W thread ranks; returns every problem of every step on every rank. `wrap` may
// replace the runner (to plant a bypass).
std::vector<std::string> run_and_check(const TrainConfig& c, int W,
                                       const std::function<std::unique_ptr<PlacementRunner>(
                                           std::unique_ptr<PlacementRunner>, Communicator&)>& wrap = {}) {
  std::mutex mutex;
  std::vector<std::string> problems;
  RanksOptions ranks;
  ranks.world_size = W;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    train_loop(
        ctx, c,
        [&](const TransformerModel& model, Communicator& comm, const ParamMap& init) {
          std::unique_ptr<PlacementRunner> r = make_runner(model, comm, c, init);
          return wrap ? wrap(std::move(r), comm) : std::move(r);
        },
        [&](const StepMetrics& m) {
          for (const std::string& p : attribution_problems(m, c.placement)) {
            std::lock_guard<std::mutex> lock(mutex);
            problems.push_back("rank " + std::to_string(ctx.rank) + ", step " + std::to_string(m.step) + ": " + p);
          }
        });
  });
  return problems;
}

class WholeStep : public ::testing::TestWithParam<int> {};

TEST_P(WholeStep, EveryPlacementsCollectivesAreWhereItSaysAndNoneBypassTheCommunicator) {
  const int W = GetParam();
  const std::vector<Case> cases{{"owner", Placement::owner},
                                {"owner --prefetch", Placement::owner, true},
                                {"reconstruct", Placement::reconstruct},
                                {"alltoall", Placement::alltoall},
                                {"zero1", Placement::zero1},
                                {"ddp", Placement::ddp}};
  for (const Case& k : cases) {
    TrainConfig c = small_config(k.placement);
    c.runtime.prefetch = k.prefetch;
    for (const std::string& p : run_and_check(c, W)) ADD_FAILURE() << k.name << " at W=" << W << ": " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, WholeStep, ::testing::Values(3, 5),
                         [](const ::testing::TestParamInfo<int>& i) { return "W" + std::to_string(i.param); });

// A runner whose step issues one all-reduce on the backend itself, under the optimizer-step phase
// (what a careless "just sync this" inside an optimizer would do).
class BypassingRunner : public PlacementRunner {
 public:
  BypassingRunner(std::unique_ptr<PlacementRunner> inner, Communicator& comm) : inner_(std::move(inner)), comm_(comm) {}
  Gradients forward_backward(const at::Tensor& tokens, const at::Tensor& targets,
                             const std::function<void()>& before_backward, const MicroBatch& micro_batch) override {
    return inner_->forward_backward(tokens, targets, before_backward, micro_batch);
  }
  Update update() override {
    Update r = inner_->update();
    PhaseScope phase(comm_, Phase::optimizer_step);
    std::vector<at::Tensor> t{at::zeros({4})};
    comm_.backend().allreduce(t)->wait();
    return r;
  }
  void set_lr_factor(double factor) override { inner_->set_lr_factor(factor); }
  ParamMap full_params() override { return inner_->full_params(); }
  std::string save_checkpoint(const std::string& root, int64_t step, const TrainConfig& config,
                              const LoopState& loop) override {
    return inner_->save_checkpoint(root, step, config, loop);
  }
  ResumeInfo load_checkpoint(const std::string& checkpoint, const TrainConfig& config) override {
    return inner_->load_checkpoint(checkpoint, config);
  }
  uint64_t plan_hash() const override { return inner_->plan_hash(); }
  int64_t resident_bytes() const override { return inner_->resident_bytes(); }
  int64_t peak_gathered_bytes() const override { return inner_->peak_gathered_bytes(); }

 private:
  std::unique_ptr<PlacementRunner> inner_;
  Communicator& comm_;
};

TEST(WholeStepCheck, CatchesACollectiveIssuedOnTheBackendDirectlyInsideTheStep) {
  const std::vector<std::string> problems =
      run_and_check(small_config(Placement::owner), 3, [](std::unique_ptr<PlacementRunner> r, Communicator& comm) {
        return std::unique_ptr<PlacementRunner>(std::make_unique<BypassingRunner>(std::move(r), comm));
      });
  ASSERT_FALSE(problems.empty());
  std::string all;
  for (const std::string& p : problems) all += p + "\n";
  EXPECT_NE(all.find("phase optimizer_step: the backend saw 1 collectives, the Communicator counted 0 (a bypass)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("the owner step issued 1 collectives"), std::string::npos) << all;
}

// ---- Prefetch, from the log -------------------------------------------------------------------

// Positions in one rank's log of a one-step run.
struct Timeline {
  std::map<std::pair<std::string, int>, size_t> mark;  // ("forward" | "forward_done" | "backward", unit) -> index
  std::map<int, size_t> first_unshard;                 // unit -> first unshard-phase collective (forward)
  std::map<int, size_t> first_revive;                  // unit -> first unshard-phase collective after the forward
  std::vector<int> revive_order;                       // units in the order their revives were first issued
  std::map<int, size_t> first_reduce;                  // unit -> first grad_reduce collective
  int units = 0;
};

Timeline timeline(const std::vector<BackendEvent>& log) {
  Timeline t;
  size_t forward_end = 0;
  for (size_t i = 0; i < log.size(); ++i)
    if (!log[i].collective && log[i].what == "forward_done") forward_end = i;
  for (size_t i = 0; i < log.size(); ++i) {
    const BackendEvent& e = log[i];
    if (!e.collective) {
      t.mark.emplace(std::make_pair(e.what, e.unit), i);
      t.units = std::max(t.units, e.unit + 1);
      continue;
    }
    if (e.unit < 0) continue;
    if (e.phase == Phase::unshard && i < forward_end) t.first_unshard.emplace(e.unit, i);
    if (e.phase == Phase::unshard && i > forward_end && t.first_revive.emplace(e.unit, i).second) t.revive_order.push_back(e.unit);
    if (e.phase == Phase::grad_reduce) t.first_reduce.emplace(e.unit, i);
  }
  return t;
}

// What the log shows against what prefetch promises; empty when it keeps every promise.
std::vector<std::string> prefetch_problems(const Timeline& t) {
  std::vector<std::string> out;
  const int L = t.units;
  auto at = [&](const std::string& mark, int u) { return t.mark.at({mark, u}); };
  for (int u = 0; u + 1 < L; ++u) {
    if (!(t.first_unshard.at(u + 1) < at("forward", u)))
      out.push_back("unit " + std::to_string(u + 1) + "'s unshard was issued after unit " + std::to_string(u) +
                    "'s forward began");
    if (u > 0 && !(t.first_unshard.at(u + 1) > at("forward", u - 1)))
      out.push_back("unit " + std::to_string(u + 1) + "'s unshard was issued before unit " + std::to_string(u - 1) +
                    "'s forward (more than one unit ahead)");
  }
  std::vector<int> reverse;
  for (int u = L - 1; u >= 0; --u) reverse.push_back(u);
  if (t.revive_order != reverse) {
    std::ostringstream got;
    for (int u : t.revive_order) got << u << " ";
    out.push_back("backward revived units in the order " + got.str() + "(expected L-1 .. 0)");
  }
  for (int u = 1; u < L; ++u) {
    if (!(t.first_revive.at(u - 1) < at("backward", u)))
      out.push_back("unit " + std::to_string(u - 1) + "'s revive was issued after unit " + std::to_string(u) +
                    "'s backward began");
    if (!(t.first_revive.at(u - 1) > t.first_revive.at(u)))
      out.push_back("unit " + std::to_string(u - 1) + " was revived before unit " + std::to_string(u));
  }
  for (int u = 0; u < L; ++u)
    if (!(t.first_reduce.at(u) > at("backward", u)))
      out.push_back("unit " + std::to_string(u) + "'s gradient was reduced before its backward began");
  return out;
}

// Each rank's backend log of one run of `c` on W thread ranks.
std::vector<std::vector<BackendEvent>> logged_run(const TrainConfig& c, int W) {
  std::vector<std::vector<BackendEvent>> logs(W);
  RanksOptions ranks;
  ranks.world_size = W;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    RecordingBackend& backend = *recording(ctx.backend);
    backend.record_events(true);
    train_placement(ctx, c);
    backend.record_events(false);
    logs[ctx.rank] = backend.events();  // each rank writes its own slot
  });
  return logs;
}

std::vector<std::vector<std::string>> prefetch_run(bool prefetch, int W) {
  TrainConfig c = small_config(Placement::owner);
  c.steps = 1;
  c.runtime.prefetch = prefetch;
  std::vector<std::vector<std::string>> per_rank(W);
  const auto logs = logged_run(c, W);
  for (int r = 0; r < W; ++r) {
    const Timeline t = timeline(logs[r]);
    if (t.units != TransformerModel(c.model).num_units())
      per_rank[r].push_back("the log marks " + std::to_string(t.units) + " units");
    else
      per_rank[r] = prefetch_problems(t);
  }
  return per_rank;
}

TEST(Prefetch, TheLogShowsTheNextUnitIssuedBeforeEachComputeAndRevivesInReverse) {
  for (int W : {3, 5}) {
    const auto per_rank = prefetch_run(/*prefetch=*/true, W);
    for (size_t r = 0; r < per_rank.size(); ++r)
      for (const std::string& p : per_rank[r]) ADD_FAILURE() << "W=" << W << " rank " << r << ": " << p;
  }
}

// The control: without prefetch the same check fails (on every rank), so it measures prefetch.
TEST(Prefetch, WithoutPrefetchTheSameCheckFails) {
  const auto per_rank = prefetch_run(/*prefetch=*/false, 3);
  for (size_t r = 0; r < per_rank.size(); ++r) {
    std::string all;
    for (const std::string& p : per_rank[r]) all += p + "\n";
    EXPECT_NE(all.find("unit 1's unshard was issued after unit 0's forward began"), std::string::npos) << "rank " << r << ":\n" << all;
    EXPECT_NE(all.find("unit 0's revive was issued after unit 1's backward began"), std::string::npos) << "rank " << r << ":\n" << all;
  }
}

// ---- Groups, from the log ---------------------------------------------------------------------

struct GroupCase {
  std::string name;
  UnshardStrategy unshard = UnshardStrategy::broadcast;
  ReduceMode reduce = ReduceMode::deterministic;
  bool prefetch = false;
};

// Collectives per unit in one rank's log of a one-step run, by phase: a group (its parts share an
// id) counts once.
struct UnitCollectives {
  std::map<int, int> unshard, reduce;
  int parts = 0;  // collectives inside groups
};

UnitCollectives unit_collectives(const std::vector<BackendEvent>& log) {
  UnitCollectives out;
  std::map<int, int> last_group;  // unit -> the group id counted last
  for (const BackendEvent& e : log) {
    if (!e.collective || e.unit < 0 || (e.phase != Phase::unshard && e.phase != Phase::grad_reduce)) continue;
    if (e.group >= 0) ++out.parts;
    if (e.group >= 0 && last_group.count(e.unit) && last_group[e.unit] == e.group) continue;
    if (e.group >= 0) last_group[e.unit] = e.group;
    ++(e.phase == Phase::unshard ? out.unshard : out.reduce)[e.unit];
  }
  return out;
}

// The problems of one rank's log against the bound: per unit, one collective for its forward
// unshard and one for its backward revive (the even tail's all-gather, under allgather_even, in
// the same group); one for its gradient reduction (fast mode: the tail's reduce-scatter and the
// owned remainders' reduces in one group).
std::vector<std::string> group_problems(const GroupCase&, int units, const UnitCollectives& c) {
  std::vector<std::string> out;
  const int unshard_bound = 2, reduce_bound = 1;
  for (int u = 0; u < units; ++u) {
    const int a = c.unshard.count(u) ? c.unshard.at(u) : 0, b = c.reduce.count(u) ? c.reduce.at(u) : 0;
    if (a > unshard_bound)
      out.push_back("unit " + std::to_string(u) + ": " + std::to_string(a) + " unshard collectives (at most " +
                    std::to_string(unshard_bound) + ")");
    if (b > reduce_bound)
      out.push_back("unit " + std::to_string(u) + ": " + std::to_string(b) + " gradient-reduction collectives (at most " +
                    std::to_string(reduce_bound) + ")");
    if (b == 0) out.push_back("unit " + std::to_string(u) + ": no gradient reduction");
  }
  return out;
}

std::vector<std::string> group_run(const GroupCase& k, int W) {
  TrainConfig c = small_config(Placement::owner);
  c.steps = 1;
  c.runtime.unshard = k.unshard;
  c.runtime.reduce = k.reduce;
  c.runtime.prefetch = k.prefetch;
  const int units = TransformerModel(c.model).num_units();
  std::vector<std::string> problems;
  const auto logs = logged_run(c, W);
  for (int r = 0; r < W; ++r) {
    const UnitCollectives counted = unit_collectives(logs[r]);
    std::vector<std::string> mine = group_problems(k, units, counted);
    if (k.unshard != UnshardStrategy::per_segment && counted.parts == 0) mine.push_back("no collective was part of a group");
    for (const std::string& p : mine) problems.push_back(k.name + " at W=" + std::to_string(W) + ", rank " + std::to_string(r) + ": " + p);
  }
  return problems;
}

TEST(Groups, OwnerForwardAndBackwardIssueOneCollectivePerUnitAndDirectionEvenTailsIncluded) {
  const std::vector<GroupCase> cases{{"broadcast"},
                                     {"broadcast --prefetch", UnshardStrategy::broadcast, ReduceMode::deterministic, true},
                                     {"broadcast --fast", UnshardStrategy::broadcast, ReduceMode::fast},
                                     {"allgather_even --fast --prefetch", UnshardStrategy::allgather_even, ReduceMode::fast, true},
                                     {"allgather_even", UnshardStrategy::allgather_even}};
  for (int W : {3, 5})
    for (const GroupCase& k : cases)
      for (const std::string& p : group_run(k, W)) ADD_FAILURE() << p;
}

// The control: one broadcast per segment, each a collective of its own, breaks the bound.
TEST(Groups, OneBroadcastPerSegmentBreaksTheBound) {
  const std::vector<std::string> problems = group_run({"per_segment", UnshardStrategy::per_segment}, 3);
  std::string all;
  for (const std::string& p : problems) all += p + "\n";
  EXPECT_NE(all.find("unshard collectives (at most 2)"), std::string::npos) << all;
}

// Model-wide groups (--comm-groups model): in the backend's own log, one step's unshard is one
// group (every unit's parts under one id) and its gradient reduction another; nothing of either
// phase travels outside them, and no unit is revived (its second unshard).
TEST(Groups, ModelWideGroupsAreOneCollectiveAForwardAndOneABackward) {
  for (int W : {3, 5})
    for (auto [unshard, reduce] : {std::pair{UnshardStrategy::broadcast, ReduceMode::deterministic},
                                   std::pair{UnshardStrategy::allgather_even, ReduceMode::fast}}) {
      TrainConfig c = small_config(Placement::owner);
      c.steps = 1;
      c.runtime.unshard = unshard, c.runtime.reduce = reduce;
      c.runtime.comm_groups = CommGroups::model;
      const int units = TransformerModel(c.model).num_units();
      const auto logs = logged_run(c, W);
      for (int r = 0; r < W; ++r) {
        const std::string where = std::string(to_string(unshard)) + " " + to_string(reduce) + " at W=" + std::to_string(W) +
                                  ", rank " + std::to_string(r);
        std::set<int> unshard_groups, reduce_groups, unshard_units;
        int ungrouped = 0;
        for (const BackendEvent& e : logs[r]) {
          if (!e.collective || e.unit < 0 || (e.phase != Phase::unshard && e.phase != Phase::grad_reduce)) continue;
          if (e.group < 0) ++ungrouped;
          (e.phase == Phase::unshard ? unshard_groups : reduce_groups).insert(e.group);
          if (e.phase == Phase::unshard) unshard_units.insert(e.unit);
        }
        EXPECT_EQ(unshard_groups.size(), 1u) << where << ": the unshard travelled in " << unshard_groups.size() << " groups";
        EXPECT_EQ(reduce_groups.size(), 1u) << where << ": the reduction travelled in " << reduce_groups.size() << " groups";
        EXPECT_EQ(ungrouped, 0) << where << ": " << ungrouped << " collectives outside the groups";
        EXPECT_EQ(static_cast<int>(unshard_units.size()), units) << where << ": the group moved " << unshard_units.size()
                                                                 << " of the " << units << " units";
        const UnitCollectives counted = unit_collectives(logs[r]);
        for (const auto& [u, n] : counted.unshard) EXPECT_EQ(n, 1) << where << ": unit " << u << " unsharded " << n << " times";
      }
    }
}

}  // namespace
}  // namespace mfsdp
