// How long `mfsdp simulate` takes (sim/simulate.h): trace one rank's step on meta tensors and price
// it, for the bench32 preset on the H100 profile at W = 8 ... 1024, owner and reconstruct. The
// bound it watches: under a second at 1024 ranks (docs/simulate.md).
//
//   build/bench/bench_simulate                                # all cases
//   build/bench/bench_simulate --benchmark_filter=/1024/
#include "sim/hardware.h"
#include "sim/simulate.h"

#include <benchmark/benchmark.h>

namespace mfsdp {
namespace {

void BM_Simulate(benchmark::State& state) {
  SimConfig s;
  s.train.model = preset_config("bench32");
  s.train.runtime.precision.param_dtype = s.train.runtime.precision.reduce_dtype = s.train.model.dtype;
  s.train.batch = 1;
  s.train.seq = 4096;
  s.placement = state.range(1) == 0 ? Placement::owner : Placement::reconstruct;
  s.world_size = static_cast<int>(state.range(0));
  s.profile = load_hardware_profile("h100-8x-8ndr", MFSDP_PROFILE_DIR);
  int64_t collectives = 0;
  for (auto _ : state) {
    const SimResult r = simulate(s);
    collectives = r.traced_collectives;
    benchmark::DoNotOptimize(r.step_s);
  }
  state.counters["collectives"] = static_cast<double>(collectives);
  state.SetLabel(to_string(s.placement));
}
BENCHMARK(BM_Simulate)
    ->ArgsProduct({{8, 64, 256, 1024}, {0, 1}})
    ->ArgNames({"W", "placement"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
}  // namespace mfsdp

BENCHMARK_MAIN();
