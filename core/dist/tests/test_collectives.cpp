// Exact-valued Gloo collectives on W ranks as threads, for every dtype the runtime moves.
// Inputs are small integers, so every expected value is exact; comparison is bit for bit.
#include "core/dist/collective_checks.h"
#include "core/dist/ranks.h"

#include <gtest/gtest.h>

#include <mutex>
#include <tuple>

namespace mfsdp {
namespace {

class GlooCollectives : public ::testing::TestWithParam<std::tuple<int, at::ScalarType>> {};

TEST_P(GlooCollectives, EveryCheckIsBitExactOnEveryRank) {
  const auto [world_size, dtype] = GetParam();
  RanksOptions options;
  options.world_size = world_size;
  options.timeout = std::chrono::seconds(30);
  std::mutex mutex;
  std::vector<std::pair<int, CheckResult>> results;
  run_ranks_as_threads(options, [&](RankContext& ctx) {
    for (CollectiveCheck check : all_collective_checks()) {
      CheckResult r = run_collective_check(ctx, check, dtype);
      std::lock_guard<std::mutex> lock(mutex);
      results.emplace_back(ctx.rank, r);
    }
  });
  ASSERT_EQ(results.size(), all_collective_checks().size() * world_size);
  for (const auto& [rank, r] : results) {
    EXPECT_TRUE(r.ok) << "rank " << rank << " " << r.name << ": " << r.detail;
    if (world_size > 1) {
      EXPECT_FALSE(r.skipped) << r.name;
    }
  }
}

std::string name(const ::testing::TestParamInfo<GlooCollectives::ParamType>& info) {
  std::string name = "W";
  name += std::to_string(std::get<0>(info.param));
  name += '_';
  name += c10::toString(std::get<1>(info.param));
  return name;
}

INSTANTIATE_TEST_SUITE_P(Sweep, GlooCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 6, 7, 8),
                                            ::testing::Values(at::kFloat, at::kDouble, at::kBFloat16)),
                         name);

}  // namespace
}  // namespace mfsdp
