// Unshard strategies side by side, ranks as threads over Gloo: one broadcast per non-empty
// segment vs one all-gather of the even-shard prefixes plus broadcasts of owned remainders.
// Each iteration unshards and reshards every unit of the model once on every rank; the time is
// rank 0's. Counters: calls and bytes received per rank per iteration (from the communicator).
//
//   build/bench/bench_unshard --benchmark_filter=W:4
#include "core/communicator.h"
#include "core/model.h"
#include "core/planner.h"
#include "core/ranks.h"
#include "core/unit.h"

#include <benchmark/benchmark.h>

#include <chrono>

namespace mfsdp {
namespace {

constexpr int kIterations = 20;

void BM_Unshard(benchmark::State& state) {
  const int W = static_cast<int>(state.range(0));
  const auto strategy = state.range(1) == 0 ? UnshardStrategy::broadcast : UnshardStrategy::allgather_even;
  const int64_t hidden = state.range(2);
  TransformerConfig config = preset_config("tiny");
  config.hidden = hidden;
  config.intermediate = 4 * hidden;
  config.layers = 4;
  config.vocab = 4096;
  const ModelSpec spec = transformer_spec(config);
  const OwnershipPlan plan = make_plan(spec, W, PlannerOptions{});
  std::vector<double> seconds;
  PhaseCounters rank0;
  RanksOptions ranks;
  ranks.world_size = W;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    Communicator comm(ctx.backend);
    std::vector<std::unique_ptr<Unit>> units;
    for (int u = 0; u < static_cast<int>(plan.units().size()); ++u)
      units.push_back(std::make_unique<Unit>(plan, u, comm, at::kCPU, strategy));
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
  state.counters["calls"] = static_cast<double>(rank0.calls) / kIterations;
  state.counters["recv_bytes"] = static_cast<double>(rank0.bytes_recv) / kIterations;
  state.SetLabel(std::string(to_string(strategy)) + " W=" + std::to_string(W) + " hidden=" + std::to_string(hidden));
}

BENCHMARK(BM_Unshard)
    ->ArgNames({"W", "strategy", "hidden"})
    ->ArgsProduct({{2, 4, 8}, {0, 1}, {128, 512}})
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mfsdp

BENCHMARK_MAIN();
