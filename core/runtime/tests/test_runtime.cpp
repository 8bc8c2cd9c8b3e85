// The owner-shaped runtime on the tiny model, for W in 1..5, two planners, both tail policies, fp32
// and bf16, plain, tied and MoE models: unshard is exact, pinned views are revived in place, owners
// get the rank-order mean of every rank's gradient bit for bit, the step communicates nothing, and
// memory matches the model. The cases are the rows of the designed covering array
// regression/grid/runtime_array.json (design.py --table runtime: every pair of factor values, every
// triple of its sub-models); their whole product is label exhaustive.
#include "core/train/data.h"
#include "core/plan/memory_model.h"
#include "core/train/model.h"
#include "core/plan/planner.h"
#include "core/dist/ranks.h"
#include "core/dist/mesh.h"
#include "core/runtime/reduction.h"
#include "core/runtime/owner_runtime.h"
#include "core/util/tensor_compare.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/softmax.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/autograd.h>

#include <fstream>
#include <limits>
#include <map>
#include <mutex>

namespace mfsdp {
namespace {

TransformerConfig tiny() {
  TransformerConfig c = preset_config("tiny");
  c.layers = 2;
  return c;
}

RanksOptions world(int w) {
  RanksOptions o;
  o.world_size = w;
  o.timeout = std::chrono::seconds(60);
  return o;
}

// One owner-shaped forward and backward of a batch; returns the loss.
at::Tensor forward_backward(OwnerRuntime& rt, const TransformerModel& model, const at::Tensor& tokens,
                            const at::Tensor& targets) {
  at::Tensor x = tokens;
  for (int u = 0; u < rt.num_units(); ++u) {
    ParamMap p = rt.unshard(u);
    x = model.unit_forward(u, x, p, targets);
    x = rt.after_forward(u, x);
  }
  x.backward();
  return x;
}

struct GridCase {
  int id = -1;  // the array's row id; -1 in the whole product
  int world_size;
  PlannerKind planner;
  TailPolicy tail;
  c10::ScalarType param_dtype = c10::kFloat;  // bf16: compute copies of float32 masters
  bool tied = false;  // --tie-embeddings: the embedding unit lends embed.weight to the head
  bool moe = false;   // --experts 5 --top-k 2: expert tensors in ranges (copied out like even shards)
};

// The rank-order mean written out here, independent of core/runtime/reduction: contributions
// added left to right in float32, divided by W once, in the master dtype.
at::Tensor expected_mean(const std::vector<at::Tensor>& parts, c10::ScalarType master) {
  at::Tensor acc = parts[0].to(at::kFloat, false, /*copy=*/true);
  for (size_t r = 1; r < parts.size(); ++r) acc = acc + parts[r].to(at::kFloat);
  return (acc / static_cast<double>(parts.size())).to(master);
}

// How gtest prints a case (instead of its bytes).
void PrintTo(const GridCase& c, std::ostream* os) {
  if (c.id >= 0) *os << "runtime array row " << c.id;
  else *os << "runtime product case";
}

class RuntimeGridRow : public ::testing::TestWithParam<GridCase> {};

TEST_P(RuntimeGridRow, LifecycleGradientsCommunicationAndMemory) {
  const GridCase gc = GetParam();
  TransformerConfig config = tiny();
  config.tie_embeddings = gc.tied;
  if (gc.moe) config.experts = 5, config.top_k = 2, config.moe_intermediate = 48;
  const TransformerModel model(config);
  const ParamMap init = model.init(/*seed=*/7);
  const ByteCorpus corpus = ByteCorpus::load();
  PlannerOptions popts;
  popts.planner = gc.planner;
  popts.tail_policy = gc.tail;
  const OwnershipPlan plan = make_plan(model.spec(), gc.world_size, popts);
  PrecisionPolicy precision;
  precision.param_dtype = gc.param_dtype;
  const bool casts = precision.casts(c10::kFloat);
  MemoryModelOptions mopts;
  mopts.precision = precision;
  const PlanUsage usage = plan_usage(plan, mopts);

  std::mutex mutex;
  std::vector<ParamMap> local_grads(gc.world_size);  // each rank's own gradient, computed plainly
  std::vector<std::string> problems;
  auto problem = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    problems.push_back(what);
  };

  run_ranks_as_threads(world(gc.world_size), [&](RankContext& ctx) {
    const int me = ctx.rank;
    auto [tokens, targets] = corpus.batch(/*seed=*/3, /*step=*/0, me, /*batch=*/2, /*seq=*/16);
    Communicator comm(ctx.backend);
    RuntimeOptions pinned_opts;  // reshard after forward: pinned, revived in backward
    pinned_opts.precision = precision;
    RuntimeOptions kept_opts = pinned_opts;
    kept_opts.reshard_after_forward = false;  // the control: never reshards
    OwnerRuntime rt(plan, comm, pinned_opts, init);
    OwnerRuntime control(plan, comm, kept_opts, init);

    // 1. Unshard reconstructs the initial parameters' compute copies bit for bit (each unit's
    // full views), by either strategy; the gathered masters are the initial masters.
    for (UnshardStrategy strategy : {UnshardStrategy::allgather_even, UnshardStrategy::broadcast}) {
      RuntimeOptions o = pinned_opts;
      o.unshard = strategy;
      OwnerRuntime other(plan, comm, o, init);
      for (int u = 0; u < other.num_units(); ++u) {
        Unit& unit = other.unit(u);
        unit.unshard();
        const std::vector<at::Tensor> views = unit.full_views();
        for (size_t k = 0; k < views.size(); ++k) {
          const std::string& name = plan.shards()[unit.shards()[k]].name;
          const at::Tensor value = init.at(name).to(gc.param_dtype);
          TensorDiff d = diff(views[k], value);
          if (!d.bitwise_equal || views[k].scalar_type() != gc.param_dtype)
            problem("rank " + std::to_string(me) + " " + to_string(strategy) + " unshard of " + name + ": " + describe(d, views[k], value));
        }
        unit.reshard(/*keep_for_backward=*/false);
      }
      ParamMap gathered = other.gather_full_params();
      for (const auto& [name, value] : init) {
        TensorDiff d = diff(gathered.at(name), value);
        if (!d.bitwise_equal) problem("rank " + std::to_string(me) + " masters of " + name + ": " + describe(d, gathered.at(name), value));
      }
    }

    // 2. Forward moves exactly the segments this rank does not store; pinned views stay bound.
    comm.reset_counters();
    std::vector<const c10::StorageImpl*> storage_in_forward;
    std::vector<std::string> forward_problems;
    {
      at::Tensor x = tokens;
      for (int u = 0; u < rt.num_units(); ++u) {
        ParamMap p = rt.unshard(u);
        x = model.unit_forward(u, x, p, targets);
        x = rt.after_forward(u, x);
        Unit& unit = rt.unit(u);
        storage_in_forward.push_back(unit.gathered_storage_impl());
        // A unit lending a tied parameter stays gathered until its backward.
        const bool lends = gc.tied && u == 0;
        if (lends ? unit.state() != UnitState::unsharded : unit.state() != UnitState::pinned || unit.gathered_bytes() != 0)
          forward_problems.push_back("unit " + unit.name() + (lends ? " is not kept gathered after forward" : " is not pinned with 0 bytes after forward"));
        for (int b : plan.units()[u].borrowed)  // the borrowed view is the lender's
          if (p.at(plan.shards()[b].name).storage().unsafeGetStorageImpl() != rt.unit(plan.shards()[b].unit).gathered_storage_impl() &&
              !(plan.shards()[b].owned() && plan.shards()[b].owner == me && !casts))
            forward_problems.push_back("borrowed " + plan.shards()[b].name + " is not a view of its lender's gathered storage");
        for (int s : unit.shards()) {
          const MatrixShard& shard = plan.shards()[s];
          const bool own = shard.owned() && shard.owner == me && !casts;  // a cast copy lives in gathered
          const c10::StorageImpl* where = p.at(shard.name).storage().unsafeGetStorageImpl();
          if (!own && where != unit.gathered_storage_impl()) forward_problems.push_back(shard.name + " is not a view of the gathered storage");
          if (own && where != unit.segment().storage().unsafeGetStorageImpl()) forward_problems.push_back(shard.name + " is owned here but not a view of the segment");
        }
      }
      int64_t expected_recv = 0;
      for (const UnitLayout& u : plan.units())
        for (int r = 0; r < gc.world_size; ++r)
          if (r != me) expected_recv += u.segments[r].numel * static_cast<int64_t>(c10::elementSize(gc.param_dtype));
      if (comm.counters(Phase::unshard).bytes_recv != expected_recv)
        problem("rank " + std::to_string(me) + " unshard received " + std::to_string(comm.counters(Phase::unshard).bytes_recv) +
                " bytes, expected " + std::to_string(expected_recv));
      x.backward();  // revives every unit in place, then reduces to owners
    }
    for (int u = 0; u < rt.num_units(); ++u) {
      if (rt.unit(u).gathered_storage_impl() != storage_in_forward[u]) forward_problems.push_back("unit storage replaced");
      if (rt.unit(u).state() != UnitState::sharded) forward_problems.push_back("unit not sharded after backward");
    }
    for (const auto& p : forward_problems) problem("rank " + std::to_string(me) + ": " + p);

    // 3. Backward after reshard equals backward without reshard, bitwise.
    forward_backward(control, model, tokens, targets);
    for (const MatrixShard& s : plan.shards()) {
      at::Tensor a = rt.local_grad(s.name), b = control.local_grad(s.name);
      if (a.defined() != b.defined() || (a.defined() && !bitwise_equal(a, b)))
        problem("rank " + std::to_string(me) + " grad of " + s.name + " differs between pinned/revived and never-resharded runs");
    }

    // 4. Owners hold the rank-order mean of every rank's independently computed gradient.
    {
      ParamMap leaves;
      for (const auto& [name, value] : init) leaves.emplace(name, value.to(gc.param_dtype, false, true).set_requires_grad(true));
      model.loss(tokens, targets, leaves).backward();
      ParamMap grads;
      for (auto& [name, leaf] : leaves) grads.emplace(name, leaf.grad());
      std::lock_guard<std::mutex> lock(mutex);
      local_grads[me] = std::move(grads);
    }
    ctx.backend->barrier()->wait();
    for (const MatrixShard& s : plan.shards()) {
      at::Tensor mine = rt.local_grad(s.name);
      if (!mine.defined()) continue;
      std::vector<at::Tensor> parts;
      for (int r = 0; r < gc.world_size; ++r) parts.push_back(local_grads[r].at(s.name));
      at::Tensor expected = expected_mean(parts, s.dtype);
      for (const ShardSlice& sl : s.slices)
        if (sl.rank == me) expected = expected.narrow(0, sl.row_begin, sl.rows);
      TensorDiff d = diff(mine, expected);
      if (!d.bitwise_equal) problem("rank " + std::to_string(me) + " owner grad of " + s.name + ": " + describe(d, mine, expected));
    }

    // 4b. Prefetch (the next unit's unshard and the previous unit's revive in flight during
    // compute) issues the same collectives and gives the same bits, with at most two units'
    // gathered memory resident.
    {
      RuntimeOptions prefetch_opts = pinned_opts;
      prefetch_opts.prefetch = true;
      OwnerRuntime prefetched(plan, comm, prefetch_opts, init);
      comm.reset_counters();
      forward_backward(prefetched, model, tokens, targets);
      const PhaseCounters unshard = comm.counters(Phase::unshard);
      comm.reset_counters();
      forward_backward(control, model, tokens, targets);
      const PhaseCounters control_unshard = comm.counters(Phase::unshard);
      // Forward + revive vs forward only; a unit lending a tied parameter is never revived (it
      // stays gathered), and stays resident under every pair.
      int64_t lender_recv = 0, lender_capacity = 0;
      if (gc.tied) {
        for (int r = 0; r < gc.world_size; ++r)
          if (r != me) lender_recv += plan.units()[0].segments[r].numel * static_cast<int64_t>(c10::elementSize(gc.param_dtype));
        lender_capacity = rt.unit(0).gathered_capacity();
      }
      if (unshard.bytes_recv != 2 * control_unshard.bytes_recv - lender_recv)
        problem("rank " + std::to_string(me) + " prefetch moved " + std::to_string(unshard.bytes_recv) + " unshard bytes, expected " +
                std::to_string(2 * control_unshard.bytes_recv - lender_recv));
      int64_t pair_bound = 0;
      for (int u = 0; u < rt.num_units(); ++u) {
        const int64_t next = u + 1 < rt.num_units() ? rt.unit(u + 1).gathered_capacity() : 0;
        pair_bound = std::max(pair_bound, rt.unit(u).gathered_capacity() + next + lender_capacity);
      }
      if (prefetched.peak_gathered_bytes() > pair_bound)
        problem("rank " + std::to_string(me) + " prefetch peak gathered " + std::to_string(prefetched.peak_gathered_bytes()) +
                " bytes exceeds two consecutive units (" + std::to_string(pair_bound) + ")");
      for (const MatrixShard& s : plan.shards()) {
        at::Tensor a = prefetched.local_grad(s.name), b = rt.local_grad(s.name);
        if (a.defined() && !bitwise_equal(a, b))
          problem("rank " + std::to_string(me) + " grad of " + s.name + " differs with prefetch");
      }
    }

    // 4c. Fast mode (reduce-scatter of the even tail, native reduce of owned remainders) gives
    // owners the same mean up to summation order.
    {
      RuntimeOptions fast_opts = pinned_opts;
      fast_opts.reduce = ReduceMode::fast;
      OwnerRuntime fast(plan, comm, fast_opts, init);
      forward_backward(fast, model, tokens, targets);
      for (const MatrixShard& s : plan.shards()) {
        at::Tensor a = fast.local_grad(s.name), b = rt.local_grad(s.name);
        if (!a.defined()) continue;
        const TensorDiff d = diff(a, b);
        if (d.max_abs_diff > 1e-6 + 1e-5 * b.abs().max().item<double>())
          problem("rank " + std::to_string(me) + " fast-mode grad of " + s.name + ": " + describe(d, a, b));
      }
    }

    // 4d. Model-wide groups (CommGroups::model): the whole forward's unshard is one collective
    // and the whole backward's reduction another, moving the bytes of the never-resharding control
    // and giving the same bits, with every unit gathered at once.
    {
      RuntimeOptions model_opts = pinned_opts;
      model_opts.comm_groups = CommGroups::model;
      OwnerRuntime grouped(plan, comm, model_opts, init);
      comm.reset_counters();
      forward_backward(grouped, model, tokens, targets);
      const PhaseCounters unshard = comm.counters(Phase::unshard), reduce = comm.counters(Phase::grad_reduce);
      comm.reset_counters();
      forward_backward(control, model, tokens, targets);
      const PhaseCounters control_unshard = comm.counters(Phase::unshard), control_reduce = comm.counters(Phase::grad_reduce);
      const int64_t one = gc.world_size > 1 ? 1 : 0;  // W = 1 moves nothing and groups nothing
      const int64_t expected_unshard = gc.world_size > 1 ? 1 : control_unshard.calls;
      if (unshard.calls != expected_unshard || unshard.bytes_recv != control_unshard.bytes_recv || unshard.parts != control_unshard.parts)
        problem("rank " + std::to_string(me) + " model groups: unshard " + std::to_string(unshard.calls) + " calls, " +
                std::to_string(unshard.parts) + " parts, " + std::to_string(unshard.bytes_recv) + " bytes; expected " +
                std::to_string(one) + " call, the control's " + std::to_string(control_unshard.parts) + " parts and " +
                std::to_string(control_unshard.bytes_recv) + " bytes");
      // The control's per-unit reductions become one; the non-finite flags' all-reduce stays.
      const int64_t expected_reduce = control_reduce.calls - one * rt.num_units() + one;
      if (reduce.calls != expected_reduce || reduce.bytes_sent != control_reduce.bytes_sent)
        problem("rank " + std::to_string(me) + " model groups: gradient reduction " + std::to_string(reduce.calls) + " calls, " +
                std::to_string(reduce.bytes_sent) + " bytes; expected " + std::to_string(expected_reduce) + " and " +
                std::to_string(control_reduce.bytes_sent) + " bytes");
      int64_t every_unit = 0;
      for (int u = 0; u < rt.num_units(); ++u) every_unit += rt.unit(u).gathered_capacity();
      if (grouped.peak_gathered_bytes() != every_unit)
        problem("rank " + std::to_string(me) + " model groups: peak gathered " + std::to_string(grouped.peak_gathered_bytes()) +
                " bytes, expected every unit's " + std::to_string(every_unit));
      for (const MatrixShard& s : plan.shards()) {
        at::Tensor a = grouped.local_grad(s.name), b = rt.local_grad(s.name);
        if (a.defined() && !bitwise_equal(a, b))
          problem("rank " + std::to_string(me) + " grad of " + s.name + " differs with model groups");
      }
    }

    // 5. The step issues no collective and moves no byte.
    comm.reset_counters();
    rt.step();
    const PhaseCounters all = comm.total();
    if (all.calls != 0 || all.bytes_sent != 0 || all.bytes_recv != 0)
      problem("rank " + std::to_string(me) + " step communicated: " + std::to_string(all.calls) + " calls");

    // 6. Memory after a step equals the planner's model; gathered memory is back to zero.
    const RankUsage& model_usage = usage.ranks[me];
    if (rt.resident_bytes() != model_usage.resident_bytes)
      problem("rank " + std::to_string(me) + " resident " + std::to_string(rt.resident_bytes()) + " bytes, model says " +
              std::to_string(model_usage.resident_bytes));
    if (rt.gathered_bytes() != 0) problem("rank " + std::to_string(me) + " still holds gathered memory after the step");
    if (rt.peak_gathered_bytes() != model_usage.transient_bytes)
      problem("rank " + std::to_string(me) + " peak gathered " + std::to_string(rt.peak_gathered_bytes()) +
              " bytes, model says " + std::to_string(model_usage.transient_bytes));

    // 7. An illegal lifecycle move throws naming both states and leaves the unit usable.
    try {
      rt.unit(0).transition(UnitState::pinned);
      problem("sharded -> pinned was accepted");
    } catch (const c10::Error& e) {
      if (std::string(e.what_without_backtrace()).find("illegal lifecycle move sharded -> pinned") == std::string::npos)
        problem(std::string("unexpected message: ") + e.what_without_backtrace());
    }
    forward_backward(rt, model, tokens, targets);  // still usable
    rt.step();
  });
  for (const auto& p : problems) ADD_FAILURE() << p;
}

GridCase case_of(const nlohmann::json& j) {
  GridCase c{.world_size = j.at("W").get<int>(),
             .planner = planner_kind_from_string(j.at("planner").get<std::string>()),
             .tail = tail_policy_from_string(j.at("tail").get<std::string>())};
  c.id = j.value("id", -1);
  const std::string precision = j.at("precision"), model = j.at("model");
  if (precision != "fp32" && precision != "bf16") throw std::invalid_argument("runtime grid: unknown precision '" + precision + "'");
  if (model != "plain" && model != "tied" && model != "moe") throw std::invalid_argument("runtime grid: unknown model '" + model + "'");
  c.param_dtype = precision == "bf16" ? c10::kBFloat16 : c10::kFloat;
  c.tied = model == "tied";
  c.moe = model == "moe";
  return c;
}

nlohmann::json runtime_array() {
  std::ifstream in(MFSDP_RUNTIME_GRID_ARRAY);
  if (!in) return nlohmann::json::object();  // RuntimeGridArray.IsReadable then fails naming the file
  return nlohmann::json::parse(in);
}

// The designed rows.
std::vector<GridCase> array_cases() {
  std::vector<GridCase> cases;
  const nlohmann::json doc = runtime_array();
  if (doc.contains("rows"))
    for (const auto& row : doc.at("rows")) cases.push_back(case_of(row));
  return cases;
}

// The whole product of the array's factor table (label exhaustive): the runtime table has no
// constraints, so every combination is a case.
std::vector<GridCase> product_cases() {
  const nlohmann::json doc = runtime_array();
  if (!doc.contains("factors")) return {};
  std::vector<nlohmann::json> rows{nlohmann::json::object()};
  for (const auto& [name, values] : doc.at("factors").items()) {
    std::vector<nlohmann::json> more;
    for (const auto& row : rows)
      for (const auto& v : values) {
        nlohmann::json r = row;
        r[name] = v;
        more.push_back(std::move(r));
      }
    rows = std::move(more);
  }
  std::vector<GridCase> cases;
  for (const auto& r : rows) cases.push_back(case_of(r));
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<GridCase>& info) {
  std::string name = info.param.id >= 0 ? "row" + std::to_string(info.param.id) + "_" : "";
  name += "W" + std::to_string(info.param.world_size) + "_" + to_string(info.param.planner) + "_" + to_string(info.param.tail);
  if (info.param.param_dtype == c10::kBFloat16) name += "_bf16";
  if (info.param.tied) name += "_tied";
  if (info.param.moe) name += "_moe";
  return name;
}

INSTANTIATE_TEST_SUITE_P(Array, RuntimeGridRow, ::testing::ValuesIn(array_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Product, RuntimeGridRow, ::testing::ValuesIn(product_cases()), case_name);

TEST(RuntimeGridArray, IsReadable) {
  EXPECT_GT(array_cases().size(), 0u) << "no rows read from " << MFSDP_RUNTIME_GRID_ARRAY;
}

// bf16 contributions of widely spread magnitudes (W = 5): the shared routine equals the float32
// rank-order loop above, and each alternative a change could introduce (bf16 accumulation,
// reversed order, dividing every contribution) gives different bits on this input, so none of them
// passes unseen.
TEST(Reduction, Bf16ContributionsAccumulateInFloat32InRankOrderAndDivideOnce) {
  constexpr int W = 5;
  at::Generator gen = at::detail::createCPUGenerator(17);
  std::vector<at::Tensor> parts;
  for (int r = 0; r < W; ++r) {
    at::Tensor magnitude = at::empty({4096}).uniform_(-30, 4, gen).exp2();
    parts.push_back((at::empty({4096}).normal_(0, 1, gen) * magnitude).to(at::kBFloat16));
  }
  const at::Tensor got = mean_in_rank_order(parts, at::kFloat);
  EXPECT_TRUE(bitwise_equal(got, expected_mean(parts, at::kFloat)));
  at::Tensor bf16_acc = parts[0].clone();
  for (int r = 1; r < W; ++r) bf16_acc = bf16_acc + parts[r];
  EXPECT_FALSE(bitwise_equal(got, (bf16_acc / double{W}).to(at::kFloat))) << "bf16 accumulation is not seen";
  std::vector<at::Tensor> reversed(parts.rbegin(), parts.rend());
  EXPECT_FALSE(bitwise_equal(got, expected_mean(reversed, at::kFloat))) << "reversed order is not seen";
  at::Tensor each = parts[0].to(at::kFloat) / double{W};
  for (int r = 1; r < W; ++r) each = each + parts[r].to(at::kFloat) / double{W};
  EXPECT_FALSE(bitwise_equal(got, each)) << "dividing each contribution is not seen";
}

// MoE routing picks by a stable descending sort: equal router scores go to the lower expert. With
// every router weight zero each token's scores tie exactly (1/E each), so each token must pick
// experts 0 .. top_k - 1 and only those get gradients (a top-k by partial selection, or an unstable
// sort, may pick others among ties; bf16 router scores tie often).
TEST(MoeRouting, TiedScoresPickTheLowestExperts) {
  TransformerConfig config = tiny();
  config.experts = 6, config.top_k = 2, config.moe_intermediate = 16;
  const TransformerModel model(config);
  const ByteCorpus corpus = ByteCorpus::load();
  auto [tokens, targets] = corpus.batch(3, 0, 0, 2, 16);
  ParamMap p;
  for (auto& [name, v] : model.init(7)) {
    if (name.find("moe.router") != std::string::npos) v.zero_();
    p.emplace(name, v.set_requires_grad(true));
  }
  const at::Tensor loss = model.loss(tokens, targets, p);
  std::vector<at::Tensor> inputs;
  std::vector<std::string> names;
  for (auto& [name, v] : p)
    if (name.find("moe.experts.gate") != std::string::npos) inputs.push_back(v), names.push_back(name);
  ASSERT_FALSE(inputs.empty());
  const auto grads = torch::autograd::grad({loss}, inputs);
  for (size_t i = 0; i < grads.size(); ++i)
    for (int64_t e = 0; e < config.experts; ++e) {
      const bool touched = grads[i].select(0, e).abs().sum().item<float>() > 0;
      EXPECT_EQ(touched, e < config.top_k) << names[i] << ": expert " << e;
    }
}

// What stays float32 under a bf16 compute dtype (docs/precision.md): RMSNorm's normalisation, the
// attention softmax and the loss; each is checked against its float32 formula and seen to differ
// from the all-bf16 one. Unit outputs are bf16, float32 with an output dtype, and that cast
// changes no bit of the loss or the gradients.
TEST(Precision, NormSoftmaxAndLossRunInFloat32UnderBf16) {
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor x = (at::empty({2, 5, 64}).normal_(3, 1, gen)).to(at::kBFloat16);
  const at::Tensor w = at::empty({64}).normal_(1, 0.1, gen).to(at::kBFloat16);
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor normed = rms_norm(x, w);
  EXPECT_EQ(normed.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(bitwise_equal(normed, (xf * (xf.pow(2).mean({-1}, true) + 1e-6).rsqrt()).to(at::kBFloat16) * w));
  EXPECT_FALSE(bitwise_equal(normed, x * (x.pow(2).mean({-1}, true) + 1e-6).rsqrt() * w)) << "an all-bf16 RMSNorm is not seen";
  const at::Tensor scores = (at::empty({2, 4, 8, 8}).normal_(0, 4, gen)).to(at::kBFloat16);
  const at::Tensor probs = attention_softmax(scores, at::kBFloat16);
  EXPECT_TRUE(bitwise_equal(probs, at::softmax(scores.to(at::kFloat), -1).to(at::kBFloat16)));
  // (ATen's own bf16 softmax kernel already works in float32 on the CPU; one with bf16
  // intermediates gives other bits.)
  const at::Tensor e = (scores - std::get<0>(scores.max(-1, true))).exp();
  EXPECT_FALSE(bitwise_equal(probs, e / e.sum(-1, true))) << "a softmax with bf16 intermediates is not seen";

  const TransformerConfig config = tiny();
  const ByteCorpus corpus = ByteCorpus::load();
  auto [tokens, targets] = corpus.batch(3, 0, 0, 2, 16);
  ParamMap grads_plain, grads_output;
  auto run = [&](const TransformerModel& model, ParamMap& grads) {
    ParamMap p;
    for (auto& [name, v] : model.init(7)) p.emplace(name, v.to(at::kBFloat16).set_requires_grad(true));
    at::Tensor h = tokens;
    for (int u = 0; u + 1 < model.num_units(); ++u) {
      h = model.unit_forward(u, h, p, targets);
      EXPECT_EQ(h.scalar_type(), model.output_dtype().value_or(at::kBFloat16)) << "unit " << u;
    }
    at::Tensor loss = model.unit_forward(model.num_units() - 1, h, p, targets);
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    loss.backward();
    for (auto& [name, v] : p) grads.emplace(name, v.grad());
    return loss;
  };
  const at::Tensor plain = run(TransformerModel(config), grads_plain);
  const at::Tensor with_output = run(TransformerModel(config, at::kFloat), grads_output);
  EXPECT_TRUE(bitwise_equal(plain, with_output));
  for (const auto& [name, g] : grads_plain) EXPECT_TRUE(bitwise_equal(g, grads_output.at(name))) << name;
}

// finish_backward runs once per backward (autograd's final callback): called again, it is refused
// instead of combining HSDP's partial sums a second time (seen as wrong gradients on a 2 x 2 mesh).
TEST(RuntimeErrors, FinishingABackwardTwiceIsRefused) {
  const TransformerModel model(tiny());
  const ParamMap init = model.init(1);
  const ByteCorpus corpus = ByteCorpus::load();
  run_ranks_as_threads(world(4), [&](RankContext& ctx) {
    Mesh mesh = make_mesh(ctx, 2);
    const OwnershipPlan plan = make_plan(model.spec(), 2, PlannerOptions{});
    RuntimeOptions opts;
    opts.replicas = 2;
    OwnerRuntime rt(plan, *mesh.shard, opts, init, mesh.replicate.get());
    auto [tokens, targets] = corpus.batch(1, 0, ctx.rank, 1, 4);
    forward_backward(rt, model, tokens, targets);
    try {
      rt.finish_backward();
      ADD_FAILURE() << "rank " << ctx.rank << ": a second finish_backward was accepted";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find("finish_backward with no backward pass to finish"), std::string::npos)
          << e.what_without_backtrace();
    }
  });
}

TEST(RuntimeErrors, MismatchedPlansFailBeforeAnyUnitCollective) {
  const TransformerModel model(tiny());
  const ParamMap init = model.init(1);
  PlannerOptions a, b;
  a.planner = PlannerKind::balanced;
  b.planner = PlannerKind::round_robin;
  const OwnershipPlan plan_a = make_plan(model.spec(), 2, a), plan_b = make_plan(model.spec(), 2, b);
  try {
    run_ranks_as_threads(world(2), [&](RankContext& ctx) {
      Communicator comm(ctx.backend);
      OwnerRuntime rt(ctx.rank == 0 ? plan_a : plan_b, comm, RuntimeOptions{}, init);
    });
    FAIL() << "expected mismatched plans to fail";
  } catch (const RankError& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks hold different plans"), std::string::npos) << e.what();
  }
}

TEST(RuntimeErrors, InitialValuesMustMatchThePlan) {
  const TransformerModel model(tiny());
  ParamMap init = model.init(1);
  const OwnershipPlan plan = make_plan(model.spec(), 1, PlannerOptions{});
  init.erase("layers.1.mlp.up.weight");
  try {
    run_ranks_as_threads(world(1), [&](RankContext& ctx) {
      Communicator comm(ctx.backend);
      OwnerRuntime rt(plan, comm, RuntimeOptions{}, init);
    });
    FAIL() << "expected a missing parameter to fail";
  } catch (const RankError& e) {
    EXPECT_NE(std::string(e.what()).find("'layers.1.mlp.up.weight' has no initial value"), std::string::npos) << e.what();
  }
}

TEST(RuntimeErrors, NonFiniteGradientsFailNamingTheParameterOrSkip) {
  const TransformerModel model(tiny());
  ParamMap init = model.init(1);
  init.at("layers.1.mlp.down.weight").index_put_({0, 0}, std::numeric_limits<float>::infinity());
  const ByteCorpus corpus = ByteCorpus::load();
  const OwnershipPlan plan = make_plan(model.spec(), 2, PlannerOptions{});
  for (NonFinitePolicy policy : {NonFinitePolicy::fail, NonFinitePolicy::skip}) {
    std::mutex m;
    std::vector<std::string> outcomes;
    try {
      run_ranks_as_threads(world(2), [&](RankContext& ctx) {
        Communicator comm(ctx.backend);
        RuntimeOptions o;
        o.non_finite = policy;
        OwnerRuntime rt(plan, comm, o, init);
        auto [tokens, targets] = corpus.batch(0, 0, ctx.rank, 2, 8);
        forward_backward(rt, model, tokens, targets);
        ParamMap before = rt.gather_full_params();
        comm.reset_counters();
        StepReport r = rt.step();
        EXPECT_EQ(comm.total().calls, 0);
        std::lock_guard<std::mutex> lock(m);
        outcomes.push_back(r.skipped ? "skipped:" + r.non_finite_parameter : "stepped");
      });
    } catch (const RankError& e) {
      EXPECT_EQ(policy, NonFinitePolicy::fail);
      EXPECT_NE(std::string(e.what()).find("non-finite gradient in parameter '"), std::string::npos) << e.what();
      continue;
    }
    EXPECT_EQ(policy, NonFinitePolicy::skip);
    ASSERT_EQ(outcomes.size(), 2u);
    for (const auto& o : outcomes) EXPECT_EQ(o.rfind("skipped:", 0), 0u) << o;
  }
}

// One step of `rt` whose gradient of `poisoned` this rank makes infinite (when `poison`): "stepped",
// "skipped <parameter>", "failed" (the non-finite error naming it), or any other error's text.
std::string poisoned_step(OwnerRuntime& rt, const TransformerModel& model, const ByteCorpus& corpus, int rank, bool poison,
                          const std::string& poisoned) {
  auto [tokens, targets] = corpus.batch(0, 0, rank, 2, 8);
  at::Tensor x = tokens;
  for (int u = 0; u < rt.num_units(); ++u) {
    ParamMap p = rt.unshard(u);
    if (poison && p.count(poisoned))  // this rank's contribution only
      p.at(poisoned).register_hook([](const at::Tensor& g) { return g * std::numeric_limits<float>::infinity(); });
    x = model.unit_forward(u, x, p, targets);
    x = rt.after_forward(u, x);
  }
  x.backward();
  try {
    const StepReport report = rt.step();
    return report.skipped ? "skipped " + report.non_finite_parameter : "stepped";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    return what.find("non-finite gradient in parameter '" + poisoned + "'") != std::string::npos ? "failed" : what;
  }
}

// What must not happen: a non-finite gradient that only one rank's contribution carries lands on
// one owner; an owner deciding alone would skip (or fail) a step that the other ranks take, and
// the ranks would silently diverge. Every rank must make the owner's decision, at every W.
TEST(RuntimeErrors, NonFiniteFromOneRankIsDecidedTogetherByEveryRank) {
  const TransformerModel model(tiny());
  const ParamMap init = model.init(1);
  const ByteCorpus corpus = ByteCorpus::load();
  const std::string poisoned = "layers.1.mlp.down.weight";
  for (int W : {2, 3, 5}) {
    const OwnershipPlan plan = make_plan(model.spec(), W, PlannerOptions{});
    const int owner = plan.shard(poisoned).owner;
    const int bad_rank = (owner + 1) % W;  // not the owner: the decision has to travel
    for (NonFinitePolicy policy : {NonFinitePolicy::fail, NonFinitePolicy::skip}) {
      std::mutex m;
      std::map<int, std::string> outcome;
      run_ranks_as_threads(world(W), [&](RankContext& ctx) {
        Communicator comm(ctx.backend);
        RuntimeOptions o;
        o.non_finite = policy;
        OwnerRuntime rt(plan, comm, o, init);
        const std::string r = poisoned_step(rt, model, corpus, ctx.rank, ctx.rank == bad_rank, poisoned);
        std::lock_guard<std::mutex> lock(m);
        outcome[ctx.rank] = r;
      });
      ASSERT_EQ(static_cast<int>(outcome.size()), W);
      const std::string want = policy == NonFinitePolicy::fail ? "failed" : "skipped " + poisoned;
      for (const auto& [rank, r] : outcome)
        EXPECT_EQ(r, want) << "W=" << W << " rank " << rank << " (owner " << owner << ", non-finite contribution from rank "
                           << bad_rank << ")";
    }
  }
}

// HSDP dedup: a shard's mean exists only on its stepping replica, so a non-finite contribution
// from a rank of that replica is seen there alone (the other replica holds a finite partial sum).
// Every rank of the whole mesh must still make the same decision.
TEST(RuntimeErrors, NonFiniteSeenByTheSteppingReplicaAloneIsDecidedByTheWholeMesh) {
  const TransformerModel model(tiny());
  const ParamMap init = model.init(1);
  const ByteCorpus corpus = ByteCorpus::load();
  const std::string poisoned = "layers.1.mlp.down.weight";
  constexpr int R = 2, S = 2;
  const OwnershipPlan plan = make_plan(model.spec(), S, PlannerOptions{});
  const int shard = static_cast<int>(&plan.shard(poisoned) - plan.shards().data());
  const int stepper = dedup_step_replicas(plan, R, OptimizerKind::muon, OptimizerCostConfig{})[shard];
  const int bad_rank = stepper * S + (plan.shard(poisoned).owner + 1) % S;  // in the stepping replica, not the owner
  for (NonFinitePolicy policy : {NonFinitePolicy::fail, NonFinitePolicy::skip}) {
    std::mutex m;
    std::map<int, std::string> outcome;
    run_ranks_as_threads(world(R * S), [&](RankContext& ctx) {
      Mesh mesh = make_mesh(ctx, R);
      RuntimeOptions o;
      o.non_finite = policy;
      o.replicas = R;
      o.step_mode = StepMode::dedup;
      OwnerRuntime rt(plan, *mesh.shard, o, init, mesh.replicate.get());
      const std::string r = poisoned_step(rt, model, corpus, ctx.rank, ctx.rank == bad_rank, poisoned);
      std::lock_guard<std::mutex> lock(m);
      outcome[ctx.rank] = r;
    });
    ASSERT_EQ(static_cast<int>(outcome.size()), R * S);
    const std::string want = policy == NonFinitePolicy::fail ? "failed" : "skipped " + poisoned;
    for (const auto& [rank, r] : outcome)
      EXPECT_EQ(r, want) << "rank " << rank << " (stepping replica " << stepper << ", non-finite contribution from rank "
                         << bad_rank << ")";
  }
}

}  // namespace
}  // namespace mfsdp

namespace mfsdp {
namespace {

// Shampoo and SOAP run unchanged on owners: after a step each rank's resident bytes (segments,
// gradients, optimizer state) equal the memory model for that optimizer, and a matrix's state
// exists only on its owner.
TEST(RuntimeMatrixOptimizers, StateOnlyOnOwnersAndMemoryMatchesTheModel) {
  const TransformerModel model(tiny());
  const ParamMap init = model.init(/*seed=*/7);
  const ByteCorpus corpus = ByteCorpus::load();
  for (OptimizerKind kind : {OptimizerKind::shampoo, OptimizerKind::soap}) {
    for (int W : {2, 3}) {
      PlannerOptions popts;
      popts.optimizer = kind;
      const OwnershipPlan plan = make_plan(model.spec(), W, popts);
      MemoryModelOptions mopts;
      mopts.optimizer = kind;
      mopts.cost.shampoo_max_preconditioner_dim = ShampooOptions{}.max_preconditioner_dim;
      mopts.cost.shampoo_adam_grafting = ShampooOptions{}.adam_grafting;
      mopts.cost.soap_max_precond_dim = SoapOptions{}.max_precond_dim;
      const PlanUsage usage = plan_usage(plan, mopts);
      std::mutex mutex;
      std::vector<std::string> problems;
      run_ranks_as_threads(world(W), [&](RankContext& ctx) {
        Communicator comm(ctx.backend);
        RuntimeOptions o;
        o.optimizer = kind;
        OwnerRuntime rt(plan, comm, o, init);
        auto [tokens, targets] = corpus.batch(3, 0, ctx.rank, 2, 16);
        forward_backward(rt, model, tokens, targets);
        comm.reset_counters();
        rt.step();
        std::lock_guard<std::mutex> lock(mutex);
        if (comm.total().calls != 0) problems.push_back(std::string(to_string(kind)) + " step communicated");
        if (rt.resident_bytes() != usage.ranks[ctx.rank].resident_bytes)
          problems.push_back(std::string(to_string(kind)) + " W=" + std::to_string(W) + " rank " + std::to_string(ctx.rank) +
                             ": resident " + std::to_string(rt.resident_bytes()) + " bytes, model " +
                             std::to_string(usage.ranks[ctx.rank].resident_bytes));
      });
      for (const auto& p : problems) ADD_FAILURE() << p;
    }
  }
}

}  // namespace
}  // namespace mfsdp
