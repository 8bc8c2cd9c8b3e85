#include "core/dist/collective_checks.h"

#include "core/util/tensor_compare.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <sstream>

namespace mfsdp {
namespace {

constexpr int64_t kLen = 37;  // odd length: no accidental alignment

at::TensorOptions opts(at::ScalarType dtype) { return at::TensorOptions().dtype(dtype); }

// pattern(i) = i % m + 1, as `dtype`: small integers exact in every floating type we check.
at::Tensor pattern(int64_t n, int64_t m, at::ScalarType dtype) {
  return (at::arange(n, at::TensorOptions().dtype(at::kLong)).remainder(m) + 1).to(dtype);
}

void wait(const c10::intrusive_ptr<c10d::Work>& work) { work->wait(); }

// Appends a mismatch description for `what` to `detail` unless actual == expected bitwise.
void expect_equal(std::ostringstream& detail, const std::string& what, const at::Tensor& actual,
                  const at::Tensor& expected) {
  TensorDiff d = diff(actual, expected);
  if (!d.bitwise_equal) detail << what << ": " << describe(d, actual, expected) << "; ";
}

void check_broadcast(RankContext& ctx, at::ScalarType dtype, std::ostringstream& detail) {
  for (int root = 0; root < ctx.world_size; ++root) {
    at::Tensor expected = pattern(kLen, 7, dtype) * (root + 1);
    at::Tensor t = ctx.rank == root ? expected.clone() : at::full({kLen}, -1, opts(dtype));
    std::vector<at::Tensor> ts{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    wait(ctx.backend->broadcast(ts, o));
    expect_equal(detail, "root " + std::to_string(root), t, expected);
  }
}

at::Tensor reduce_input(RankContext& ctx, at::ScalarType dtype) {
  return pattern(kLen, 5, dtype) * (ctx.rank + 1);
}
at::Tensor reduce_expected(RankContext& ctx, at::ScalarType dtype) {
  return pattern(kLen, 5, dtype) * (ctx.world_size * (ctx.world_size + 1) / 2);
}

void check_reduce(RankContext& ctx, at::ScalarType dtype, std::ostringstream& detail) {
  for (int root = 0; root < ctx.world_size; ++root) {
    at::Tensor t = reduce_input(ctx, dtype);
    std::vector<at::Tensor> ts{t};
    c10d::ReduceOptions o;
    o.rootRank = root;
    o.reduceOp = c10d::ReduceOp::SUM;
    wait(ctx.backend->reduce(ts, o));
    // Only the root's buffer is defined after reduce (Gloo leaves partial sums elsewhere).
    if (ctx.rank == root) expect_equal(detail, "root " + std::to_string(root), t, reduce_expected(ctx, dtype));
  }
}

void check_allreduce(RankContext& ctx, at::ScalarType dtype, std::ostringstream& detail) {
  at::Tensor t = reduce_input(ctx, dtype);
  std::vector<at::Tensor> ts{t};
  wait(ctx.backend->allreduce(ts));
  expect_equal(detail, "sum", t, reduce_expected(ctx, dtype));
}

at::Tensor gather_piece(int rank, at::ScalarType dtype) {
  return pattern(kLen, 9, dtype) + 10 * rank;
}

void check_allgather(RankContext& ctx, at::ScalarType dtype, std::ostringstream& detail) {
  std::vector<at::Tensor> pieces;
  for (int r = 0; r < ctx.world_size; ++r) pieces.push_back(gather_piece(r, dtype));
  at::Tensor expected = at::cat(pieces);

  at::Tensor input = gather_piece(ctx.rank, dtype);
  at::Tensor flat = at::full({kLen * ctx.world_size}, -1, opts(dtype));
  wait(ctx.backend->_allgather_base(flat, input));
  expect_equal(detail, "_allgather_base", flat, expected);

  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < ctx.world_size; ++r) outputs[0].push_back(at::full({kLen}, -1, opts(dtype)));
  std::vector<at::Tensor> inputs{input};
  wait(ctx.backend->allgather(outputs, inputs));
  expect_equal(detail, "allgather", at::cat(outputs[0]), expected);
}

// Rows that rank `src` sends to rank `dst`: 0, 1 or 2 (zero splits included for every W >= 2).
int64_t split_rows(int src, int dst) { return (src + 2 * dst) % 3; }
constexpr int64_t kRowWidth = 3;

at::Tensor alltoall_block(int src, int dst, at::ScalarType dtype) {
  int64_t rows = split_rows(src, dst);
  return (at::arange(rows * kRowWidth, at::TensorOptions().dtype(at::kLong)) + 16 * src + 2 * dst)
      .to(dtype)
      .reshape({rows, kRowWidth});
}

void check_alltoall_uneven(RankContext& ctx, at::ScalarType dtype, std::ostringstream& detail) {
  std::vector<int64_t> in_splits, out_splits;
  std::vector<at::Tensor> in_blocks, expected_blocks;
  for (int peer = 0; peer < ctx.world_size; ++peer) {
    in_splits.push_back(split_rows(ctx.rank, peer));
    out_splits.push_back(split_rows(peer, ctx.rank));
    in_blocks.push_back(alltoall_block(ctx.rank, peer, dtype));
    expected_blocks.push_back(alltoall_block(peer, ctx.rank, dtype));
  }
  at::Tensor input = at::cat(in_blocks).contiguous();
  at::Tensor expected = at::cat(expected_blocks);
  at::Tensor output = at::full({expected.size(0), kRowWidth}, -1, opts(dtype));
  wait(ctx.backend->alltoall_base(output, input, out_splits, in_splits));
  expect_equal(detail, "alltoall_base", output, expected);
}

void check_send_recv_ring(RankContext& ctx, at::ScalarType dtype, std::ostringstream& detail) {
  const int next = (ctx.rank + 1) % ctx.world_size;
  const int prev = (ctx.rank + ctx.world_size - 1) % ctx.world_size;
  std::vector<at::Tensor> out{pattern(kLen, 11, dtype) + 20 * ctx.rank};
  std::vector<at::Tensor> in{at::full({kLen}, -1, opts(dtype))};
  auto send = ctx.backend->send(out, next, /*tag=*/0);
  auto recv = ctx.backend->recv(in, prev, /*tag=*/0);
  wait(send);
  wait(recv);
  expect_equal(detail, "from rank " + std::to_string(prev), in[0], pattern(kLen, 11, dtype) + 20 * prev);
}

// steady_clock is CLOCK_MONOTONIC: one clock for every process on this machine.
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check_barrier(RankContext& ctx, std::ostringstream& detail) {
  // Later ranks arrive later; nobody may leave before the last one arrived.
  std::this_thread::sleep_for(std::chrono::milliseconds(5 * ctx.rank));
  const int64_t entered = now_ns();
  wait(ctx.backend->barrier());
  const int64_t left = now_ns();
  at::Tensor mine = at::tensor({entered}, at::TensorOptions().dtype(at::kLong));
  at::Tensor all = at::empty({ctx.world_size}, at::TensorOptions().dtype(at::kLong));
  wait(ctx.backend->_allgather_base(all, mine));
  const int64_t last_entry = all.max().item<int64_t>();
  if (left < last_entry) {
    detail << "rank " << ctx.rank << " left the barrier " << (last_entry - left)
           << " ns before the last rank entered; ";
  }
}

}  // namespace

const std::vector<CollectiveCheck>& all_collective_checks() {
  static const std::vector<CollectiveCheck> checks{
      CollectiveCheck::broadcast,       CollectiveCheck::reduce,
      CollectiveCheck::allreduce,       CollectiveCheck::allgather,
      CollectiveCheck::alltoall_uneven, CollectiveCheck::send_recv_ring,
      CollectiveCheck::barrier};
  return checks;
}

const char* to_string(CollectiveCheck check) {
  switch (check) {
    case CollectiveCheck::broadcast: return "broadcast";
    case CollectiveCheck::reduce: return "reduce";
    case CollectiveCheck::allreduce: return "allreduce";
    case CollectiveCheck::allgather: return "allgather";
    case CollectiveCheck::alltoall_uneven: return "alltoall_uneven";
    case CollectiveCheck::send_recv_ring: return "send_recv_ring";
    case CollectiveCheck::barrier: return "barrier";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown CollectiveCheck");
}

CheckResult run_collective_check(RankContext& ctx, CollectiveCheck check, at::ScalarType dtype) {
  CheckResult result;
  result.name = std::string(to_string(check)) + "/" + c10::toString(dtype);
  std::ostringstream detail;
  switch (check) {
    case CollectiveCheck::broadcast: check_broadcast(ctx, dtype, detail); break;
    case CollectiveCheck::reduce: check_reduce(ctx, dtype, detail); break;
    case CollectiveCheck::allreduce: check_allreduce(ctx, dtype, detail); break;
    case CollectiveCheck::allgather: check_allgather(ctx, dtype, detail); break;
    case CollectiveCheck::alltoall_uneven: check_alltoall_uneven(ctx, dtype, detail); break;
    case CollectiveCheck::send_recv_ring:
      if (ctx.world_size == 1) {
        result.ok = result.skipped = true;
        result.detail = "needs two ranks";
        return result;
      }
      check_send_recv_ring(ctx, dtype, detail);
      break;
    case CollectiveCheck::barrier: check_barrier(ctx, detail); break;
  }
  result.detail = detail.str();
  result.ok = result.detail.empty();
  return result;
}

std::vector<CheckResult> run_collective_checks(RankContext& ctx,
                                               const std::vector<at::ScalarType>& dtypes) {
  std::vector<CheckResult> results;
  for (at::ScalarType dtype : dtypes) {
    for (CollectiveCheck check : all_collective_checks()) {
      results.push_back(run_collective_check(ctx, check, dtype));
    }
  }
  return results;
}

}  // namespace mfsdp
