// The precision policy side by side: fp32 throughout vs bf16 compute copies of fp32 masters
// (reduce fp32), one owner-shaped training step of a 4-block model on real batches, ranks as
// threads over Gloo. Per step, rank 0: forward and backward latency (forward includes the unshards,
// backward the revives and the reductions to owners), and the bytes rank 0 received to unshard and
// revive, and sent to reduce. bf16 halves the unshard bytes exactly; the reduction bytes stay
// (fp32 on the wire); whether compute gets faster depends on the CPU's bf16 matmul support.
//
//   build/bench/bench_precision
//   build/bench/bench_precision --benchmark_filter=W:4 --benchmark_format=json
#include "core/dist/ranks.h"
#include "core/plan/planner.h"
#include "core/runtime/owner_runtime.h"
#include "core/train/data.h"
#include "core/train/model.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace mfsdp {
namespace {

// Steps per case from the environment: MFSDP_BENCH_ITERATIONS measured steps (default 10) after
// MFSDP_BENCH_WARMUP warm-up steps (default 2), of MFSDP_BENCH_SEQ tokens per sequence (default
// 128). The ctest smoke run takes 1, 0 and 32: on a CPU without bf16 matmul instructions one bf16
// step of the 128-token model takes over 15 s.
int env_steps(const char* name, int fallback, int least) {
  const char* env = std::getenv(name);
  if (env == nullptr) return fallback;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*env == '\0' || *end != '\0' || n < least || n > 1000) {
    std::fprintf(stderr, "bench_precision: %s=\"%s\" is not an integer in [%d, 1000]\n", name, env, least);
    std::exit(2);
  }
  return static_cast<int>(n);
}
const int kIterations = env_steps("MFSDP_BENCH_ITERATIONS", 10, 1);
const int kWarmup = env_steps("MFSDP_BENCH_WARMUP", 2, 0);
const int kSeq = env_steps("MFSDP_BENCH_SEQ", 128, 1);

void BM_Precision(benchmark::State& state) {
  const int W = static_cast<int>(state.range(0));
  const bool bf16 = state.range(1) == 1;
  TransformerConfig config = preset_config("tiny");
  config.hidden = state.range(2);
  config.intermediate = 4 * config.hidden;
  config.heads = 8;
  config.kv_heads = 8;
  config.layers = 4;
  const TransformerModel model(config);
  const ParamMap init = model.init(0);
  const OwnershipPlan plan = make_plan(model.spec(), W, PlannerOptions{});
  const ByteCorpus corpus = ByteCorpus::load();
  RuntimeOptions options{training_defaults()};
  if (bf16) options.precision.param_dtype = c10::kBFloat16;
  std::vector<double> forward_s, backward_s;
  PhaseCounters unshard, reduce;
  RanksOptions ranks;
  ranks.world_size = W;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    Communicator comm(ctx.backend);
    OwnerRuntime rt(plan, comm, options, init);
    for (int it = -kWarmup; it < kIterations; ++it) {  // warm-up steps, then the measured ones
      auto [tokens, targets] = corpus.batch(0, it + kWarmup, ctx.rank, /*batch=*/4, /*seq=*/kSeq);
      ctx.backend->barrier()->wait();
      if (it == 0) comm.reset_counters();
      const auto t0 = std::chrono::steady_clock::now();
      at::Tensor x = tokens;
      for (int u = 0; u < rt.num_units(); ++u) {
        ParamMap p = rt.unshard(u);
        x = model.unit_forward(u, x, p, targets);
        x = rt.after_forward(u, x);
      }
      const auto t1 = std::chrono::steady_clock::now();
      x.backward();
      const auto t2 = std::chrono::steady_clock::now();
      rt.step();
      if (ctx.rank == 0 && it >= 0) {
        forward_s.push_back(std::chrono::duration<double>(t1 - t0).count());
        backward_s.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
    }
    if (ctx.rank == 0) unshard = comm.counters(Phase::unshard), reduce = comm.counters(Phase::grad_reduce);
  });
  size_t i = 0;
  double fwd = 0, bwd = 0;
  for (size_t k = 0; k < forward_s.size(); ++k) fwd += forward_s[k], bwd += backward_s[k];
  for (auto _ : state) {
    state.SetIterationTime(forward_s[i % forward_s.size()] + backward_s[i % forward_s.size()]);
    ++i;
  }
  state.counters["forward_ms"] = 1e3 * fwd / kIterations;
  state.counters["backward_ms"] = 1e3 * bwd / kIterations;
  state.counters["unshard_recv_bytes"] = static_cast<double>(unshard.bytes_recv) / kIterations;
  state.counters["reduce_sent_bytes"] = static_cast<double>(reduce.bytes_sent) / kIterations;
  state.SetLabel(std::string(bf16 ? "bf16 compute, fp32 masters" : "fp32") + " W=" + std::to_string(W) +
                 " hidden=" + std::to_string(config.hidden));
}

BENCHMARK(BM_Precision)
    ->ArgNames({"W", "bf16", "hidden"})
    ->ArgsProduct({{2, 4}, {0, 1}, {256, 512}})
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mfsdp

BENCHMARK_MAIN();
