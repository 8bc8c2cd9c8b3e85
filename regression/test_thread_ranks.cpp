// Regression: ranks as threads must survive many concurrent collectives.
//
// What must not happen: a segfault when several process groups in one process issue collectives
// at the same time. It once did: c10d's process-wide FlightRecorder (libtorch 2.11) writes a map
// before taking its mutex, and the property tests crashed at random inside
// FlightRecorder::recordWithResetEnabled. run_ranks_as_threads now disables the recorder
// (TORCH_FR_BUFFER_SIZE=0) before creating the first group; this test issues enough concurrent
// collectives from 8 thread-ranks that the race fires reliably if that ever regresses.
#include "core/dist/ranks.h"
#include "core/util/tensor_compare.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <gtest/gtest.h>

#include <atomic>

namespace mfsdp {
namespace {

TEST(ThreadRanksRegression, ManyConcurrentCollectivesDoNotCrash) {
  RanksOptions options;
  options.world_size = 8;
  options.timeout = std::chrono::seconds(60);
  std::atomic<int> wrong{0};
  for (int round = 0; round < 3; ++round) {
    run_ranks_as_threads(options, [&](RankContext& ctx) {
      for (int i = 0; i < 150; ++i) {
        at::Tensor t = at::full({5}, static_cast<double>(ctx.rank + 1), at::kFloat);
        std::vector<at::Tensor> ts{t};
        ctx.backend->allreduce(ts)->wait();
        if (!bitwise_equal(t, at::full({5}, 36.0, at::kFloat))) ++wrong;  // 1 + 2 + ... + 8
      }
    });
  }
  EXPECT_EQ(wrong.load(), 0);
  const char* fr = std::getenv("TORCH_FR_BUFFER_SIZE");
  ASSERT_NE(fr, nullptr);
  EXPECT_STREQ(fr, "0");
}

}  // namespace
}  // namespace mfsdp
