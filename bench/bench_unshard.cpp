// Unshard strategies side by side, ranks as threads over Gloo, on the owner plan of the peers'
// two sizes (peers/side_by_side.py: tiny, hidden 64; h512, hidden 512, 8 heads, intermediate
// 1024; 2 blocks, vocabulary 256):
//   per_segment     one broadcast per non-empty segment, each a collective of its own
//   grouped         the same broadcasts as one group per unit (Communicator::group)
//   allgather_even  the even tail's prefixes in one all-gather, the owned remainders as one group
//   even_layout     the same model planned as FSDP2 lays it out (every parameter even-sharded):
//                   one all-gather per unit, the baseline a group is measured against
// Each iteration unshards and reshards every unit of the model once on every rank; the time is
// rank 0's. Counters: calls and bytes received per rank per iteration (from the communicator),
// and ms per unit (the iteration's median over the units).
//
//   build/bench/bench_unshard --benchmark_filter=BM_Unshard/W:4
#include "core/dist/communicator.h"
#include "core/train/model.h"
#include "core/plan/planner.h"
#include "core/dist/ranks.h"
#include "core/runtime/unit.h"

#include <ATen/ops/ones.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

namespace mfsdp {
namespace {

constexpr int kIterations = 20;

// The peers' sizes (peers/side_by_side.py), 0 = tiny, 1 = h512.
ModelSpec peer_model(int size) {
  TransformerConfig config = preset_config("tiny");
  if (size == 1) {
    config.hidden = 512;
    config.heads = 8;
    config.intermediate = 1024;
  }
  config.layers = 2;
  config.vocab = 256;
  return transformer_spec(config);
}

// The benchmarked model of BM_Layout: 4 blocks of width `hidden`, MLP 4x wide.
ModelSpec bench_model(int64_t hidden, int64_t vocab) {
  TransformerConfig config = preset_config("tiny");
  config.hidden = hidden;
  config.intermediate = 4 * hidden;
  config.layers = 4;
  config.vocab = vocab;
  return transformer_spec(config);
}

const char* const kStrategyNames[] = {"per_segment", "grouped", "allgather_even", "even_layout"};

void BM_Unshard(benchmark::State& state) {
  const int W = static_cast<int>(state.range(0));
  const int which = static_cast<int>(state.range(1));
  const UnshardStrategy strategy = which == 0   ? UnshardStrategy::per_segment
                                   : which == 1 ? UnshardStrategy::broadcast
                                                : UnshardStrategy::allgather_even;
  const ModelSpec spec = peer_model(static_cast<int>(state.range(2)));
  PlannerOptions options;
  if (which == 3) options.rules = {{"*", Role::even_shard}};
  const OwnershipPlan plan = make_plan(spec, W, options);
  const int units_n = static_cast<int>(plan.units().size());
  std::vector<double> seconds;
  PhaseCounters rank0;
  RanksOptions ranks;
  ranks.world_size = W;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    Communicator comm(ctx.backend);
    std::vector<std::unique_ptr<Unit>> units;
    for (int u = 0; u < units_n; ++u) units.push_back(std::make_unique<Unit>(plan, u, comm, at::kCPU, strategy));
    for (int it = -2; it < kIterations; ++it) {  // two warm-up rounds
      ctx.backend->barrier()->wait();
      if (it == 0) comm.reset_counters();
      auto t0 = std::chrono::steady_clock::now();
      for (auto& unit : units) {
        unit->unshard();
        unit->reshard(/*keep_for_backward=*/false);
      }
      ctx.backend->barrier()->wait();
      if (ctx.rank == 0 && it >= 0) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (ctx.rank == 0) rank0 = comm.counters(Phase::unshard);
  });
  size_t i = 0;
  for (auto _ : state) state.SetIterationTime(seconds[i++ % seconds.size()]);
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  state.counters["calls"] = static_cast<double>(rank0.calls) / kIterations;
  state.counters["parts"] = static_cast<double>(rank0.parts) / kIterations;
  state.counters["recv_bytes"] = static_cast<double>(rank0.bytes_recv) / kIterations;
  state.counters["ms_per_unit"] = 1e3 * sorted[sorted.size() / 2] / units_n;
  state.SetLabel(std::string(kStrategyNames[which]) + " W=" + std::to_string(W) + " " + (state.range(2) ? "h512" : "tiny") +
                 " units=" + std::to_string(units_n));
}

BENCHMARK(BM_Unshard)
    ->ArgNames({"W", "strategy", "size"})
    ->ArgsProduct({{2, 4, 8}, {0, 1, 2, 3}, {0, 1}})
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

// The owner layout against the even (FSDP2) layout of the same model, with the same unit code:
// unshard latency (owner segments broadcast vs the even all-gather) and gradient-reduction latency
// (reduce-to-owner vs the even layout's reduce-scatter), per step over every unit, rank 0's time.
// Reduce mode 0 = deterministic (contributions gathered, summed in rank order), 1 = fast (native
// reduce / reduce-scatter).
//   build/bench/bench_unshard --benchmark_filter=BM_Layout
void BM_Layout(benchmark::State& state) {
  const int W = static_cast<int>(state.range(0));
  const bool even = state.range(1) == 1;
  const ReduceMode mode = state.range(2) == 0 ? ReduceMode::deterministic : ReduceMode::fast;
  const int64_t hidden = state.range(3);
  const ModelSpec spec = bench_model(hidden, /*vocab=*/256);
  PlannerOptions options;
  if (even) options.rules = {{"*", Role::even_shard}};
  const OwnershipPlan plan = make_plan(spec, W, options);
  std::vector<double> unshard_s, reduce_s;
  RanksOptions ranks;
  ranks.world_size = W;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    Communicator comm(ctx.backend);
    std::vector<std::unique_ptr<Unit>> units;
    std::vector<std::vector<at::Tensor>> grads;
    for (int u = 0; u < static_cast<int>(plan.units().size()); ++u) {
      units.push_back(std::make_unique<Unit>(plan, u, comm, at::kCPU, UnshardStrategy::broadcast));
      std::vector<at::Tensor> g;
      for (int i : plan.units()[u].shards) g.push_back(at::ones(plan.shards()[i].shape, at::TensorOptions().dtype(at::kFloat)));
      grads.push_back(std::move(g));
    }
    for (int it = -2; it < kIterations; ++it) {
      ctx.backend->barrier()->wait();
      auto t0 = std::chrono::steady_clock::now();
      for (auto& unit : units) unit->unshard();
      ctx.backend->barrier()->wait();
      auto t1 = std::chrono::steady_clock::now();
      for (size_t u = 0; u < units.size(); ++u) units[u]->reduce_to_owner(grads[u], mode);
      for (auto& unit : units) unit->finish_reduction(/*divisor=*/ctx.world_size);  // the mean
      ctx.backend->barrier()->wait();
      auto t2 = std::chrono::steady_clock::now();
      if (ctx.rank == 0 && it >= 0) {
        unshard_s.push_back(std::chrono::duration<double>(t1 - t0).count());
        reduce_s.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
    }
  });
  size_t i = 0;
  for (auto _ : state) {
    state.SetIterationTime(unshard_s[i % unshard_s.size()] + reduce_s[i % reduce_s.size()]);
    ++i;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  state.counters["unshard_ms"] = 1e3 * median(unshard_s);
  state.counters["reduce_ms"] = 1e3 * median(reduce_s);
  state.SetLabel(std::string(even ? "even layout" : "owner layout") + ", " + to_string(mode) + " reduce, W=" +
                 std::to_string(W) + " hidden=" + std::to_string(hidden));
}

BENCHMARK(BM_Layout)
    ->ArgNames({"W", "even", "mode", "hidden"})
    ->ArgsProduct({{2, 4, 8}, {0, 1}, {0, 1}, {128, 512}})
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mfsdp

BENCHMARK_MAIN();
