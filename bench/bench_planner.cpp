// Planner benchmarks: how long planning takes, and how well each planner balances resident bytes
// and optimizer cost, for the presets at the shard-group sizes that matter.
//
//   build/bench/bench_planner                         # everything
//   build/bench/bench_planner --benchmark_filter=70b  # one model
//
// Counters: bytes_imb and cost_imb are max/mean over ranks (1.0 is perfect); items is the number
// of owned matrices (and unit tails) placed.
#include "core/plan/memory_model.h"
#include "core/plan/planner.h"
#include "core/plan/presets.h"

#include <benchmark/benchmark.h>

namespace mfsdp {
namespace {

const char* const kModels[] = {"tiny", "llama3-8b", "qwen2.5-32b", "llama3-70b"};
const PlannerKind kPlanners[] = {PlannerKind::round_robin, PlannerKind::greedy_bytes, PlannerKind::greedy_cost,
                                 PlannerKind::balanced};

void BM_Plan(benchmark::State& state) {
  const std::string model = kModels[state.range(0)];
  const int W = static_cast<int>(state.range(1));
  PlannerOptions options;
  options.planner = kPlanners[state.range(2)];
  const ModelSpec spec = preset(model, preset_config(model).dtype);
  for (auto _ : state) {
    OwnershipPlan plan = make_plan(spec, W, options);
    benchmark::DoNotOptimize(plan.hash());
  }
  // Outside the timed loop: the balance this plan achieves.
  OwnershipPlan plan = make_plan(spec, W, options);
  PlanUsage usage = plan_usage(plan, MemoryModelOptions{});
  state.counters["bytes_imb"] = usage.bytes_imbalance;
  state.counters["cost_imb"] = usage.cost_imbalance;
  state.counters["items"] = static_cast<double>(plan_items(spec, options).size());
  state.SetLabel(model + " W=" + std::to_string(W) + " " + to_string(options.planner));
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"model", "W", "planner"});
  for (int planner = 0; planner < 4; ++planner) {
    b->Args({2, 8, planner});     // 32B, one node
    b->Args({2, 64, planner});    // 32B, eight nodes
    b->Args({3, 1024, planner});  // 70B at W = 1024: the planning-time target (< 1 s)
  }
  b->Args({0, 4, 3});
  b->Args({1, 8, 3});
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Plan)->Apply(Args);

}  // namespace
}  // namespace mfsdp

BENCHMARK_MAIN();
