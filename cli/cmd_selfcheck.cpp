// `mfsdp selfcheck`: exact-valued checks of every collective on a live group of W ranks.
#include "cli/commands.h"
#include "core/dist/collective_checks.h"
#include "core/dist/launch_env.h"
#include "core/dist/launcher.h"
#include "core/dist/ranks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>

namespace mfsdp::cli {
namespace {

const std::vector<at::ScalarType> kDtypes{at::kFloat, at::kDouble, at::kBFloat16};

// Runs every check on this rank; rank 0 prints the table and the total over all ranks.
void selfcheck_rank(RankContext& ctx, const std::string& how) {
  auto start = std::chrono::steady_clock::now();
  std::vector<CheckResult> results = run_collective_checks(ctx, kDtypes);
  int64_t failed = 0;
  for (const auto& r : results) {
    if (!r.ok) {
      ++failed;
      std::fprintf(stderr, "selfcheck: rank %d FAIL %s: %s\n", ctx.rank, r.name.c_str(), r.detail.c_str());
    }
  }
  at::Tensor total = at::tensor({failed}, at::TensorOptions().dtype(at::kLong));
  std::vector<at::Tensor> ts{total};
  ctx.backend->allreduce(ts)->wait();
  const int64_t failed_everywhere = total.item<int64_t>();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (ctx.rank == 0) {
    int skipped = 0;
    for (const auto& r : results) skipped += r.skipped;
    std::printf("selfcheck: %d rank(s) as %s over %s: %zu checks per rank (%d skipped), %s (%.2f s)\n",
                ctx.world_size, how.c_str(), to_string(BackendKind::gloo), results.size(), skipped,
                failed_everywhere == 0 ? "all bit-exact" : "FAILURES", seconds);
    std::fflush(stdout);
  }
  TORCH_CHECK(failed_everywhere == 0, "selfcheck: ", failed_everywhere,
              " check(s) failed across ranks (details above)");
}

RanksOptions ranks_options(int world_size, int timeout_s) {
  RanksOptions o;
  o.world_size = world_size;
  o.timeout = std::chrono::seconds(timeout_s);
  return o;
}

}  // namespace

int run_selfcheck(int world_size, bool processes, int timeout_s) {
  const std::optional<LaunchEnv> env = read_launch_env();
  const std::string how = env ? "processes (" + env->source + ")" : "threads";
  return run_ranks(ranks_options(world_size, timeout_s), processes ? Launcher::processes : Launcher::threads,
                   {self_executable(), "selfcheck", "--timeout-s", std::to_string(timeout_s)}, std::chrono::seconds(30),
                   [&](RankContext& ctx) { selfcheck_rank(ctx, how); });
}

void add_selfcheck_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand(
      "selfcheck",
      "Run exact-valued checks of broadcast, reduce, all-reduce, all-gather, uneven all-to-all,\n"
      "send/recv and barrier on W Gloo ranks. Joins a launched group when RANK/WORLD_SIZE or\n"
      "SLURM_PROCID are set (torchrun, Slurm, mfsdp launch).");
  struct Opts {
    int world_size = 4;
    Launcher launcher = Launcher::threads;
    int timeout_s = 30;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-w,--world-size", o->world_size, "Number of ranks")->check(CLI::Range(1, 64));
  add_enum_option(cmd, "--launcher", o->launcher, kLauncherNames, "How ranks run");
  cmd->add_option("--timeout-s", o->timeout_s, "Seconds before joining or a collective fails")
      ->check(CLI::Range(1, 3600));
  cmd->callback([&run, o] {
    run = [o] { return run_selfcheck(o->world_size, o->launcher == Launcher::processes, o->timeout_s); };
  });
}

}  // namespace mfsdp::cli
