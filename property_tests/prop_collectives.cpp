// Properties of the collectives the runtime's segment-owner traffic is built from, over generated
// world sizes, split tables (zeros included) and roots. Every expected value is exact.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/dist/ranks.h"
#include "core/util/tensor_compare.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>

#include <mutex>

namespace mfsdp {
namespace {

RanksOptions world(int w) {
  RanksOptions o;
  o.world_size = w;
  o.timeout = std::chrono::seconds(30);
  return o;
}

// The block rank `src` sends to `dst`: `rows` rows of width 2 holding distinct small integers.
at::Tensor block(int src, int dst, int64_t rows) {
  return (at::arange(rows * 2, at::kLong) + 1000 * src + 100 * dst).to(at::kFloat).reshape({rows, 2});
}

// alltoall_base delivers every block whole and in source order, for any split table.
RC_GTEST_PROP(CollectiveProperties, UnevenAllToAllDeliversEveryBlockInOrder, ()) {
  const int w = *rc::gen::inRange(1, 7);
  const auto rows = *rc::gen::container<std::vector<int64_t>>(
      w * w, rc::gen::weightedOneOf<int64_t>({{2, rc::gen::just<int64_t>(0)}, {3, rc::gen::inRange<int64_t>(1, 5)}}));
  auto split = [&](int src, int dst) { return rows[src * w + dst]; };
  std::mutex m;
  std::vector<std::string> failures;
  run_ranks_as_threads(world(w), [&](RankContext& ctx) {
    std::vector<int64_t> in_splits, out_splits;
    std::vector<at::Tensor> in_blocks, want_blocks;
    for (int p = 0; p < w; ++p) {
      in_splits.push_back(split(ctx.rank, p));
      out_splits.push_back(split(p, ctx.rank));
      in_blocks.push_back(block(ctx.rank, p, split(ctx.rank, p)));
      want_blocks.push_back(block(p, ctx.rank, split(p, ctx.rank)));
    }
    at::Tensor in = at::cat(in_blocks).contiguous();
    at::Tensor want = at::cat(want_blocks);
    at::Tensor out = at::full({want.size(0), 2}, -1.0f);
    ctx.backend->alltoall_base(out, in, out_splits, in_splits)->wait();
    TensorDiff d = diff(out, want);
    if (!d.bitwise_equal) {
      std::lock_guard<std::mutex> lock(m);
      failures.push_back("rank " + std::to_string(ctx.rank) + ": " + describe(d, out, want));
    }
  });
  for (const auto& f : failures) RC_FAIL(f);
}

// Broadcasting a tensor of any length (empty included) from any root gives every rank its bytes.
RC_GTEST_PROP(CollectiveProperties, BroadcastFromAnyRootCopiesExactly, ()) {
  const int w = *rc::gen::inRange(1, 7);
  const int root = *rc::gen::inRange(0, w);
  const int64_t n = *rc::gen::inRange<int64_t>(0, 300);
  std::mutex m;
  std::vector<std::string> failures;
  run_ranks_as_threads(world(w), [&](RankContext& ctx) {
    at::Tensor want = at::arange(n, at::kDouble) * 0.5 + root;
    at::Tensor t = ctx.rank == root ? want.clone() : at::full({n}, -7.0, at::kDouble);
    std::vector<at::Tensor> ts{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    ctx.backend->broadcast(ts, o)->wait();
    if (!bitwise_equal(t, want)) {
      std::lock_guard<std::mutex> lock(m);
      failures.push_back("rank " + std::to_string(ctx.rank) + " differs");
    }
  });
  for (const auto& f : failures) RC_FAIL(f);
}

}  // namespace
}  // namespace mfsdp
