// The runtime on CUDA tensors (label: cuda). Skipped, and reported as skipped, where no GPU is
// visible; scripts/gpu_check.sh runs them on a GPU machine. NCCL needs one GPU per rank, so NCCL
// runs at W = 1 (or W = GPU count) and multi-rank on one GPU goes through Gloo on CUDA tensors.
//
// What must hold on one GPU, deterministic mode (ATen deterministic algorithms, fixed cuBLAS
// workspace): the owner runtime reproduces the DDP oracle run on the same device bit for bit, and
// its trajectory stays within rounding distance of the CPU one (different kernels, not bitwise).
#include "core/dist/process_group.h"
#include "core/dist/ranks.h"
#include "harness/placements.h"
#include "harness/trajectory.h"
#include "testing/fixtures.h"

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

namespace mfsdp {
namespace {

bool have_cuda() { return at::globalContext().hasCUDA(); }

TrainConfig cuda_config(OptimizerKind optimizer) {
  return tiny_config({.steps = 8, .seed = 5, .optimizer = optimizer});
}

// Runs owner vs oracle on `device_kind` over `backend` with W ranks; returns failure lines.
std::vector<std::string> owner_vs_oracle(int W, BackendKind backend, OptimizerKind optimizer, bool prefetch, bool moe = false) {
  std::mutex mutex;
  std::vector<std::string> failures;
  RanksOptions ranks;
  ranks.world_size = W;
  ranks.backend = backend;
  ranks.timeout = std::chrono::seconds(120);
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    TrainConfig c = cuda_config(optimizer);
    c.runtime.device = rank_device("cuda", backend == BackendKind::nccl ? ctx.rank : 0);
    c.runtime.prefetch = prefetch;
    if (moe) c.model.experts = 4, c.model.top_k = 2, c.model.moe_intermediate = 32;
    apply_cuda_determinism(ctx.determinism);
    const Comparison cmp = compare(run_oracle(ctx, c), run_recorded(ctx, c));
    if (!cmp.bitwise_equal) {
      std::lock_guard<std::mutex> lock(mutex);
      failures.push_back("rank " + std::to_string(ctx.rank) + ": first difference at step " +
                         std::to_string(cmp.first_bad_step) + " in " + cmp.first_bad + " (" + cmp.detail + ")");
    }
  });
  return failures;
}

TEST(Cuda, OwnerBitMatchesTheOracleOnOneGpuOverNccl) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device visible";
  for (OptimizerKind o : {OptimizerKind::muon, OptimizerKind::adamw})
    for (const auto& f : owner_vs_oracle(1, BackendKind::nccl, o, /*prefetch=*/true)) ADD_FAILURE() << to_string(o) << ": " << f;
}

TEST(Cuda, OwnerBitMatchesTheOracleOverGlooOnCudaTensors) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device visible";
  for (int W : {2, 3})
    for (bool prefetch : {false, true})
      for (const auto& f : owner_vs_oracle(W, BackendKind::gloo, OptimizerKind::muon, prefetch))
        ADD_FAILURE() << "W=" << W << (prefetch ? " prefetch" : "") << ": " << f;
}

// Experts on the GPU under ATen's deterministic algorithms: the dispatch (stable sorts, gathers;
// their backward writes each element once) raises no nondeterminism error, and the owner runtime,
// its expert tensors in ranges on three ranks, equals the oracle bit for bit.
TEST(Cuda, MoeOwnerBitMatchesTheOracleOverGlooOnCudaTensors) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device visible";
  for (OptimizerKind o : {OptimizerKind::muon, OptimizerKind::shampoo})
    for (const auto& f : owner_vs_oracle(3, BackendKind::gloo, o, /*prefetch=*/false, /*moe=*/true)) ADD_FAILURE() << to_string(o) << ": " << f;
}

TEST(Cuda, TrajectoryStaysNearTheCpuOne) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device visible";
  Trajectory cpu, gpu;
  RanksOptions ranks;
  ranks.world_size = 1;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    TrainConfig c = cuda_config(OptimizerKind::adamw);
    cpu = run_recorded(ctx, c);
    c.runtime.device = rank_device("cuda", 0);
    gpu = run_recorded(ctx, c);
  });
  ASSERT_EQ(cpu.local_losses.size(), gpu.local_losses.size());
  double worst = 0;
  for (size_t s = 0; s < cpu.local_losses.size(); ++s)
    worst = std::max(worst, std::fabs(cpu.local_losses[s] - gpu.local_losses[s]) / std::fabs(cpu.local_losses[s]));
  std::printf("cuda vs cpu, AdamW, 8 steps: max relative loss difference %.3g\n", worst);
  EXPECT_LE(worst, 1e-4);
}

}  // namespace
}  // namespace mfsdp
