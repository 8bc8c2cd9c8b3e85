#include "sim/tracing_backend.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>

namespace mfsdp {
namespace {

bool holds_data(const at::Tensor& t) { return !t.is_meta(); }

// Work that is complete from the start: wait() returns at once.
class DoneWork final : public c10d::Work {
 public:
  DoneWork() { finish(); }
};

}  // namespace

const char* to_string(TraceGroup group) {
  switch (group) {
    case TraceGroup::world: return "world";
    case TraceGroup::shard: return "shard";
    case TraceGroup::replicate: return "replicate";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown TraceGroup");
}

c10::intrusive_ptr<c10d::Work> TracingBackend::done(CollectiveKind kind, int64_t bytes) {
  log_->push_back(TracedCall{kind, bytes, group_});
  return c10::make_intrusive<DoneWork>();
}

c10::intrusive_ptr<c10d::Work> TracingBackend::broadcast(std::vector<at::Tensor>& ts, const c10d::BroadcastOptions&) {
  TORCH_CHECK(ts.size() == 1, "trace: broadcast of ", ts.size(), " tensors");
  return done(CollectiveKind::broadcast, static_cast<int64_t>(ts[0].nbytes()));
}

c10::intrusive_ptr<c10d::Work> TracingBackend::allreduce(std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) {
  TORCH_CHECK(ts.size() == 1, "trace: all-reduce of ", ts.size(), " tensors");
  if (holds_data(ts[0]) && o.reduceOp == c10d::ReduceOp::SUM) ts[0].mul_(getSize());
  return done(CollectiveKind::allreduce, static_cast<int64_t>(ts[0].nbytes()));
}

c10::intrusive_ptr<c10d::Work> TracingBackend::reduce(std::vector<at::Tensor>& ts, const c10d::ReduceOptions& o) {
  TORCH_CHECK(ts.size() == 1, "trace: reduce of ", ts.size(), " tensors");
  if (holds_data(ts[0]) && o.reduceOp == c10d::ReduceOp::SUM && o.rootRank == getRank()) ts[0].mul_(getSize());
  return done(CollectiveKind::reduce, static_cast<int64_t>(ts[0].nbytes()));
}

c10::intrusive_ptr<c10d::Work> TracingBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "trace: all-gather of several tensors");
  for (at::Tensor& out : outputs[0])
    if (holds_data(out)) out.copy_(inputs[0]);
  return done(CollectiveKind::allgather, static_cast<int64_t>(inputs[0].nbytes()) * getSize());
}

c10::intrusive_ptr<c10d::Work> TracingBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                               const c10d::AllgatherOptions&) {
  if (holds_data(output)) output.view({getSize(), -1}).copy_(input.reshape({1, -1}));
  return done(CollectiveKind::allgather, static_cast<int64_t>(output.nbytes()));
}

c10::intrusive_ptr<c10d::Work> TracingBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                              std::vector<std::vector<at::Tensor>>& inputs,
                                                              const c10d::ReduceScatterOptions& o) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "trace: reduce-scatter of several tensors");
  int64_t bytes = 0;
  for (const at::Tensor& t : inputs[0]) bytes += static_cast<int64_t>(t.nbytes());
  if (holds_data(outputs[0])) {
    outputs[0].copy_(inputs[0].at(getRank()));
    if (o.reduceOp == c10d::ReduceOp::SUM) outputs[0].mul_(getSize());
  }
  return done(CollectiveKind::reduce_scatter, bytes);
}

c10::intrusive_ptr<c10d::Work> TracingBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                    const c10d::ReduceScatterOptions& o) {
  if (holds_data(output)) {
    output.copy_(input.view({getSize(), -1})[getRank()].view(output.sizes()));
    if (o.reduceOp == c10d::ReduceOp::SUM) output.mul_(getSize());
  }
  return done(CollectiveKind::reduce_scatter, static_cast<int64_t>(input.nbytes()));
}

c10::intrusive_ptr<c10d::Work> TracingBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                             std::vector<int64_t>& output_splits,
                                                             std::vector<int64_t>& input_splits,
                                                             const c10d::AllToAllOptions&) {
  TORCH_CHECK(!holds_data(output) || output.numel() == 0, "trace: an all-to-all of data tensors (only meta tensors are traced)");
  const int W = getSize(), me = getRank();
  const int64_t elem = static_cast<int64_t>(input.element_size());
  auto split_or_even = [&](const std::vector<int64_t>& splits, const at::Tensor& t, int r) {
    return splits.empty() ? t.numel() / W : splits.at(r);
  };
  int64_t sent = 0, received = 0, most_to_one = 0, most_from_one = 0;
  for (int r = 0; r < W; ++r) {
    if (r == me) continue;
    const int64_t s = split_or_even(input_splits, input, r), g = split_or_even(output_splits, output, r);
    sent += s;
    received += g;
    most_to_one = std::max(most_to_one, s);
    most_from_one = std::max(most_from_one, g);
  }
  // The busiest rank of the group: this one, or a destination that every rank sends as much as
  // this one sends it (or a source that sends everyone what it sends this one).
  const int64_t busiest = std::max({sent, received, (W - 1) * most_to_one, (W - 1) * most_from_one});
  return done(CollectiveKind::alltoall, busiest * elem);
}

c10::intrusive_ptr<c10d::Work> TracingBackend::barrier(const c10d::BarrierOptions&) {
  return done(CollectiveKind::allreduce, 4);  // what a barrier costs: a one-element all-reduce
}

}  // namespace mfsdp
