// The ranks-as-threads harness: errors carry the rank, peers never hang, generators are private.
#include "core/dist/ranks.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/ones.h>

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>

namespace mfsdp {
namespace {

RanksOptions world(int w, int timeout_ms = 20'000) {
  RanksOptions o;
  o.world_size = w;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

TEST(Ranks, EveryRankRunsWithItsOwnRankAndWorldSize) {
  std::mutex m;
  std::vector<int> seen;
  run_ranks_as_threads(world(5), [&](RankContext& ctx) {
    EXPECT_EQ(ctx.world_size, 5);
    EXPECT_EQ(ctx.backend->getRank(), ctx.rank);
    EXPECT_EQ(ctx.backend->getSize(), 5);
    std::lock_guard<std::mutex> lock(m);
    seen.push_back(ctx.rank);
  });
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(Ranks, ExceptionIsRethrownWithTheRankNumber) {
  try {
    run_ranks_as_threads(world(4), [](RankContext& ctx) {
      if (ctx.rank == 2) throw std::runtime_error("boom on purpose");
    });
    FAIL() << "expected RankError";
  } catch (const RankError& e) {
    EXPECT_EQ(e.first_rank(), 2);
    EXPECT_EQ(e.failures().size(), 1u);
    EXPECT_NE(std::string(e.what()).find("rank 2 failed: boom on purpose"), std::string::npos) << e.what();
  }
}

// A rank dies before a collective its peers are already waiting in: they must fail within the
// timeout (not hang), and the report must lead with the rank that failed first.
TEST(Ranks, PeersOfAFailedRankFailWithinTheTimeoutAndTheFirstFailureLeads) {
  auto start = std::chrono::steady_clock::now();
  try {
    run_ranks_as_threads(world(3, 2'000), [](RankContext& ctx) {
      if (ctx.rank == 1) throw std::runtime_error("rank one gives up");
      at::Tensor t = at::ones({4});
      std::vector<at::Tensor> ts{t};
      ctx.backend->allreduce(ts)->wait();
    });
    FAIL() << "expected RankError";
  } catch (const RankError& e) {
    EXPECT_EQ(e.first_rank(), 1) << e.what();
    EXPECT_EQ(e.failures().size(), 3u) << e.what();
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(15));
}

TEST(Ranks, RankGeneratorsArePrivateAndReproducible) {
  std::mutex m;
  std::map<int, at::Tensor> first, second;
  auto draw = [&](std::map<int, at::Tensor>& out) {
    RanksOptions o = world(3);
    o.seed = 1234;
    run_ranks_as_threads(o, [&](RankContext& ctx) {
      at::Tensor t = at::rand({8}, ctx.generator);
      std::lock_guard<std::mutex> lock(m);
      out[ctx.rank] = t;
    });
  };
  draw(first);
  draw(second);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(first[r].equal(second[r])) << "rank " << r;
  EXPECT_FALSE(first[0].equal(first[1]));
  EXPECT_FALSE(first[1].equal(first[2]));
}

TEST(Ranks, DeterministicModeUsesOneIntraOpThreadPerRank) {
  std::mutex m;
  std::vector<int> threads;
  RanksOptions o = world(2);
  o.determinism = Determinism::deterministic;
  run_ranks_as_threads(o, [&](RankContext& ctx) {
    std::lock_guard<std::mutex> lock(m);
    threads.push_back(at::get_num_threads());
  });
  EXPECT_EQ(threads, (std::vector<int>{1, 1}));
}

TEST(Ranks, RejectsANonPositiveWorldSize) {
  EXPECT_THROW(run_ranks_as_threads(world(0), [](RankContext&) {}), c10::Error);
}

}  // namespace
}  // namespace mfsdp
