#include "core/dist/ranks.h"

#include "core/dist/launch_env.h"
#include "core/util/errors.h"
#include "core/dist/heartbeat.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

namespace mfsdp {
namespace {

std::string describe(const std::vector<RankError::Failure>& failures) {
  std::ostringstream out;
  out << "rank " << failures.front().rank << " failed: " << failures.front().message;
  if (failures.size() > 1) {
    out << "\n(" << failures.size() - 1 << " more rank(s) failed after it:";
    for (size_t i = 1; i < failures.size(); ++i) {
      std::string first_line = failures[i].message.substr(0, failures[i].message.find('\n'));
      out << "\n  rank " << failures[i].rank << ": " << first_line;
    }
    out << ")";
  }
  return out.str();
}

void run_rank(RankContext& ctx, const RanksOptions& options,
              const c10::intrusive_ptr<c10d::Store>& store, const RankFn& fn) {
  apply_determinism(options.determinism);
  ctx.world_size = options.world_size;
  ctx.determinism = options.determinism;
  ctx.timeout = options.timeout;
  ctx.generator = make_rank_generator(options.seed, ctx.rank);
  ctx.store = store;
  ctx.backend_kind = options.backend;
  auto group_store = c10::make_intrusive<c10d::PrefixStore>("mfsdp/default_pg", store);
  ctx.backend = make_backend(options.backend, group_store, ctx.rank, options.world_size,
                             options.timeout);
  fn(ctx);
}

}  // namespace

// c10d's FlightRecorder is one process-wide singleton, and in libtorch 2.11 its
// recordWithResetEnabled() writes its all_pg_status_ map before taking its mutex: several process
// groups in one process (ranks as threads) issuing collectives at once corrupt that map and crash.
// The recorder reads TORCH_FR_BUFFER_SIZE once, when first used; 0 disables it. Called before the
// first thread-rank group is created (see docs/gloo-notes.md).
void disable_flight_recorder_for_thread_ranks() {
  static const bool once = [] {
    setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/1);
    return true;
  }();
  (void)once;
}

namespace {
// A peer that fails closes its sockets; a Gloo write to such a socket must fail as an error on
// this rank, not kill the whole process with SIGPIPE.
void ignore_sigpipe() {
  static const bool once = [] {
    signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)once;
}
}  // namespace

RankError::RankError(std::vector<Failure> failures)
    : std::runtime_error(describe(failures)), failures_(std::move(failures)) {}

void run_ranks_as_threads(const RanksOptions& options, const RankFn& fn) {
  TORCH_CHECK(options.world_size >= 1, "ranks: world size must be >= 1, got ", options.world_size);
  disable_flight_recorder_for_thread_ranks();
  ignore_sigpipe();
  auto store = make_hash_store(options.timeout);
  std::mutex mutex;
  std::vector<RankError::Failure> failures;  // in the order they happened
  std::vector<std::thread> threads;
  threads.reserve(options.world_size);
  for (int r = 0; r < options.world_size; ++r) {
    threads.emplace_back([&, r] {
      RankContext ctx;
      ctx.rank = r;
      try {
        run_rank(ctx, options, store, fn);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back({r, error_message(e)});
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back({r, "unknown exception"});
      }
      // Drop the backend before the thread ends, while peers still run their own teardown.
      ctx.backend.reset();
    });
  }
  for (auto& t : threads) t.join();
  if (!failures.empty()) throw RankError(std::move(failures));
}

namespace {

// After a rank of a launched job failed (a lost peer, a timeout, any error), tearing down can block
// until the collective timeout: the process group's destructor waits for work queued towards a
// dead peer, a store client waits for a dead server. The error is kept, and the process exits by
// itself, printing it, if the teardown takes longer than kTeardownGrace (under mfsdp launch,
// torchrun and Slurm alike).
constexpr std::chrono::seconds kTeardownGrace{2};

void arm_teardown_watchdog(int rank, const std::string& message) {
  std::thread([rank, message] {
    std::this_thread::sleep_for(kTeardownGrace);
    std::fprintf(stderr, "mfsdp: error: rank %d failed: %s\nmfsdp: rank %d: teardown did not finish within %lld s; exiting\n",
                 rank, message.c_str(), rank, static_cast<long long>(kTeardownGrace.count()));
    std::fflush(stderr);
    ::_exit(1);
  }).detach();
}

}  // namespace

void run_as_launched_rank(const LaunchEnv& env, const RanksOptions& options, const RankFn& fn) {
  RanksOptions opts = options;
  opts.world_size = env.world_size;
  bool is_server = !env.agent_store && env.rank == 0;
  RankContext ctx;
  ctx.rank = env.rank;
  std::unique_ptr<Heartbeat> heartbeat;
  ignore_sigpipe();
  try {
    auto store = make_tcp_store(env.master_addr, env.master_port, is_server, env.world_size, options.timeout);
    if (env.world_size > 1) {
      // Its own connection, so the heartbeat thread never shares a socket with the rank's work.
      heartbeat = std::make_unique<Heartbeat>(
          make_tcp_store(env.master_addr, env.master_port, false, env.world_size, options.timeout), env.rank,
          env.world_size);
    }
    // A peer lost where no error reaches this rank (blocked with other waiting ranks): give up
    // after the teardown grace, with the reason.
    if (heartbeat) heartbeat->watch([rank = env.rank](const std::string& why) { arm_teardown_watchdog(rank, why); });
    run_rank(ctx, opts, store, fn);
  } catch (const std::exception& e) {
    std::string message = error_message(e);
    if (heartbeat) {
      std::vector<int> lost = heartbeat->silent_ranks();
      if (!lost.empty()) {
        std::string ranks;
        for (int r : lost) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        message = "lost rank " + ranks + " (its heartbeat stopped); " + message;
      }
    }
    arm_teardown_watchdog(env.rank, message);
    throw RankError({{env.rank, message}});
  }
}

}  // namespace mfsdp
