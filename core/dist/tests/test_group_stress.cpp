// Forming and tearing down Gloo process groups, many times, with busy background load, never
// fails (docs/gloo-notes.md, "Thread ranks forming groups under load"). 70 groups at each of W = 2, 5
// and 8 per launcher: ranks as threads of this process (a fresh group and store each time, as
// every multi-rank test makes them) and ranks as processes (mfsdp launch's way: W children of this
// binary over a TCP store, each forming 70 groups in turn). Every group runs one all-reduce, checked
// exactly. A single failure fails the test, with the rank's own error.
#include "core/dist/launch_env.h"
#include "core/dist/launcher.h"
#include "core/dist/process_group.h"
#include "core/dist/ranks.h"

#include <ATen/ops/ones.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace mfsdp {
namespace {

constexpr int kGroups = 70;  // per world size: 210 per launcher
constexpr int kWorldSizes[] = {2, 5, 8};

// Busy threads competing with the ranks for the cores while the groups form.
class BackgroundLoad {
 public:
  explicit BackgroundLoad(int threads) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this] {
        volatile unsigned long x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
      });
  }
  ~BackgroundLoad() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// One all-reduce over the group: the sum of (rank + 1) is W (W + 1) / 2, exactly.
void check_group(c10d::Backend& backend, int rank, int W) {
  std::vector<at::Tensor> t{at::ones({4}) * (rank + 1)};
  backend.allreduce(t)->wait();
  const float want = W * (W + 1) / 2.0f;
  TORCH_CHECK(t[0].eq(want).all().item<bool>(), "group stress: rank ", rank, " of ", W, ": all-reduce gave ",
              t[0][0].item<float>(), ", expected ", want);
}

RanksOptions ranks_of(int W) {
  RanksOptions r;
  r.world_size = W;
  r.timeout = std::chrono::seconds(30);
  return r;
}

TEST(GroupStress, ThreadRanksForm210GroupsUnderLoad) {
  BackgroundLoad load(2);
  const auto start = std::chrono::steady_clock::now();
  int formed = 0;
  for (int W : kWorldSizes) {
    for (int i = 0; i < kGroups; ++i) {
      try {
        run_ranks_as_threads(ranks_of(W), [&](RankContext& ctx) {
          // Every other group returns at once: its ranks tear down as soon as each has joined.
          if (i % 2) check_group(*ctx.backend, ctx.rank, W);
        });
        ++formed;
      } catch (const std::exception& e) {
        FAIL() << "group " << i << " of W = " << W << " (after " << formed << " formed): " << e.what();
      }
    }
  }
  std::printf("group stress (threads): %d groups formed at W = 2, 5, 8 in %.1f s with 2 busy threads, 0 failures\n", formed,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

TEST(GroupStress, RankProcessesForm210GroupsUnderLoad) {
  const bool child = read_launch_env().has_value();
  std::unique_ptr<BackgroundLoad> load;
  if (!child) load = std::make_unique<BackgroundLoad>(2);
  const auto start = std::chrono::steady_clock::now();
  int launched = 0;
  for (int W : kWorldSizes) {
    if (child && read_launch_env()->world_size != W) continue;
    const int code = run_ranks(ranks_of(W), Launcher::processes,
                               {self_executable(), "--gtest_filter=GroupStress.RankProcessesForm210GroupsUnderLoad"},
                               std::chrono::seconds(5), [&](RankContext& ctx) {
                                 // Each group on its own store prefix, formed, checked and torn down in turn.
                                 for (int i = 0; i < kGroups; ++i) {
                                   auto store = c10::make_intrusive<c10d::PrefixStore>("stress/" + std::to_string(i), ctx.store);
                                   auto backend = make_backend(BackendKind::gloo, store, ctx.rank, ctx.world_size, ctx.timeout);
                                   if (i % 2) check_group(*backend, ctx.rank, ctx.world_size);
                                 }
                               });
    ASSERT_EQ(code, 0) << "a rank process failed forming groups at W = " << W << " (its error is above)";
    launched += kGroups;
  }
  if (!child)
    std::printf("group stress (processes): %d groups formed at W = 2, 5, 8 in %.1f s with 2 busy threads, 0 failures\n",
                launched, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace
}  // namespace mfsdp

namespace mfsdp {
namespace {

// A rank that never comes: the others' error names who started joining, who joined and who did
// not, instead of Gloo's bare connect timeout.
TEST(GroupStress, AFailedJoinNamesEveryRanksState) {
  disable_flight_recorder_for_thread_ranks();  // ranks as threads made by hand (docs/gloo-notes.md)
  auto store = make_hash_store(std::chrono::seconds(2));
  std::string errors[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        make_backend(BackendKind::gloo, store, r, 3, std::chrono::seconds(2));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("gloo: rank " + std::to_string(r) + " of 3 could not join the process group within 2000 ms"),
              std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("started joining: 0, 1; joined: none; not joined: 0, 1, 2"), std::string::npos) << errors[r];
  }
}

}  // namespace
}  // namespace mfsdp
